"""Decoding settings: checked at their values, a role's over its model's, sent with every call."""

from __future__ import annotations

import asyncio

from bamasc.program import DecodingSettings
from bamasc.lint import lint_paths
from bamasc.loader import load
from bamasc.check import check
from bamasc.runtime.interpreter import decoding_for
from bamasc.runtime.providers.base import Decoding

SOURCE = """
model m {
  provider = fake
  name     = "echo"
  price    { input = 0  output = 0 }
  tier     = 1
  %s
}
role R {
  max_output = 8
  prompt     = "{{task}}"
  %s
}
"""


def program(tmp_path, model="", role=""):
    path = tmp_path / "d.bam"
    path.write_text(SOURCE % (model, role), encoding="utf-8")
    result = lint_paths([str(path)])
    loaded_program, _ = check(load(str(path)))
    return loaded_program, [(d.code, d.span.line, d.span.col) for d in result.diagnostics]


def test_settings_are_read_and_a_role_overrides_its_model(tmp_path):
    prog, found = program(tmp_path, 'temperature = 0.5  top_p = 0.9  seed = 7  stop = ["END"]', "temperature = 1.2")
    assert found == []
    sent = decoding_for(prog.roles["R"], prog.models["m"])
    assert sent == Decoding(temperature=1.2, top_p=0.9, seed=7, stop=("END",))


def test_the_default_is_temperature_zero(tmp_path):
    prog, found = program(tmp_path)
    assert found == []
    assert decoding_for(prog.roles["R"], prog.models["m"]) == Decoding(temperature=0.0)
    assert prog.models["m"].decoding == DecodingSettings()


def test_out_of_range_and_wrong_types_are_reported_at_the_value(tmp_path):
    _, found = program(
        tmp_path, 'temperature = 2.5  top_p = 0  seed = 1.5', 'stop = ["a", "b", "c", "d", "e"]  top_p = "x"'
    )
    assert ("BAM214", 7, 17) in found  # temperature
    assert ("BAM214", 7, 30) in found  # top_p = 0: zero is excluded
    assert ("BAM214", 7, 40) in found  # seed
    assert ("BAM214", 12, 10) in found  # five stop strings
    assert ("BAM108", 12, 45) in found  # top_p must be a number
    assert len(found) == 5


def test_every_call_sends_the_decoding(tmp_path):
    from bamasc.plan.compile import compile_file
    from bamasc.metering.guard import BudgetGuard
    from bamasc.runtime.interpreter import TaskRun
    from bamasc.runtime.providers.fake import FakeProvider
    from bamasc.runtime.retry import RetryPolicy
    from tests.conftest import ROOT

    seen = []

    class Recording(FakeProvider):
        async def complete(self, messages, max_tokens, *, timeout, decoding=None, expect="text"):
            seen.append(decoding)
            return await super().complete(messages, max_tokens, timeout=timeout, decoding=decoding)

    result = compile_file(f"{ROOT}/examples/gsm8k.bam")
    plan, prog = result.plan, result.program
    system = plan.systems[0]
    template = system.template(system.selection["selected"])
    providers = {name: Recording(name) for name in prog.systems["gsm8k"].models}
    run = TaskRun(prog, system, template, providers, BudgetGuard(system.budget), "t1", "2+2?", None,
                  RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0, timeout=5.0))
    asyncio.run(run.run())
    assert seen and all(d == Decoding(temperature=0.0) for d in seen)
