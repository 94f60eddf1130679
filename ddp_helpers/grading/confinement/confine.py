"""Start a command inside a submission's limits: its cgroups, its RLIMIT_DATA, then exec.

`python -m ddp_helpers.grading.confinement.confine [--cgroup DIR]... [--data BYTES] [--fsize
BYTES] -- COMMAND...` joins each cgroup (so the command and all it starts are counted there
from the first instruction on), sets the data limit and the size of any one file it may
write (RLIMIT_FSIZE: past it a write fails, EFBIG; Python ignores the SIGXFSZ that comes
with it), and replaces itself with the command.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m ddp_helpers.grading.confinement.confine")
    parser.add_argument("--cgroup", action="append", default=[], metavar="DIR")
    parser.add_argument("--data", type=int, metavar="BYTES")
    parser.add_argument("--fsize", type=int, metavar="BYTES")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    for folder in args.cgroup:
        with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    if args.data:
        resource.setrlimit(resource.RLIMIT_DATA, (args.data, args.data))
    if args.fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, args.fsize))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
