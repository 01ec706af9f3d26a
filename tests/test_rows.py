"""JSON Lines reading: one loop numbers the lines, skips blank ones and hands back each row or its problem."""

from __future__ import annotations

import pytest

from bamasc.rows import RowError, drop_torn_line, parse_lines, read_jsonl


def test_lines_are_numbered_from_one_counting_blank_lines_and_bad_rows_come_back_as_problems():
    found = list(parse_lines([b'{"a": 1}\n', b"\n", b"  \r\n", b'{"a":\n', b"[2]"]))
    assert [(number, value) for number, value, _ in found] == [(1, {"a": 1}), (4, None), (5, [2])]
    assert [problem is None for _, _, problem in found] == [True, False, True]
    assert isinstance(found[1][2], RowError)


def test_a_row_cut_short_reports_its_column_as_the_caller_split_the_line():
    # With its newline still on, the parser has read past the row's end.
    ((_, _, kept),) = parse_lines([b'{"a":\n'])
    ((_, _, split),) = parse_lines([b'{"a":'])
    assert str(kept) == "not JSON (column 1): Expecting value"
    assert str(split) == "not JSON (column 6): Expecting value"


def test_another_parser_is_used_as_given_and_only_its_row_errors_are_problems():
    def parse(line: str):
        if line.startswith("x"):
            raise RowError("not a row", "starts with x")
        return line.strip()

    assert [(n, v, str(p) if p else None) for n, v, p in parse_lines(["a\n", "x\n", "b"], parse)] == [
        (1, "a", None),
        (2, None, "not a row: starts with x"),
        (3, "b", None),
    ]
    with pytest.raises(ZeroDivisionError):
        list(parse_lines(["a"], lambda line: 1 / 0))


def test_read_jsonl_names_file_and_line_and_skips_bad_rows_when_asked(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n\nNaN\n{"a": 2}\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:3: not JSON: NaN is not a JSON number"):
        read_jsonl(str(path), lambda value, number, where: value, ValueError)
    values, problems = read_jsonl(str(path), lambda value, number, where: (number, value), ValueError, skip_bad=True)
    assert values == [(1, {"a": 1}), (4, {"a": 2})]
    assert problems == [f"{path}:3: not JSON: NaN is not a JSON number"]


def test_a_torn_last_line_is_cut_and_a_whole_file_is_left_alone(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a"')
    drop_torn_line(str(path))
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    drop_torn_line(str(path))
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    path.write_bytes(b'{"a"')
    drop_torn_line(str(path))
    assert path.read_bytes() == b""
    drop_torn_line(str(tmp_path / "missing.jsonl"))
    assert not (tmp_path / "missing.jsonl").exists()

