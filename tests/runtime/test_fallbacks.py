"""Fallback models at run time: which failures lead to one, which fallback is chosen, and what it may cost."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bamasc.cli import main
from bamasc.metering.guard import BudgetGuard
from bamasc.plan.compile import compile_file
from bamasc.plan.explain import explain_text
from bamasc.prices import Pricing, PriceTier
from bamasc.program import Latency
from bamasc.records import replace
from bamasc.runtime.execute import ExecOptions, make_providers
from bamasc.runtime.interpreter import TaskRun
from bamasc.runtime.providers.base import ProviderError
from bamasc.runtime.providers.fake import FakeProvider
from bamasc.runtime.retry import RetryPolicy
from tests.helpers.runtime import KEY, Collect
from tests.runtime.servers import openai_server, reply, status  # noqa: F401 (fixtures)

NO_WAIT = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0, jitter=0.0, timeout=5.0)
TASK = "What is 6 times 7?"
MODELS = {  # name: (input, output) USD/Mtok; `main` is every seat's model
    "main": (1, 2),
    "dear": (10, 20),
    "cheap": (1, 1),
    "spare": (0.5, 0.5),
}


def source(fallback: str, extra: str = "") -> str:
    """The fake models of MODELS, `main` naming `fallback`, and a one-call system on `main`."""
    models = "".join(
        f"""
model {name} {{
  provider = fake
  name     = "{name}"
  price    {{ input = {price[0]}  output = {price[1]} }}
  tier     = {1 if name == "main" else 2}
  {f"fallback = [{fallback}]" if name == "main" else ""}
}}
""" for name, price in MODELS.items())
    return models + extra + one_call("main")


def one_call(seat: str) -> str:
    return f"""
role Solver {{
  max_output = 64
  prompt     = "Solve: {{{{task}}}}"
}}
topology single {{
  slot solver : Solver [1..1]
  flow {{ answer solver(task) }}
}}
system s {{
  models     = [{seat}]
  topologies = [single]
  budget     = 2000
  answer     = text
}}
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """fallback list -> (plan, program), each compiled once."""
    found = {}

    def get(fallback: str):
        if fallback not in found:
            path = tmp_path_factory.mktemp("fallbacks") / "fallbacks.bam"
            path.write_text(source(fallback), encoding="utf-8")
            result = compile_file(str(path))
            assert result.plan is not None, [d.message for d in result.diagnostics]
            found[fallback] = result.plan, result.program
        return found[fallback]

    return get


FAILING = {
    "ok": {},
    "server": {"fail_rate": 1.0, "fail_kinds": ("server",)},  # the fake's 500: released
    "timeout": {"fail_rate": 1.0, "fail_kinds": ("timeout",)},  # outcome unknown: kept
    "connection": {"fail_rate": 1.0, "fail_kinds": ("connection",)},
    "client": {"fail_rate": 1.0, "fail_kinds": ("client",)},  # a 400
    "rate_limited": {"fail_rate": 1.0, "fail_kinds": ("rate_limited",)},
    "flaky": {"fail_rate": 0.5, "fail_kinds": ("server", "timeout")},
}


def fakes(behaviour: dict[str, str], seed: int = 0) -> dict:
    return {name: FakeProvider(name, seed=seed, reply=f"answered by {name}", **FAILING[behaviour.get(name, "ok")])
            for name in MODELS}


def run(plan, program, providers, budget=None, retry=NO_WAIT):
    system = plan.systems[0]
    template = system.template("single")
    trace = Collect()
    guard = BudgetGuard(system.budget if budget is None else budget)
    task = TaskRun(program, system, template, providers, guard, "t1", TASK, trace, retry)
    return asyncio.run(task.run()), trace.calls, guard


