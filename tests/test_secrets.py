"""Keys in a `.bam` file: each way of writing one is an error, and no output format prints it."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from bamasc.cli import main
from bamasc.diagnostics import render_text
from bamasc.lint import lint_paths
from bamasc.secrets import key_ranges, looks_like_key, mask_keys

KEY = "sk-proj-Zq81vXw0Lm3Nb7Tc2Yd5Ke9Rf4Hg6Ja1"
# A password need not look like a key; before '@' it is hidden all the same.
PASSWORD = "hunter2-correct-horse"
BODY = KEY[8:]  # what a partial leak would show

MODEL = """\
model m {{
  provider = openai
  name     = "gpt-4.1-nano"
{line}
  price    {{ input = 0.10  output = 0.40 }}
  tier     = 1
}}
"""
CASES = {
    "api_key-literal": (f'  api_key  = "{KEY}"', "BAM205", KEY),
    "api_key-literal-not-key-shaped": (f'  api_key  = "{PASSWORD}"', "BAM205", PASSWORD),
    "base_url-userinfo": (f'  base_url = "https://me:{KEY}@proxy.example.com/v1"', "BAM205", KEY),
    "base_url-password": (f'  base_url = "https://me:{PASSWORD}@proxy.example.com/v1"', "BAM205", PASSWORD),
    "base_url-query": (f'  base_url = "https://proxy.example.com/v1?key={KEY}"', "BAM205", KEY),
    "env-name-is-a-key": (f'  api_key  = env("{KEY}")', "BAM211", KEY),
    "env-name-not-exportable": ('  api_key  = env("MY-PROXY-KEY")', "BAM211", "MY-PROXY-KEY"),
    "unquoted-key": (f"  api_key  = {KEY}", "BAM001", BODY),
}
FORMATS = ("text", "json", "sarif", "github")


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


def fragments(secret: str) -> list[str]:
    """Pieces of the secret that no output may hold: it whole, and any 8 characters past its prefix."""
    return [secret] + [secret[i : i + 8] for i in range(3, len(secret) - 8)]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("output", FORMATS)
def test_no_output_format_prints_the_secret(write_bam, case, output):
    line, code, secret = CASES[case]
    path = write_bam(MODEL.format(line=line))
    status, printed = run(["lint", "--format", output, path])
    assert status == 1
    assert code in printed
    for piece in fragments(secret):
        assert piece not in printed, f"{output} output shows {piece!r}:\n{printed}"
    if output in ("json", "sarif"):
        json.loads(printed.split("\n1 file checked")[0])


@pytest.mark.parametrize("case", sorted(CASES))
def test_compile_stops_without_printing_the_secret(write_bam, case, tmp_path):
    line, code, secret = CASES[case]
    path = write_bam(MODEL.format(line=line) + "system s { models = [m]  topologies = []  budget = 100 }\n")
    status, printed = run(["compile", path, "-o", str(tmp_path / "plan.json")])
    assert status == 1 and code in printed and not (tmp_path / "plan.json").exists()
    assert all(piece not in printed for piece in fragments(secret))


def test_the_excerpt_keeps_its_width_so_the_caret_stays_under_the_value(write_bam):
    path = write_bam(MODEL.format(line=f'  api_key  = "{KEY}"  name = 5'))
    result = lint_paths([path])
    assert [d.code for d in result.diagnostics] == ["BAM205", "BAM109"]  # `name` is given twice
    text = render_text(result.diagnostics, result.sources)
    masked = f'  api_key  = "{"*" * len(KEY)}"'
    # Every diagnostic that shows the line masks the key, not only BAM205 itself.
    excerpts = [line for line in text.split("\n") if " | " in line and "api_key" in line]
    assert len(excerpts) >= 2 and all(masked in line for line in excerpts)
    source_line, caret_line = next(
        (a, b) for a, b in zip(text.split("\n"), text.split("\n")[1:]) if "api_key" in a and "^" in b
    )
    assert caret_line.index("^") == source_line.index('"')


def test_only_the_part_before_the_at_sign_is_hidden(write_bam):
    path = write_bam(MODEL.format(line=f'  base_url = "https://me:{PASSWORD}@proxy.example.com/v1"'))
    result = lint_paths([path])
    text = render_text(result.diagnostics, result.sources)
    assert "https://" + "*" * len(f"me:{PASSWORD}") + "@proxy.example.com/v1" in text


def test_a_key_elsewhere_in_the_source_is_masked_in_excerpts(write_bam):
    source = MODEL.format(line=f'  api_key  = env("OPENAI_API_KEY")  tokenizer = "{KEY}" context = 0')
    result = lint_paths([write_bam(source)])
    text = render_text(result.diagnostics, result.sources)
    assert "BAM207" in text and KEY not in text and "sk-" + "*" * (len(KEY) - 3) in text


@pytest.mark.parametrize(
    "text",
    [
        "sk-ant-api03-AbC123dEf456GhI789jKl012",
        "sk-0123456789abcdef0123456789abcdef",
        "ghp_0123456789abcdefghijABCDEFGHIJ012345",
        "AKIAIOSFODNN7EXAMPLE",
        "hf_abcdefghij0123456789KLMNO",
        "AIzaSyA-1234567890abcdefghijklmnopqrstu",
        "xoxb-123456789012-abcdefghijkl",
    ],
)
def test_known_key_shapes_are_masked_after_their_prefix(text):
    assert looks_like_key(text)
    masked = mask_keys(f"key: {text}.")
    assert masked == f"key: {text[:3]}{'*' * (len(text) - 3)}."


@pytest.mark.parametrize(
    "text",
    ["task-management-and-scheduling-system", "OPENAI_API_KEY", "sk-short1", "https://api.deepseek.com", "ask-0123456789abcdef01234"],
)
def test_words_that_resemble_keys_are_left_alone(text):
    assert not looks_like_key(text) and mask_keys(text) == text and key_ranges(text) == []


def test_the_shipped_examples_hold_no_secret():
    from tests.conftest import EXAMPLES, STDLIB

    result = lint_paths(EXAMPLES + STDLIB)
    assert not {"BAM205", "BAM211"} & {d.code for d in result.diagnostics}


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "my_service_api_key_for_production_2024", "_KEY2"])
def test_variable_names_are_taken_as_names(write_bam, name):
    result = lint_paths([write_bam(MODEL.format(line=f'  api_key  = env("{name}")'))])
    assert not result.diagnostics
