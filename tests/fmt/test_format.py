"""The formatter on every shipped and fixture `.bam` file, on the docs' examples, and on the layout rules one by one."""

from __future__ import annotations

import glob
import os

import pytest

from bamasc.fmt import FormatError, format_source
from bamasc.source import SourceFile, decode_source
from bamasc.syntax.parser import parse_source
from tests.conftest import EXAMPLES, ROOT, STDLIB
from tests.fmt.roundtrip import ast_text, check_round_trip, comments
from tests.helpers.docs import fenced_blocks, split_files

FIXTURES = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "**", "*.bam"), recursive=True))
CORPUS = EXAMPLES + STDLIB + FIXTURES


def _text(path: str) -> str:
    with open(path, "rb") as handle:
        return decode_source(path, handle.read())[0]


def _parses(path: str) -> bool:
    return parse_source(SourceFile(path, _text(path)))[0] is not None


PARSING = [path for path in CORPUS if _parses(path)]
BROKEN = [path for path in CORPUS if path not in PARSING]


def _id(path: str) -> str:
    return os.path.relpath(path, ROOT)


def test_the_corpus_is_the_one_expected():
    # Every example and stdlib file parses; the fixtures that do not are the syntax-error ones.
    assert len(EXAMPLES) >= 4 and len(STDLIB) >= 4 and len(FIXTURES) >= 80
    assert set(EXAMPLES + STDLIB) <= set(PARSING)
    assert all(os.path.basename(path).startswith(("syntax_", "broken")) for path in BROKEN), BROKEN
    assert len(PARSING) >= 80


@pytest.mark.parametrize("path", PARSING, ids=_id)
def test_every_file_round_trips(path):
    text = _text(path)
    formatted = format_source(text, path)
    check_round_trip(text, formatted)
    assert formatted.endswith("\n") and not formatted.endswith("\n\n")
    assert all(line == line.rstrip() for line in formatted.split("\n") if '"""' not in text)


@pytest.mark.parametrize("path", BROKEN, ids=_id)
def test_broken_files_raise_the_lint_diagnostic(path):
    text = _text(path)
    _, (expected, *_) = parse_source(SourceFile(path, text))
    with pytest.raises(FormatError) as raised:
        format_source(text, path)
    got = raised.value.diagnostic
    assert (got.code, got.span, got.message) == (expected.code, expected.span, expected.message)
    assert str(raised.value).startswith(f"{path}:{expected.span.line}:{expected.span.col}: ")


def _doc_cases():
    cases = []
    for doc in ("docs/language.md", "docs/diagnostics.md"):
        with open(os.path.join(ROOT, doc), encoding="utf-8") as handle:
            for line, _, body in fenced_blocks(handle.read()):
                for name, text in split_files(body):
                    if parse_source(SourceFile(name, text))[0] is not None:
                        cases.append(pytest.param(text, id=f"{os.path.basename(doc)}:{line}:{name}"))
    return cases


@pytest.mark.parametrize("text", _doc_cases())
def test_every_doc_example_round_trips(text):
    check_round_trip(text, format_source(text))


# ---------------------------------------------------------------- layout rules


def fmt(text: str) -> str:
    formatted = format_source(text)
    check_round_trip(text, formatted)
    return formatted


def test_attributes_align_within_a_run():
    # Trailing comments start two spaces past the widest line of the run that has one.
    text = "model m {\nprovider=openai\n  name = \"x\"   // the id\n price{input=0.1 output=0.4}\n tier=1 # strongest\n}\n"
    assert fmt(text) == (
        "model m {\n"
        "  provider = openai\n"
        '  name     = "x"  // the id\n'
        "  price    { input = 0.1  output = 0.4 }\n"
        "  tier     = 1    # strongest\n"
        "}\n"
    )


def test_a_blank_line_or_a_multi_line_attribute_ends_a_run_and_a_comment_line_does_not():
    text = (
        "role R {\n  max_output = 1\n  // note\n  reads = answer\n\n  system = \"s\"\n"
        '  prompt = """\n    {{task}}\n    """\n  a = 1\n}\n'
    )
    assert fmt(text) == (
        "role R {\n  max_output = 1\n  // note\n  reads      = answer\n\n  system = \"s\"\n"
        '  prompt = """\n    {{task}}\n    """\n  a = 1\n}\n'
    )


def test_slots_align_and_rows_and_flows_are_spaced_canonically():
    text = (
        "topology t{slot executor:Executor[1..3]\nslot c : Critic [0..2]\n"
        "require count(c,tier=1)*2<=(count(executor)+1)\nflow{d=parallel executor(task,x)\nanswer vote(d)}}"
    )
    assert fmt(text) == (
        "topology t {\n"
        "  slot executor : Executor [1..3]\n"
        "  slot c        : Critic   [0..2]\n"
        "  require count(c, tier = 1) * 2 <= (count(executor) + 1)\n"
        "  flow {\n"
        "    d = parallel executor(task, x)\n"
        "    answer vote(d)\n"
        "  }\n"
        "}\n"
    )


