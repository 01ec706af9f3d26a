"""Front-end input: a byte-order mark, long strings in linear memory, stray words, short excerpts, case slips."""

from __future__ import annotations

import tracemalloc

from bamasc.diagnostics import render_text
from bamasc.lint import lint_paths
from bamasc.source import excerpt_window

ROLE = 'role R {\n  max_output = 8\n  prompt = "{{task}}"\n}\n'


def lint(tmp_path, data: bytes):
    path = tmp_path / "f.bam"
    path.write_bytes(data)
    return lint_paths([str(path)])


def test_a_byte_order_mark_is_accepted(tmp_path):
    assert lint(tmp_path, b"\xef\xbb\xbf" + ROLE.encode()).diagnostics == []


def test_a_long_string_lints_in_memory_linear_in_its_length(tmp_path):
    size = 2_000_000
    data = ('role R {\n  max_output = 8\n  prompt = "' + "x" * size + '"\n}\n').encode()
    tracemalloc.start()
    try:
        result = lint(tmp_path, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.diagnostics == []
    assert peak < 8 * size, peak  # was over 150 times the size


def test_a_stray_word_after_a_value_is_reported_at_the_word(tmp_path):
    result = lint(tmp_path, b'role R {\n  max_output = 384 words\n  prompt = "{{task}}"\n}\n')
    [found] = result.diagnostics
    assert (found.code, found.span.line, found.span.col) == ("BAM001", 2, 20)
    assert "words" in found.message and "tokens" in found.hint


def test_a_token_count_may_carry_its_unit(tmp_path):
    assert lint(tmp_path, b'role R {\n  max_output = 384 tokens\n  prompt = "{{task}}"\n}\n').diagnostics == []
    [found] = lint(tmp_path, b'role R {\n  max_output = 384 s\n  prompt = "{{task}}"\n}\n').diagnostics
    assert found.code == "BAM208"


def test_a_diagnostic_on_a_long_line_shows_a_short_excerpt(tmp_path):
    line = 'role R { prompt = "' + "x" * 100_000 + '" max_output = 384 words }\n'
    result = lint(tmp_path, line.encode())
    text = render_text(result.diagnostics, result.sources)
    assert len(text) < 600
    excerpt, caret = text.splitlines()[1:3]
    assert excerpt[caret.index("^"):].startswith("words")


def test_excerpt_window_keeps_the_caret_on_its_column():
    text = "a" * 1000 + "TARGET" + "b" * 1000
    shown, start, end = excerpt_window(text, 1000, 1006)
    assert shown[start:end] == "TARGET"
    assert shown.startswith("...") and shown.endswith("...")
    assert len(shown) <= 126
    assert excerpt_window("short", 1, 3) == ("short", 1, 3)


def test_a_provider_written_in_another_case_gets_a_suggestion(tmp_path):
    source = 'model m {\n  provider = OpenAI\n  name = "x"\n  price { input = 1  output = 1 }\n  tier = 1\n}\n'
    [found] = lint(tmp_path, source.encode()).diagnostics
    assert found.code == "BAM110" and "did you mean 'openai'?" in found.hint


def test_a_plan_of_a_file_with_a_byte_order_mark_records_its_bytes_and_reloads(tmp_path):
    import hashlib
    import json
    import os

    from bamasc.cli import main
    from tests.conftest import ROOT

    source = tmp_path / "gsm8k.bam"
    source.write_bytes(b"\xef\xbb\xbf" + open(os.path.join(ROOT, "examples", "gsm8k.bam"), "rb").read())
    plan = tmp_path / "plan.json"
    assert main(["compile", str(source), "--system", "gsm8k", "-o", str(plan)]) == 0
    recorded = {entry["path"]: entry["sha256"] for entry in json.loads(plan.read_text())["sources"]}
    assert recorded["gsm8k.bam"] == hashlib.sha256(source.read_bytes()).hexdigest()  # the bytes on disk, mark included
    assert main(["explain", str(plan), "--system", "gsm8k"]) == 0
