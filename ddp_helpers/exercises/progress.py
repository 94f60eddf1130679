"""A lesson's progress table: every exercise checked against what the notebook defines."""

from __future__ import annotations

from .model import Exercise, Result, notebook_namespace
from .texts import MESSAGES, Texts, and_list
from .verdicts import CheckStatus


def evaluate_all(exercises: list[Exercise], namespace: dict) -> list[Result]:
    """Each exercise checked against the object of its name in a namespace (or missing)."""
    results = []
    for ex in exercises:
        if ex.name in namespace:
            results.append(ex.evaluate_unless_passed(namespace[ex.name]))
        else:
            results.append(Result(ex.id, CheckStatus.MISSING, "missing", texts=ex.texts))
    return results


def progress(exercises: list[Exercise], lesson: str, namespace: dict | None = None) -> None:
    """Check every exercise of a lesson against what the notebook defines; print a table,
    the core path's exercises apart from the optional Going further's."""
    if namespace is None:
        namespace = notebook_namespace()
    results = evaluate_all(exercises, namespace)
    core = [(ex, r) for ex, r in zip(exercises, results, strict=True) if not ex.further]
    further = [(ex, r) for ex, r in zip(exercises, results, strict=True) if ex.further]
    header = "progress_core" if further else "progress_header"
    _progress_table(MESSAGES[header].format(lesson=lesson, **_counts(core)), core)
    if further and all(r.status is CheckStatus.MISSING for _, r in further):
        ids = [ex.id for ex, _ in further]  # the notebook has not come to them yet
        key = "progress_further_ahead" if len(ids) == 1 else "progress_further_ahead_many"
        print(Texts().text(key, ids=ids[0] if len(ids) == 1 else and_list(ids)))
    elif further:
        _progress_table(MESSAGES["progress_further"].format(**_counts(further)), further)


def _counts(rows) -> dict[str, int]:
    return {"passed": sum(r.passed for _, r in rows), "total": len(rows)}


def _progress_table(header: str, rows) -> None:
    print(header)
    for ex, r in rows:
        optional = ex.further and r.status is CheckStatus.MISSING
        status = MESSAGES["further_missing"] if optional else MESSAGES["status_names"][r.status]
        print(f"  {ex.id}  {ex.name:<24} {status}")