def test_parentheses_are_kept_where_written():
    # `a - (b - c)` needs them; `(count(a))` does not, and keeping it costs nothing.
    text = "topology t { require count(a) - (count(b) - 1) >= (count(a)) * (2 + 3) flow { answer a(task) } }\n"
    assert "require count(a) - (count(b) - 1) >= (count(a)) * (2 + 3)" in fmt(text)


def test_one_line_blocks_stay_on_one_line_and_others_are_one_item_per_line():
    text = "topology t { slot a : A [1..1]  flow { answer a(task) } }\nsystem s {\n  models = [m] budget = 10 µ$ }\n"
    assert fmt(text) == (
        "topology t { slot a : A [1..1]  flow { answer a(task) } }\n\n"
        "system s {\n  models = [m]\n  budget = 10 µ$\n}\n"
    )


def test_lists_written_over_lines_are_one_item_per_line_with_their_comments():
    text = "system s {\n  models = [a,  // first\n    // second\n    b]\n  budgets = [1,2,3,]\n}\n"
    assert fmt(text) == (
        "system s {\n"
        "  models = [\n"
        "    a,  // first\n"
        "    // second\n"
        "    b,\n"
        "  ]\n"
        "  budgets = [1, 2, 3]\n"
        "}\n"
    )


def test_literals_are_printed_as_written():
    text = 'system s { a = 16_384  b = 4e2  c = $ 0.004  d = 0.27 $/Mtok  e = "x\\"y"  f = env( "K" ) }\n'
    assert fmt(text) == 'system s { a = 16_384  b = 4e2  c = $0.004  d = 0.27 $/Mtok  e = "x\\"y"  f = env("K") }\n'


def test_triple_quoted_prompts_keep_every_byte_when_reindented():
    prompt = '"""\n\t  Solve: {{task}}   \n\n      {{previous?}}\n   """'
    text = f"role R {{\n        max_output = 8\n        prompt   =   {prompt}   // why\n}}\n"
    formatted = fmt(text)
    assert formatted == f"role R {{\n  max_output = 8\n  prompt = {prompt}  // why\n}}\n"


def test_comments_before_after_and_inside_declarations():
    text = (
        "// header\n\n// about m\nmodel // odd place\n m { // opens\n  a = 1\n  // closing note\n} // after\n"
        "topology t {\n  require count(a) // mid-row\n    <= 2\n  flow { answer a(task) }\n}\n// the end\n"
    )
    assert fmt(text) == (
        "// header\n\n// about m\n// odd place\nmodel m {  // opens\n  a = 1\n  // closing note\n}  // after\n\n"
        "topology t {\n  // mid-row\n  require count(a) <= 2\n  flow { answer a(task) }\n}\n// the end\n"
    )


def test_blank_lines_are_kept_once_and_declarations_always_parted():
    text = "\n\nimport \"a\"\nimport \"b\"\n\n\n\nimport \"c\"\nmodel m {\n\n\n  a = 1\n\n\n  b = 2\n\n}\nrole r {}\n\n\n"
    assert fmt(text) == 'import "a"\nimport "b"\n\nimport "c"\n\nmodel m {\n  a = 1\n\n  b = 2\n}\n\nrole r {}\n'


def test_an_import_split_over_lines_joins_its_paths():
    assert fmt('import "a"\n  "b" // both\n') == 'import "a" "b"  // both\n'


def test_hash_and_slashes_inside_strings_are_not_comments():
    text = 'role r { prompt = "#1 // not a comment" # a comment\n}\n'
    assert fmt(text) == 'role r {\n  prompt = "#1 // not a comment"  # a comment\n}\n'
    assert comments(text) == ["# a comment"]


def test_line_endings_tabs_and_byte_order_mark():
    text = "\ufeffmodel m {\r\n\ttier\t=\t1 // x  \r\n}\r\n"
    assert format_source(text) == "model m {\n  tier = 1  // x\n}\n"


def test_empty_and_comment_only_files():
    assert format_source("") == ""
    assert format_source("  \n\n") == ""
    assert fmt("// just this\n\n\n# and this") == "// just this\n\n# and this\n"


def test_broken_input_is_never_formatted():
    with pytest.raises(FormatError) as raised:
        format_source("model m {\n  tier = \n}\n", "bad.bam")
    diagnostic = raised.value.diagnostic
    assert diagnostic.code == "BAM001" and (diagnostic.span.file, diagnostic.span.line) == ("bad.bam", 3)
    assert raised.value.diagnostics == [diagnostic]


def test_deep_nesting_is_a_diagnostic_not_a_crash():
    text = "system s { x = " + "[" * 5000 + "]" * 5000 + " }\n"
    with pytest.raises(FormatError) as raised:
        format_source(text, "deep.bam")
    assert raised.value.diagnostic.code == "BAM001"


def test_formatting_changes_no_value():
    # ast_text compares values, raw strings included, so a reformatted file compiles the same.
    text = _text(EXAMPLES[0])
    assert ast_text(format_source(text)) == ast_text(text)
