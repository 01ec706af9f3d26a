"""The paper kit's AutoGen-, MetaGPT- and ChatDev-style baselines: one system per (style, model), each
compiling at its budget, running a task on the fake provider, and benchable beside the file's systems."""

from __future__ import annotations

import asyncio
import os

import pytest

from bamasc.evaluate.bench import check_baseline
from bamasc.plan.compile import check_file, compile_file
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks
from tests.conftest import ROOT

STYLES = ("autogen", "metagpt", "chatdev")
MODELS = {"gsm8k": ("deepseek", "gpt41_nano"), "math": ("deepseek", "gpt41_nano"), "mbpp": ("deepseek", "gpt4o_mini")}
# Calls of one run of each shape when nothing ends it early: two rounds of two turns; four SOP roles;
# CEO, CTO, one review round of two turns, the tester.
CALLS = {"autogen": 4, "metagpt": 4, "chatdev": 5}
TASK = "Tom has 40 apples and buys 2 more. How many does he have?"


def _path(dataset: str) -> str:
    return os.path.join(ROOT, "examples", "paper", f"{dataset}.bam")


def _baselines(dataset: str) -> list[str]:
    return [f"{dataset}_{style}_style_{model}" for style in STYLES for model in MODELS[dataset]]


@pytest.mark.parametrize("dataset", sorted(MODELS))
def test_every_style_on_every_single_model_is_declared_as_a_baseline(dataset):
    program, diagnostics, _ = check_file(_path(dataset))
    assert not [d for d in diagnostics if d.severity == "error"]
    reference = program.systems[f"{dataset}_reference"]
    declared = sorted(name for name in program.systems if "_style_" in name)
    assert declared == sorted(_baselines(dataset))
    for name in declared:
        system = program.systems[name]
        check_baseline(program, name)  # one template and one model: what `bench --baseline` runs
        style = name.split("_")[1]
        assert system.topologies == (f"{style}_style",)
        # Benchable on the main systems' dataset: the same answer format and the same budgets.
        assert (system.answer, system.budgets, system.task_tokens) == (
            reference.answer, reference.budgets, reference.task_tokens)
        assert system.budget in reference.budgets
    # One system per model of the pool, for every style.
    used = {program.systems[name].models[0] for name in declared}
    assert used == set(reference.models)


@pytest.mark.parametrize("dataset", sorted(MODELS))
def test_every_baseline_compiles_at_its_budget_and_runs_a_fake_task_within_it(dataset):
    for name in _baselines(dataset):
        compiled = compile_file(_path(dataset), system=name)
        assert compiled.plan is not None, (name, [d.message for d in compiled.diagnostics])
        (system,) = compiled.plan.systems
        (template,) = system.templates
        assert template.feasible and template.worst_case_cost <= system.budget
        # The verbose fake writes every output to its cap and never approves nor says TERMINATE:
        # every call of the shape runs, and the task still stays within the proven bound.
        options = ExecOptions(concurrency=1, fake_mode="verbose")
        results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, name, [Task("t1", TASK)], options))
        (result,) = results
        assert result.status == "ok", (name, result.status, result.error)
        assert result.calls == CALLS[name.split("_")[1]], name
        assert 0 < result.cost <= template.worst_case_cost + 1e-6 <= system.budget + 1e-6
        assert result.template == template.name


def test_the_conversations_end_on_their_termination():
    """AutoGen-style stops when the proxy writes TERMINATE; ChatDev-style runs one review round."""
    from bamasc.runtime.providers.base import Completion
    from bamasc.runtime.providers.fake import FakeProvider
    import bamasc.runtime.execute as execute

    class Accepting(FakeProvider):
        async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
            prompt = messages[-1].content
            text = "TERMINATE" if "reply TERMINATE" in prompt else "40 + 2 = 42\n#### 42"
            return Completion(text, self.count_prompt_tokens(messages), len(text.encode()), "stop")

    compiled = compile_file(_path("gsm8k"), system="gsm8k_autogen_style_gpt41_nano")
    original = execute.make_providers
    try:
        execute.make_providers = lambda program, system, options, models=None: {
            name: Accepting(name) for name in program.systems[system].models}
        results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, "gsm8k_autogen_style_gpt41_nano",
                                              [Task("t1", TASK)], ExecOptions(concurrency=1)))
    finally:
        execute.make_providers = original
    (result,) = results
    assert result.calls == 2 and result.answer == "42"  # the assistant's answer, not the proxy's TERMINATE