def test_the_first_fallback_answers_when_the_seat_model_keeps_failing(compiled):
    plan, program = compiled("cheap, spare")
    providers = fakes({"main": "timeout"})
    outcome, calls, guard = run(plan, program, providers)
    assert outcome.status == "ok" and outcome.output == "answered by cheap"
    assert [(c["model"], c["attempt"]) for c in calls] == [("main", 1), ("main", 2), ("main", 3), ("cheap", 1)]
    failed, answered = calls[:3], calls[3]
    assert all(c["error"].startswith("timeout:") and c["charged"] == c["reserved"] for c in failed)  # kept
    assert answered["fallback_from"] == "main" and answered["fallback_reason"] == failed[-1]["error"]
    assert "fallback_skipped" not in answered and answered["error"] is None
    assert answered["reserved"] <= failed[-1]["reserved"]  # within the call's reservation
    assert 0 < answered["charged"] <= answered["reserved"]
    assert outcome.cost == pytest.approx(sum(c["charged"] for c in calls)) and outcome.cost <= 2000
    assert providers["spare"].calls == 0 and guard.held == pytest.approx(0)


def test_a_fallback_dearer_than_the_reservation_is_passed_over(compiled):
    plan, program = compiled("dear, cheap")
    providers = fakes({"main": "server"})
    outcome, calls, _ = run(plan, program, providers)
    assert outcome.status == "ok" and outcome.output == "answered by cheap"
    assert providers["dear"].calls == 0
    (answered,) = [c for c in calls if c["model"] != "main"]
    assert answered["model"] == "cheap" and answered["fallback_skipped"] == ["dear"]
    assert answered["fallback_reason"].startswith("server:")
    # The fake's 500 was released: only the answer is charged, within what the plan's bound counted for the call.
    assert outcome.cost == answered["charged"] <= plan.systems[0].template("single").worst_case_cost


def test_every_fallback_failing_ends_the_call_as_before(compiled):
    plan, program = compiled("cheap, spare")
    providers = fakes({"main": "server", "cheap": "connection", "spare": "timeout"})
    outcome, calls, guard = run(plan, program, providers)
    assert outcome.status == "error" and outcome.output is None
    assert outcome.error.startswith("solver[0]@0.call on main: fake model 'main' failed on purpose (server)")
    assert "fallbacks: cheap: fake model 'cheap' failed on purpose (connection); spare:" in outcome.error
    assert [c["model"] for c in calls] == ["main"] * 3 + ["cheap"] * 3 + ["spare"] * 3
    assert calls[6]["fallback_reason"].startswith("connection:")  # the model tried before it
    assert outcome.cost == pytest.approx(sum(c["charged"] for c in calls)) and guard.held == pytest.approx(0)


@pytest.mark.parametrize("kind", ["client", "rate_limited"])
def test_a_refused_request_never_goes_to_a_fallback(compiled, kind):
    plan, program = compiled("cheap")
    providers = fakes({"main": kind})
    outcome, calls, _ = run(plan, program, providers)
    assert outcome.status == "error" and "fallbacks" not in outcome.error
    assert providers["cheap"].calls == 0 and {c["model"] for c in calls} == {"main"}


def test_a_fallback_refusing_the_request_ends_the_list(compiled):
    plan, program = compiled("cheap, spare")
    providers = fakes({"main": "timeout", "cheap": "client"})
    outcome, calls, _ = run(plan, program, providers)
    assert outcome.status == "error" and "cheap: fake model 'cheap' failed on purpose (client)" in outcome.error
    assert providers["spare"].calls == 0


def test_a_budget_refusal_never_triggers_a_fallback(compiled):
    plan, program = compiled("spare")
    # Room for spare's whole call but not for a useful one on main: the budget refuses main, and nothing else runs.
    prompt = FakeProvider("x").count_prompt_tokens(_messages())
    budget = prompt * 1 + 10 * 2  # main's prompt and 10 output tokens, below the useful minimum of 16
    providers = fakes({})
    outcome, calls, _ = run(plan, program, providers, budget=budget)
    assert outcome.status == "failed" and outcome.exhausted == "budget"
    assert providers["spare"].calls == 0 and providers["main"].calls == 0
    # And after failures: main's timeouts keep their holds until the budget cannot admit another attempt.
    outcome, calls, _ = run(plan, program, fakes({"main": "timeout"}), budget=prompt + 64 * 2 + prompt + 20)
    assert outcome.exhausted == "budget" and {c["model"] for c in calls} == {"main"}


def _messages():
    from bamasc.runtime.providers.base import Message

    return [Message("user", f"Solve: {TASK}")]


