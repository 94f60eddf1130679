"""The `%%ddp` cell magic: run a notebook cell's body on N ranks (every lesson)."""

from __future__ import annotations

import re
import types

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .i18n import messages
from .launcher import DistributedError, run_cell

MESSAGES = messages(
    "magic",
    {
        "not_sent": (
            "\n\nNote: `{name}` exists in the notebook but could not be sent to the ranks "
            "({reason}). Create it inside the %%ddp cell, or pass picklable data instead."
        ),
        "compile": "The %%ddp cell does not compile: {error}",
    },
)

_NAME_ERROR = re.compile(r"name '([^']+)' is not defined")


def _namespace_for(code: types.CodeType, user_ns: dict, hidden: dict) -> tuple[dict, dict]:
    """The notebook variables the cell uses, pickled by value; and those that cannot be."""
    from .launcher.pickling import dumps, names_used

    shipped, skipped = {}, {}
    for name in sorted(names_used(code)):
        if name not in user_ns or name in hidden or name.startswith("_"):
            continue
        try:
            shipped[name] = dumps(user_ns[name])
        except Exception as exc:
            skipped[name] = f"{type(exc).__name__}: {exc}"
    return shipped, skipped


@magics_class
class DDPMagics(Magics):
    @magic_arguments()
    @argument("-n", "--nprocs", type=int, default=2, help="number of ranks (processes)")
    @argument("--nnodes", type=int, default=1, help="simulated machines the ranks are spread over")
    @argument("--backend", default="auto", help="gloo, nccl or auto (nccl if enough GPUs)")
    @argument("--timeout", type=float, default=None, help="stop every rank after S seconds")
    @argument("--ordered", action="store_true", help="print rank 0's lines, then rank 1's, ...")
    @argument(
        "--no-guards",
        action="store_true",
        help="run as under torchrun: no init barrier, groups freed, a normal exit",
    )
    @cell_magic
    def ddp(self, line: str, cell: str):
        """Run the cell on every rank: %%ddp -n 4 [--nnodes 2] [--backend B] [--timeout S]
        [--ordered] [--no-guards]."""
        __tracebackhide__ = True
        args = parse_argstring(self.ddp, line)
        ip = self.shell
        source = f"%%ddp {line}\n{cell}"
        # IPython counts the running cell before running it: this cell is In[count - 1].
        filename = ip.compile.cache(source, max(ip.execution_count - 1, 0))
        try:
            # A leading newline keeps line numbers equal to the cell's, magic line included.
            code = compile("\n" + cell, filename, "exec")
        except SyntaxError as exc:
            raise UsageError(MESSAGES["compile"].format(error=exc)) from None
        shipped, skipped = _namespace_for(code, ip.user_ns, ip.user_ns_hidden)
        try:
            run_cell(
                "\n" + cell,
                args.nprocs,
                nnodes=args.nnodes,
                backend=args.backend,
                timeout=args.timeout,
                ordered=True if args.ordered else None,
                filename=filename,
                namespace=shipped,
                guards=not args.no_guards,
            )
        except DistributedError as exc:
            m = _NAME_ERROR.search(exc.exc_message or "")
            if exc.exc_type == "NameError" and m and m.group(1) in skipped:
                note = MESSAGES["not_sent"].format(name=m.group(1), reason=skipped[m.group(1)])
                exc.report += note
            raise
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def register(ipython) -> None:
    ipython.register_magics(DDPMagics)
