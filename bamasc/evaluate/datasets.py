"""Benchmark datasets in their published formats: GSM8K JSONL, MBPP JSON or JSONL, MATH JSON files or JSONL.

Every loader returns a `Dataset`: the items it could read and, for each row it
could not, a `Problem` naming the file, the line and the field. A bad row
raises `DatasetError` unless `skip_bad` is set; then it is reported and left
out, and every other row is kept.
"""

from __future__ import annotations

import json
import os

from bamasc.records import record
from bamasc.rows import RowError, decode_text, parse_json, parse_line, parse_lines, skip_space
from bamasc.runtime.execute import mbpp_prompt
from bamasc.runtime.extract import last_boxed

KINDS = ("gsm8k", "mbpp", "math")
# The MBPP paper's split by task id; the BAMAS paper scores on "test".
MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
_ID_FIELDS = ("id", "task_id", "unique_id")


@record
class Item:
    id: str
    prompt: str  # what the system is asked
    answer: str  # GSM8K and MATH: the reference answer; MBPP: the reference code
    solution: str = ""  # the worked solution (GSM8K, MATH)
    tests: tuple[str, ...] = ()  # MBPP: the asserts scored against
    setup: str = ""  # MBPP: test_setup_code
    imports: tuple[str, ...] = ()  # MBPP (sanitized release): test_imports
    challenge_tests: tuple[str, ...] = ()  # MBPP: challenge_test_list (not scored by default)
    level: str = ""  # MATH
    subject: str = ""  # MATH: `type` in the original release, `subject` in MATH-500
    source: str = ""  # file:line the item came from


@record
class Problem:
    file: str
    line: int
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.message}" if self.field is None else f"{where}: field '{self.field}': {self.message}"