def test_fallback_tiers_count_in_its_worst_case(compiled):
    plan, program = compiled("cheap, spare")
    # cheap re-prices every token tenfold above 10 prompt tokens: its worst case no longer fits main's hold.
    cheap = program.models["cheap"]
    tiered = replace(cheap, pricing=Pricing(1, 1, tiers=(PriceTier(10, 10, 10),)))
    program = replace(program, models={**program.models, "cheap": tiered})
    providers = fakes({"main": "server"})
    outcome, calls, _ = run(plan, program, providers)
    assert outcome.output == "answered by spare" and providers["cheap"].calls == 0
    assert calls[-1]["fallback_skipped"] == ["cheap"]


def test_under_a_deadline_a_fallback_without_latency_is_passed_over(compiled):
    plan, program = compiled("cheap, spare")
    timed = Latency(0.0, 0.0)
    models = {**program.models, "main": replace(program.models["main"], latency=timed),
              "spare": replace(program.models["spare"], latency=timed)}
    system = replace(plan.systems[0], deadline_s=60.0)
    plan = replace(plan, systems=(system,))
    providers = fakes({"main": "server"})
    outcome, calls, _ = run(plan, replace(program, models=models), providers)
    assert outcome.output == "answered by spare" and providers["cheap"].calls == 0


# ---------------------------------------------------------------- the family

