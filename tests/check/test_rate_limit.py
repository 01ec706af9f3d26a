"""The `rate_limit` block of a model: what it reads into, and each wrong one reported at its value."""

from __future__ import annotations

import pytest

from bamasc.check import check
from bamasc.diagnostics import render_text
from bamasc.lint import lint_paths
from bamasc.loader import load
from bamasc.program import RateLimit

MODEL = """
model m {{
  provider   = openai
  name       = "gpt-4.1-nano"
  price      {{ input = 0.10  output = 0.40 }}
  tier       = 1
  {block}
}}
"""


@pytest.mark.parametrize(
    "block, expected",
    [
        ("rate_limit { requests_per_minute = 500  tokens_per_minute = 200000 }", RateLimit(500, 200_000)),
        ("rate_limit { tokens_per_minute = 30000 }", RateLimit(None, 30_000)),
        ("rate_limit { requests_per_minute = 1000000000 }", RateLimit(1_000_000_000, None)),
        ("", None),
    ],
)
def test_a_rate_limit_is_read_per_minute(write_bam, block, expected):
    program, diagnostics = check(load(write_bam(MODEL.format(block=block))))
    assert not diagnostics
    assert program.models["m"].rate_limit == expected


@pytest.mark.parametrize(
    "block, code, at, words",
    [
        ("rate_limit { requests_per_minute = 0 }", "BAM219", "0 }", "'requests_per_minute' in the rate_limit of model 'm' must be a positive whole number, not 0"),
        ("rate_limit { requests_per_minute = -5 }", "BAM219", "-5", "must be a positive whole number, not -5"),
        ("rate_limit { tokens_per_minute = 1.5e3 }", "BAM219", "1.5e3", "must be a positive whole number, not 1.5e3"),
        ("rate_limit { tokens_per_minute = many }", "BAM219", "many", "must be a number, not a name"),
        ("rate_limit { }", "BAM219", "rate_limit", "the rate_limit of model 'm' gives no limit"),
        ("rate_limit { requests_per_min = 5 }", "BAM106", "requests_per_min", "did you mean 'requests_per_minute'?"),
        ("rate_limit { requests_per_minute = 5 µ$ }", "BAM208", "5 µ$", "is a count per minute and takes no unit, not µ$"),
        ("rate_limit { tokens_per_minute = 2e9 }", "BAM210", "2e9", "above the limit of 1e9"),
        ("rate_limit { tokens_per_minute = 1e999 }", "BAM210", "1e999", "above the limit of 1e9"),
        ("rate_limit { requests_per_minute = 5  requests_per_minute = 6 }", "BAM109", "requests_per_minute = 6", "given twice"),
        ("rate_limit = 500", "BAM108", "500", "must be a block"),
    ],
)
def test_a_wrong_rate_limit_is_reported_at_the_value(write_bam, block, code, at, words):
    source = MODEL.format(block=block)
    path = write_bam(source)
    result = lint_paths([path])
    text = render_text(result.diagnostics, result.sources)
    assert code in {d.code for d in result.diagnostics}, text
    line = source.split("\n")[6]  # the model's rate_limit line
    assert f"main.bam:7:{line.index(at) + 1}: error[{code}]" in text
    assert words in text
    if code != "BAM109":  # a repeated attribute keeps its first value, as everywhere
        program, _ = check(load(path))
        assert program.models["m"].rate_limit is None  # a wrong block paces nothing rather than something unintended