class DatasetError(ValueError):
    """A row that cannot be read, raised when bad rows are not skipped."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class Dataset:
    """The items of one file (or folder), in file order, and the rows left out."""

    def __init__(self, kind: str, path: str, items: list[Item], problems: list[Problem]) -> None:
        self.kind = kind
        self.path = path
        self.items = items
        self.problems = problems

    def __len__(self) -> int:
        return len(self.items)

    def by_id(self) -> dict[str, Item]:
        return {item.id: item for item in self.items}


class _Bad(Exception):
    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def load(path: str, kind: str, skip_bad: bool = False, split: str | None = None, rows: dict | None = None) -> Dataset:
    """Read `path` as a `kind` dataset (gsm8k, mbpp or math); `split` selects MBPP task ids. `rows`, when
    given, gets each item's row as read, by the item's id (what a scorer of rows reads)."""
    if kind not in KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {', '.join(KINDS)}")
    if split is not None and kind != "mbpp":
        raise ValueError("--split applies to MBPP only")
    if split is not None and split not in MBPP_SPLITS:
        raise ValueError(f"unknown MBPP split {split!r}; expected one of {', '.join(MBPP_SPLITS)}")
    parse = {"gsm8k": _gsm8k_item, "mbpp": _mbpp_item, "math": _math_item}[kind]
    items: list[Item] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for file, line, row, default_id in _rows(path, problems, skip_bad):
        try:
            if not isinstance(row, dict):
                raise _Bad(None, "a row must be a JSON object")
            item = parse(row, default_id, f"{file}:{line}")
            if item.id in seen:
                raise _Bad(_id_field(row), f"duplicate id {item.id!r}")
        except _Bad as bad:
            _report(Problem(file, line, bad.field, bad.message), problems, skip_bad)
            continue
        seen.add(item.id)
        if split is None or _in_split(item.id, split):
            items.append(item)
            if rows is not None:
                rows[item.id] = row
    return Dataset(kind, path, items, problems)


def item_from_row(kind: str, row: dict, default_id: str = "1") -> Item:
    """One row of a `kind` dataset as an item; raises DatasetError naming the field at fault."""
    parse = {"gsm8k": _gsm8k_item, "mbpp": _mbpp_item, "math": _math_item}[kind]
    try:
        return parse(row, default_id, "row")
    except _Bad as bad:
        raise DatasetError(f"row {default_id}: {bad.field or 'row'}: {bad.message}") from None


def _report(problem: Problem, problems: list[Problem], skip_bad: bool) -> None:
    if not skip_bad:
        raise DatasetError(problem)
    problems.append(problem)


def _rows(path: str, problems: list[Problem], skip_bad: bool):
    """(file, line, row, default id) for every row: JSONL lines, a JSON array or object, or a folder of them."""
    if os.path.isdir(path):
        files = sorted(
            os.path.join(folder, name)
            for folder, _, names in os.walk(path)
            for name in names
            if name.endswith((".json", ".jsonl"))
        )
        for file in files:
            relative = os.path.relpath(file, path).replace(os.sep, "/")
            for file_, line, row, default_id in _file_rows(file, problems, skip_bad):
                # One problem per file (the original MATH release): the file names the item.
                yield file_, line, row, relative if default_id is None else f"{relative}:{default_id}"
        return
    for file, line, row, default_id in _file_rows(path, problems, skip_bad):
        yield file, line, row, "1" if default_id is None else default_id


def _file_rows(path: str, problems: list[Problem], skip_bad: bool):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as problem:
        _report(Problem(path, 1, None, f"cannot read the file: {problem.strerror}"), problems, skip_bad)
        return
    stripped = data.lstrip()
    if path.endswith(".json") or (stripped.startswith(b"[") and not path.endswith(".jsonl")):
        try:
            text = decode_text(data)
        except RowError as problem:
            # One bad byte leaves the rest of a JSON document unreadable, so the file is the row at fault.
            _report(Problem(path, problem.line or 1, None, str(problem)), problems, skip_bad)
            return
        yield from _json_rows(path, text.removeprefix("\ufeff"), problems, skip_bad)
        return
    # JSON Lines end at b"\n" alone; str.splitlines would also split a row at U+2028 inside a string.
    for number, row, problem in parse_lines(data.split(b"\n")):
        if problem is not None:
            _report(Problem(path, number, None, str(problem)), problems, skip_bad)
            continue
        yield path, number, row, str(number)


def _json_rows(path: str, text: str, problems: list[Problem], skip_bad: bool):
    """A JSON file: one object (default id None: the file names it), or an array of objects,
    each with the line it starts on and its 1-based position."""
    position = skip_space(text, 0)
    if not text.startswith("[", position):
        try:
            row = parse_line(text)
        except RowError as problem:
            _report(Problem(path, problem.line or _line_of(text, position), None, str(problem)), problems, skip_bad)
            return
        yield path, _line_of(text, position), row, None
        return
    position = skip_space(text, position + 1)
    index = 0
    while position < len(text) and text[position] != "]":
        try:
            row, end = parse_json(text, position)
        except RowError as problem:
            # The rest of an array cannot be resynchronised reliably: report and stop.
            _report(Problem(path, problem.line or _line_of(text, position), None, str(problem)), problems, skip_bad)
            return
        index += 1
        yield path, _line_of(text, position), row, str(index)
        position = skip_space(text, end)
        if text.startswith(",", position):
            position = skip_space(text, position + 1)
        elif not text.startswith("]", position):
            _report(Problem(path, _line_of(text, position), None, "not JSON: expected ',' or ']'"), problems, skip_bad)
            return


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _id_field(row: dict) -> str | None:
    return next((field for field in _ID_FIELDS if row.get(field) is not None), None)


def _row_id(row: dict, default_id: str) -> str:
    field = _id_field(row)
    if field is None:
        return default_id
    value = row[field]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Bad(field, f"an id must be a string or a whole number, not {json.dumps(value)[:40]}")
    return str(value)


def _text(row: dict, *fields: str, required: bool = True) -> str:
    for field in fields:
        value = row.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _Bad(field, f"must be a string, not {type(value).__name__}")
        if required and not value.strip():
            raise _Bad(field, "is empty")
        return value
    if required:
        raise _Bad(fields[0], "is missing" if len(fields) == 1 else f"is missing (also looked for {', '.join(fields[1:])})")
    return ""


def _strings(row: dict, field: str, required: bool) -> tuple[str, ...]:
    value = row.get(field)
    if value is None:
        if required:
            raise _Bad(field, "is missing")
        return ()
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise _Bad(field, "must be a list of strings")
    if required and not value:
        raise _Bad(field, "is empty")
    return tuple(value)


# ---------------------------------------------------------------- GSM8K


def gsm8k_reference(answer: str) -> str:
    """The number after the last `####` of a GSM8K answer, commas removed."""
    marker = answer.rfind("####")
    if marker < 0:
        raise _Bad("answer", "does not end with '#### <number>'")
    number = answer[marker + 4 :].strip().replace(",", "").replace("$", "").strip()
    try:
        float(number)
    except ValueError:
        raise _Bad("answer", f"'#### {number[:30]}' is not a number") from None
    return number


def _gsm8k_item(row: dict, default_id: str, source: str) -> Item:
    question = _text(row, "question")
    solution = _text(row, "answer")
    return Item(_row_id(row, default_id), question, gsm8k_reference(solution), solution=solution, source=source)


# ---------------------------------------------------------------- MBPP


def _mbpp_item(row: dict, default_id: str, source: str) -> Item:
    if row.get("task_id") is None:
        raise _Bad("task_id", "is missing")
    task_id = row["task_id"]
    if isinstance(task_id, bool) or not (isinstance(task_id, int) or (isinstance(task_id, str) and task_id.isdigit())):
        raise _Bad("task_id", f"must be a whole number, not {json.dumps(task_id)[:40]}")
    text = _text(row, "text", "prompt")  # the sanitized release calls the description `prompt`
    code = _text(row, "code")
    tests = _strings(row, "test_list", required=True)
    setup = _text(row, "test_setup_code", required=False)
    return Item(
        str(int(task_id)),
        mbpp_prompt(text, tests),
        code,
        tests=tests,
        setup=setup,
        imports=_strings(row, "test_imports", required=False),
        challenge_tests=_strings(row, "challenge_test_list", required=False),
        source=source,
    )


def _in_split(task_id: str, split: str) -> bool:
    low, high = MBPP_SPLITS[split]
    return task_id.isdigit() and low <= int(task_id) <= high


# ---------------------------------------------------------------- MATH


def _math_item(row: dict, default_id: str, source: str) -> Item:
    problem = _text(row, "problem")
    solution = _text(row, "solution", required=False)
    answer = row.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float, type(None))):
        raise _Bad("answer", f"must be a string or a number, not {type(answer).__name__}")
    if answer is not None and str(answer).strip():
        reference = str(answer).strip()
    else:
        if not solution:
            raise _Bad("solution", "is missing, and the row has no 'answer'")
        reference = last_boxed(solution)
        if not reference:
            raise _Bad("solution", "has no \\boxed{...} answer, and the row has no 'answer'")
    level = row.get("level", "")
    subject = row.get("type", row.get("subject", ""))
    return Item(
        _row_id(row, default_id), problem, reference, solution=solution, level=str(level), subject=str(subject),
        source=source,
    )