PRICES = st.tuples(st.sampled_from([0.1, 0.5, 1, 2, 5, 30]), st.sampled_from([0.1, 0.5, 1, 2, 5, 30]),
                   st.sampled_from([None, 5, 40]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prices=st.fixed_dictionaries({name: PRICES for name in ("dear", "cheap", "spare")}),
    behaviour=st.fixed_dictionaries({name: st.sampled_from(sorted(FAILING)) for name in MODELS}),
    order=st.permutations(["dear", "cheap", "spare"]),
    budget=st.sampled_from([150, 400, 700, 2000]),
    seed=st.integers(0, 1000),
)
def test_no_price_or_failure_pattern_passes_the_budget_or_the_bound(compiled, prices, behaviour, order, budget, seed):
    plan, program = compiled(", ".join(order))
    models = dict(program.models)
    for name, (input_rate, output_rate, above) in prices.items():
        tiers = () if above is None else (PriceTier(above, input_rate * 3, output_rate * 3),)
        models[name] = replace(models[name], pricing=Pricing(input_rate, output_rate, tiers=tiers))
    program = replace(program, models=models)
    bound = plan.systems[0].template("single").worst_case_cost
    providers = fakes(behaviour, seed)
    outcome, calls, guard = run(plan, program, providers, budget=budget)
    assert outcome.cost <= budget * (1 + 1e-9) and not outcome.overran
    assert outcome.cost == pytest.approx(sum(c["charged"] for c in calls)) and guard.held == pytest.approx(0, abs=1e-6)
    seat_holds = [c["reserved"] for c in calls if c["model"] == "main" and not c["skipped"]]
    on_fallbacks = [c for c in calls if c["model"] != "main"]
    for line in on_fallbacks:
        assert line["fallback_from"] == "main" and line["reserved"] <= seat_holds[-1] * (1 + 1e-9)
        assert line["fallback_reason"].split(":")[0] in ("server", "timeout", "connection")
    if on_fallbacks:
        main_lines = [c for c in calls if c["model"] == "main"]
        assert main_lines[-1]["error"].split(":")[0] in ("server", "timeout", "connection")
    if not any(c["error"] and c["charged"] > 0 for c in calls):  # no failure kept its hold
        assert outcome.cost <= bound * (1 + 1e-9)


# ---------------------------------------------------------------- providers, explain, a real upstream


def test_a_fallbacks_missing_key_stops_the_run_before_it_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("BAMASC_FALLBACK_KEY", raising=False)
    remote = """
model remote {
  provider = openai
  name     = "local-model"
  base_url = "http://127.0.0.1:9/v1"
  api_key  = env("BAMASC_FALLBACK_KEY")
  price    { input = 0.5  output = 2.0 }
  tier     = 2
}
"""
    path = tmp_path / "keys.bam"
    path.write_text(source("remote", extra=remote), encoding="utf-8")
    result = compile_file(str(path))
    with pytest.raises(ProviderError, match="BAMASC_FALLBACK_KEY"):
        make_providers(result.program, "s", ExecOptions())
    trace = tmp_path / "trace.jsonl"
    assert main(["exec", str(path), "--task", TASK, "--trace", str(trace)]) == 1
    assert "BAMASC_FALLBACK_KEY, which is not set" in capsys.readouterr().err
    assert not trace.exists() or "call" not in trace.read_text()


def test_explain_lists_each_seats_fallbacks(compiled):
    plan, program = compiled("dear, cheap")
    system = plan.systems[0]
    text = explain_text(plan, system, program, None)
    assert "  solver[0] = main: then dear (fits 0 of 1 call), then cheap (fits 1 of 1 call)" in text


def test_a_real_upstream_failing_for_the_seat_model_is_answered_by_the_fallback(tmp_path, openai_server, monkeypatch):
    monkeypatch.setenv("BAMASC_TEST_KEY", KEY)
    served = []

    def respond(body):
        served.append(body["model"])
        return status(500) if body["model"] == "primary-model" else reply("#### 42", prompt_tokens=20, completion_tokens=5)

    openai_server.responder = respond
    models = "".join(f"""
model {name} {{
  provider = openai
  name     = "{model_id}"
  base_url = "{openai_server.base_url}"
  api_key  = env("BAMASC_TEST_KEY")
  price    {{ input = 0.5  output = 2.0 }}
  tier     = 1
  {fallback}
}}
""" for name, model_id, fallback in (("primary", "primary-model", "fallback = [backup]"), ("backup", "backup-model", "")))
    path = tmp_path / "wire.bam"
    path.write_text(models + one_call("primary"), encoding="utf-8")
    result = compile_file(str(path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    providers = make_providers(result.program, "s", ExecOptions())
    assert sorted(providers) == ["backup", "primary"]
    retry = RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, jitter=0.0, timeout=5.0)
    try:
        outcome, calls, _ = run(result.plan, result.program, providers, retry=retry)
    finally:
        asyncio.run(_close(providers))
    assert served == ["primary-model", "primary-model", "backup-model"]
    assert outcome.status == "ok" and outcome.output == "#### 42"
    assert [c["model"] for c in calls] == ["primary", "primary", "backup"]
    assert all(c["charged"] == c["reserved"] > 0 for c in calls[:2])  # a 500 may have been billed: kept
    assert calls[2]["charged"] == pytest.approx(0.5 * 20 + 2.0 * 5) and calls[2]["fallback_from"] == "primary"
    assert calls[2]["model_id"] == "backup-model" and calls[2]["fallback_reason"].startswith("server:")
    assert outcome.cost == pytest.approx(sum(c["charged"] for c in calls))


async def _close(providers):
    for provider in providers.values():
        await provider.aclose()


@pytest.mark.parametrize("seed", range(4))
def test_every_round_of_a_tool_loop_falls_back_within_the_bound(tmp_path, seed):
    import random

    from tests.runtime.tool_templates import Lines, tools_source
    from tests.runtime.tool_templates import compiled as tool_compiled
    from tests.runtime.tool_templates import run_task as run_tools

    module = f"fallback_tools_{seed}"
    source_text, code = tools_source(random.Random(seed), module, chained=seed % 2 == 1)
    program, system, template = tool_compiled(tmp_path, source_text, module, code)
    models = dict(program.models)
    for name in list(models):  # each seat model falls back on a twin of itself, served by another provider
        models[f"{name}_twin"] = replace(models[name], name=f"{name}_twin", fallbacks=())
        models[name] = replace(models[name], fallbacks=(f"{name}_twin",))
    program = replace(program, models=models)
    providers = {name: FakeProvider(name, mode="verbose", **(FAILING["server"] if not name.endswith("_twin") else {}))
                 for name in models}
    trace = Lines()
    outcome, guard = run_tools(program, system, template, providers, template.worst_case_cost, trace=trace,
                               base_dir=str(tmp_path))
    calls = [line for line in trace.lines if line["type"] == "call"]
    answered = [line for line in calls if line["error"] is None]
    assert outcome.status == "ok", outcome.error  # never overbilled: each round's prompt bound holds on the twin
    assert answered and all(line["model"].endswith("_twin") and line["fallback_from"] for line in answered)
    assert outcome.cost <= template.worst_case_cost * (1 + 1e-9) and guard.held == pytest.approx(0, abs=1e-6)
