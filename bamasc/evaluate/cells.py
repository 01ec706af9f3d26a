"""A bench run's items and what is said of them: the one tally of items, and the check of a cell read back from a file.

Whatever summarises items (a bench run's counts, a reproduction's cell, a row
of the paper's table) is computed by `tally` from the items themselves, never
read from where it was written: a cell line that says `"correct": 3` over
items that say 0 is a cell of 0 correct. A cell line that cannot be read as
one (`read_cells`) is an error naming the file, the line and the field.
"""

from __future__ import annotations

import math
from collections import Counter

from bamasc.evaluate.paper_rows import ReproduceError
from bamasc.rows import lines, parse_line, RowError

# What `tally` derives from the items; a cell line's own values of these are checked, then replaced.
TALLIED = ("tasks", "correct", "accuracy", "mean_cost", "p95_cost", "max_cost", "overruns", "templates", "statuses")


class CellError(ReproduceError):
    """A line of the cells file that is not a cell: the message names the file, the line and the field."""


def tally(items: list[dict]) -> dict:
    """Accuracy, cost statistics, overruns, the template mix and the statuses of a run's items."""
    costs = [item["cost"] for item in items]
    correct = sum(item["correct"] for item in items)
    return {
        "tasks": len(items),
        "correct": correct,
        "accuracy": correct / len(items) if items else 0.0,
        "mean_cost": round(sum(costs) / len(costs), 6) if costs else 0.0,
        "p95_cost": round(percentile(costs, 95), 6) if costs else 0.0,
        "max_cost": round(max(costs), 6) if costs else 0.0,
        "overruns": sum(item["overran"] for item in items),
        "templates": dict(Counter(item["template"] for item in items if item["template"] is not None).most_common()),
        "statuses": dict(Counter(item["status"] for item in items).most_common()),
    }


def percentile(values: list[float], percent: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `percent`% of values at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def read_cells(path: str, task_ids: list[str]) -> tuple[dict[tuple, dict], list[str]]:
    """Each cell of the file by its key (system, method, budget), its tallies recomputed from its items,
    and a note for each line whose own tallies said otherwise. A last line without its newline was cut
    short by a crash and is not a cell; any other line that is not one raises CellError."""
    finished: dict[tuple, dict] = {}
    notes: list[str] = []
    for number, raw in lines(path):
        where = f"{path}:{number}"
        if not raw.endswith(b"\n"):
            break  # cut short by a crash: the cell runs again
        if not raw.strip():
            continue
        try:
            data = parse_line(raw)
        except RowError as problem:
            raise CellError(f"{where}: {problem}") from None
        cell, said = check_cell(data, where, task_ids)
        notes.extend(said)
        finished.setdefault(cell["key"], cell["line"])
    return finished, notes


def check_cell(data, where: str, task_ids: list[str]) -> tuple[dict, list[str]]:
    """{key, line} of one cell line, its tallies recomputed, and notes on the tallies it said otherwise."""
    if not isinstance(data, dict):
        raise CellError(f"{where}: a cell is a JSON object, not {type(data).__name__}")
    key = data.get("cell")
    if not (isinstance(key, list) and len(key) == 3 and isinstance(key[0], str) and isinstance(key[1], str)
            and _is_number(key[2]) and key[2] > 0):
        raise CellError(f"{where}: field 'cell' is {_shown(key)}, not [system, method, budget in µ$]")
    for field, kind in (("label", str), ("by_policy", bool), ("feasible", bool)):
        if not isinstance(data.get(field), kind):
            raise CellError(f"{where}: field '{field}' is {_shown(data.get(field))}, not {_KINDS[kind]}")
    line = dict(data)
    notes: list[str] = []
    if data["feasible"]:
        if not isinstance(data.get("template"), str):
            raise CellError(f"{where}: field 'template' is {_shown(data.get('template'))}, not a template name")
        if not (_is_number(data.get("bound")) and data["bound"] >= 0):
            raise CellError(f"{where}: field 'bound' is {_shown(data.get('bound'))}, not an amount of µ$")
        items = _items(data.get("items"), where, task_ids)
        derived = tally(items)
        for field in TALLIED:
            said = data.get(field)
            if field in data and not _same(said, derived[field]):
                notes.append(f"{where}: field '{field}' says {_shown(said)}, its items {_shown(derived[field])}; "
                             "the items are counted")
        line.update(derived)
    else:
        for field in TALLIED:  # an infeasible cell ran nothing: there is nothing to count
            line.pop(field, None)
    return {"key": (key[0], key[1], float(key[2])), "line": line}, notes


def _items(items, where: str, task_ids: list[str]) -> list[dict]:
    if not isinstance(items, list):
        raise CellError(f"{where}: field 'items' is {_shown(items)}, not a list of the cell's tasks")
    for index, item in enumerate(items):
        field = f"items[{index}]"
        if not isinstance(item, dict):
            raise CellError(f"{where}: field '{field}' is {_shown(item)}, not an object")
        checks = (("id", lambda v: isinstance(v, str), "a task id"),
                  ("template", lambda v: v is None or isinstance(v, str), "a template name or null"),
                  ("status", lambda v: isinstance(v, str), "a status"),
                  ("cost", lambda v: _is_number(v) and v >= 0, "an amount of µ$"),
                  ("overran", lambda v: isinstance(v, bool), "true or false"),
                  ("correct", lambda v: isinstance(v, bool), "true or false"))
        for name, good, what in checks:
            if not good(item.get(name)):
                raise CellError(f"{where}: field '{field}.{name}' is {_shown(item.get(name))}, not {what}")
    ids = [item["id"] for item in items]
    if ids != list(task_ids):
        raise CellError(f"{where}: field 'items' holds tasks {_shown(ids)}, not the reproduction's "
                        f"{_shown(list(task_ids))}")
    return items


_KINDS = {str: "a string", bool: "true or false"}


def _is_number(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _same(said, derived) -> bool:
    if _is_number(said) and _is_number(derived):
        return abs(said - derived) <= 1e-6 * max(1.0, abs(derived))
    return said == derived


def _shown(value) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
