"""An attribute written as the SDKs name it gets the attribute it means, not the closest spelling: `max_tokens` in a
role means `max_output` (spelling alone suggests `max_tool_rounds`)."""

from __future__ import annotations

import pytest

from bamasc.lint import lint_file

MODEL = 'model m {\n  provider = fake\n  name = "steady"\n  price { input = 1.0  output = 4.0 }\n  tier = 1\n}\n'


@pytest.mark.parametrize("word, meant", [
    ("max_tokens", "max_output"), ("max_completion_tokens", "max_output"), ("max_output_tokens", "max_output"),
    ("max_new_tokens", "max_output"), ("system_prompt", "system"), ("instructions", "system"),
])
def test_an_sdk_word_in_a_role_points_at_the_attribute_it_means(tmp_path, word, meant):
    path = tmp_path / "sdk.bam"
    path.write_text(MODEL + f'role R {{\n  {word} = 200\n  prompt = "{{{{task}}}}"\n}}\n'.replace(
        f"  prompt = \"{{{{task}}}}\"\n", "" if meant == "prompt" else "  prompt = \"{{task}}\"\n"), encoding="utf-8")
    found = [d for d in lint_file(str(path))[2] if d.code == "BAM106"]
    assert len(found) == 1 and found[0].hint.startswith(f"did you mean '{meant}'?"), [d.hint for d in found]
    assert (found[0].span.line, found[0].span.col) == (8, 3)


def test_an_sdk_word_in_a_model_points_at_its_base_url(tmp_path):
    path = tmp_path / "sdk.bam"
    path.write_text(MODEL.replace("  tier = 1\n", '  tier = 1\n  api_base = "http://localhost:8000/v1"\n'),
                    encoding="utf-8")
    found = [d for d in lint_file(str(path))[2] if d.code == "BAM106"]
    assert len(found) == 1 and found[0].hint.startswith("did you mean 'base_url'?")


@pytest.mark.parametrize("block, word, where", [
    ("system", "temperature = 0.2", "a model or a role"),
    ("system", "max_output = 100", "a model or a role"),
    ("role", "budget = 100", "a system"),
    ("role", "tier = 2", "a model"),
])
def test_an_attribute_of_another_block_says_where_it_belongs(tmp_path, block, word, where):
    """`temperature` in a system is not a misspelling of `template` or `task_tokens`: it belongs in a model or a role."""
    role = 'role R {\n  prompt = "{{task}}"\n  max_output = 10\n' + (f"  {word}\n" if block == "role" else "") + "}\n"
    rest = ('topology t {\n  slot r : R [1..1]\n  flow { a = r(task)  answer a }\n}\n'
            'system s {\n  models = [m]\n  topologies = [t]\n  budget = 1000\n  task_tokens = 10\n'
            + (f"  {word}\n" if block == "system" else "") + "}\n")
    path = tmp_path / "misplaced.bam"
    path.write_text(MODEL + role + rest, encoding="utf-8")
    found = [d for d in lint_file(str(path))[2] if d.code == "BAM106"]
    assert [d.hint for d in found] == [f"'{word.split()[0]}' is an attribute of {where}, not of this block: move it there"]
