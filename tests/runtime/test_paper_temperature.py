"""Every request the paper kit sends carries temperature 0: its systems run against a recording server."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from bamasc.plan.compile import compile_file
from bamasc.metering.guard import BudgetGuard
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers import make_provider
from bamasc.runtime.retry import RetryPolicy
from tests.runtime.servers import openai_server, reply  # noqa: F401 (fixtures)
from tests.helpers.runtime import Collect

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICY = RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.05, jitter=0.0, timeout=2.0)
TASK = "Tom has 40 apples and buys 2 more. How many does he have?"
# Words of each baseline role's prompt: the user proxy, the SOP roles, the ChatDev phases.
BASELINE_ROLES = ("reply TERMINATE", "fixing what the user found wrong", "As product manager", "As architect",
                  "As engineer", "As QA engineer", "As CEO", "As CTO", "As programmer", "Review the last answer",
                  "As tester")


def _local_copy(tmp_path, dataset: str, base_url: str) -> str:
    """The example with every model sent to the local server under a test key."""
    text = open(os.path.join(ROOT, "examples", "paper", f"{dataset}.bam"), encoding="utf-8").read()
    text = text.replace('base_url    = "https://api.deepseek.com"\n', "")
    text = text.replace("provider    = openai", f'provider    = openai\n  base_url    = "{base_url}"')
    for variable in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY"):
        text = text.replace(f'env("{variable}")', 'env("BAMASC_TEST_KEY")')
    path = tmp_path / f"{dataset}.bam"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _answer(body) -> object:
    """A reply each role can read: step cards for a planner, a rejection for a critic (so every
    revision runs), an answer for the rest."""
    prompt = json.dumps(body.get("messages", []))
    if "step cards" in prompt:
        return reply(json.dumps([{"step": "add", "by": "executor", "reads": []},
                                 {"step": "check", "by": "executor", "reads": [1]}]))
    if "CONCLUSION" in prompt:
        return reply("CONCLUSION: INCORRECT - recheck the sum")
    return reply("40 + 2 = 42\n#### 42\n```python\ndef f():\n    return 42\n```\n\\boxed{42}")


def _run_all(plan, program):
    models = sorted({seat.model for system in plan.systems for t in system.templates for seat in t.binding})
    providers = {name: make_provider(program.models[name]) for name in models}

    async def go():
        try:
            for system in plan.systems:
                for template in system.templates:
                    if template.feasible:
                        run = TaskRun(program, system, template, providers, BudgetGuard(system.budget), "w1", TASK,
                                      Collect(), POLICY)
                        await run.run()
        finally:
            for provider in providers.values():
                await provider.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("dataset", ["gsm8k", "math", "mbpp"])
@pytest.mark.parametrize("method", ["lexicographic", "paper"])
def test_every_request_of_the_paper_kit_has_temperature_zero(dataset, method, openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", "sk-test-never-printed-0123456789")
    openai_server.responder = _answer
    result = compile_file(_local_copy(tmp_path, dataset, openai_server.base_url), method=method, plan_dir=str(tmp_path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    _run_all(result.plan, result.program)
    bodies = [request.body for request in openai_server.requests]
    models = {body["model"] for body in bodies}
    assert len(models) == 2, models  # both models of the pool were called
    roles = {"step cards" in json.dumps(b["messages"]) for b in bodies} | {"CONCLUSION" in json.dumps(b["messages"]) for b in bodies}
    assert roles == {True, False}
    assert len(bodies) >= 8
    # The -style baselines' roles spoke too (docs/paper.md, "Baselines").
    prompts = [json.dumps(body["messages"]) for body in bodies]
    for marker in BASELINE_ROLES:
        assert any(marker in prompt for prompt in prompts), marker
    assert all(body.get("temperature") == 0 for body in bodies), [b.get("temperature") for b in bodies]
