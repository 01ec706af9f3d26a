"""A placeholder shown twice is BAM228: every bound counts an input once per call, so the prompt sent would outgrow it."""

import itertools

import pytest

from bamasc.lint import lint_paths

DESK = """model nano {{
  provider = fake
  name     = "nano"
  price    {{ input = 1  output = 4 }}
  tier     = 1
}}

role Solver {{
  max_output = 16
{attrs}
}}

topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}

system desk {{
  models     = [nano]
  topologies = [single]
  budget     = 2000
}}
"""


def _codes(tmp_path, attrs: str) -> list[tuple[str, int, int]]:
    path = tmp_path / "desk.bam"
    path.write_text(DESK.format(attrs=attrs))
    return [(d.code, d.span.line, d.span.col) for d in lint_paths([str(path)]).diagnostics]


# Every way one input can appear twice: twice in the prompt, in the prompt and the system, `?` or not.
PLACINGS = [
    ('  prompt = "{a} and {b}"', None),
    ('  system = "{a}"', '  prompt = "{b}"'),
    ('  prompt = "x {a}\\ny {b}"', None),
]


@pytest.mark.parametrize("first, second", list(itertools.product(["{{task}}", "{{task?}}", "{{ task }}"], repeat=2)))
@pytest.mark.parametrize("placing", PLACINGS)
def test_an_input_shown_twice_is_refused_at_its_second_place(tmp_path, first, second, placing):
    attrs = "\n".join(line.format(a=first, b=second) for line in placing if line)
    found = [code for code in _codes(tmp_path, attrs) if code[0] == "BAM228"]
    assert len(found) == 1
    _, line, col = found[0]
    lines = (tmp_path / "desk.bam").read_text().splitlines()
    second = (10 if placing[1] is None else 11, lines[9 if placing[1] is None else 10].rindex("{{") + 1)
    assert (line, col) == second  # the caret on the second place, not the first


@pytest.mark.parametrize("attrs", ['  prompt = "{{task}}"', '  system = "Be brief."\n  prompt = "{{task}}"',
                                   '  prompt = "{{task}} {{previous?}}"'])
def test_each_input_shown_once_is_clean(tmp_path, attrs):
    assert not [code for code in _codes(tmp_path, attrs) if code[0] == "BAM228"]
