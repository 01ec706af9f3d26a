"""The bound of a tool-using call, worked out here by hand from the source, against the compiler's.

A call whose role has tools makes R + 1 rounds; round k's prompt is the call's
own prompt, the tools' specs (k < R), and k rounds of a tool-call message (the
output cap) and C results (the largest max_result and their framing), each
round priced at its own prompt's rates, plus R × C tool calls at the dearest
price (docs/language.md, "The bound of a tool loop"). Random tools, roles,
flows and prices are compiled, and every figure the plan records is compared
with the same figures computed in this file from the numbers written in the
source; then the binder's choice is compared with every binding tried by
hand, and larger budgets must keep a binding.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import random
import re
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from bamasc.optimize import bind
from bamasc.plan.compile import check_file, compile_file

ROOT = Path(__file__).resolve().parents[2]
# The framing constants the language reference gives (docs/language.md, "The bound of a tool loop").
RESULT_FRAMING, TOOL_SPEC_FRAMING, TOOLS_FRAMING, MESSAGE_FRAMING = 160, 64, 600, 8
WORDS = ["order", "refund", "café", "数据", "line", "status", "naïve", "x"]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def random_tools(rng: random.Random) -> tuple[str, dict]:
    """Source of three tools (a python one with parameters, one without, an MCP server) and what the
    bound needs of each tool name a role may give: (spec tokens, max_result, price, timeout)."""
    properties = {f"p{i}": {"type": rng.choice(["string", "integer"]), "description": text(rng, rng.randint(0, 4))}
                  for i in range(rng.randint(0, 3))}
    parameters = {"type": "object", "properties": properties, "required": sorted(properties)[:1]}
    description = text(rng, rng.randint(1, 6))
    results = [rng.choice([1, 50, 300, 2000]) for _ in range(3)]
    prices = [rng.choice([0, 5, 50]) for _ in range(3)]
    timeouts = [rng.choice([1, 5, 30]) for _ in range(3)]
    specs = [rng.choice([None, 50, 900]) for _ in range(2)]
    source = f'''
tool look {{
  python      = "shop.orders:look"
  description = "{description}"
  parameters  = """{json.dumps(parameters, ensure_ascii=False)}"""
  max_result  = {results[0]} tokens
  timeout     = {timeouts[0]} s
  price       = {prices[0]}
}}
tool derived {{
  python      = "shop.orders:derived"
  description = "derived from hints"
  max_result  = {results[1]}
  timeout     = {timeouts[1]}
  price       = {prices[1]}
  {f"max_spec = {specs[0]}" if specs[0] else ""}
}}
tool srv {{
  mcp        = "python -m srv"
  allow      = ["a", "b", "c"]
  max_result = {results[2]} tokens
  timeout    = {timeouts[2]} s
  price      = {prices[2]}
  {f"max_spec = {specs[1]}" if specs[1] else ""}
}}
'''
    canonical = json.dumps(parameters, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    look_spec = len(("look" + description + canonical).encode("utf-8"))
    named = {"look": (look_spec, results[0], prices[0], timeouts[0]),
             "derived": (specs[0] or 400, results[1], prices[1], timeouts[1])}
    named.update({f"srv.{name}": (specs[1] or 400, results[2], prices[2], timeouts[2]) for name in "abc"})
    return source, named


def random_program(rng: random.Random, models: int = 1, tiers: bool = True):
    tools_source, named = random_tools(rng)
    tools = rng.sample(sorted(named), rng.randint(1, 3))
    rounds, calls = rng.randint(1, 5), rng.randint(1, 4)
    agent_cap, helper_cap, task = rng.choice([16, 200]), rng.choice([8, 100]), rng.choice([20, 500])
    agent_text, helper_text = text(rng, rng.randint(1, 8)), text(rng, rng.randint(1, 4))
    flow = rng.choice(["alone", "reads", "read"])
    pool = []
    for m in range(models):
        price = (rng.choice([0.1, 1.0, 3.0]), rng.choice([0.4, 2.0, 15.0]))
        tier = None
        if tiers and rng.random() < 0.6:
            tier = (rng.choice([1000, 5000, 20000]), price[0] * rng.choice([1, 2]), price[1] * rng.choice([1, 1.5]))
        cap = rng.choice([None, None, 64])
        latency = rng.choice([None, (0.5, 0.01)])
        pool.append((price, tier, cap, latency, 1 if m == 0 else rng.randint(1, 2)))
    model_source = "".join(
        f'model m{m} {{\n  provider = fake\n  name = "m{m}"\n  price {{ input = {price[0]}  output = {price[1]}'
        + (f"\n    long_prompt {{ above = {tier[0]}  input = {tier[1]}  output = {tier[2]} }}" if tier else "")
        + f" }}\n  tier = {level}\n"
        + (f"  max_output = {cap}\n" if cap else "")
        + (f"  latency {{ first_token = {latency[0]}  per_token = {latency[1]} }}\n" if latency else "")
        + "}\n"
        for m, (price, tier, cap, latency, level) in enumerate(pool)
    )
    reads = "{{h}}" if flow == "reads" else ""
    statements = {"alone": "answer agent(task)", "reads": "h = helper(task)\n    answer agent(task, h)",
                  "read": "a = agent(task)\n    answer helper(task, a)"}[flow]
    source = tools_source + model_source + f'''
role Agent {{
  tools           = [{", ".join(tools)}]
  max_tool_rounds = {rounds}
  max_tool_calls  = {calls}
  max_output      = {agent_cap}
  prompt          = "{agent_text} {{{{task}}}} {reads}"
}}
role Helper {{
  max_output = {helper_cap} tokens
  prompt     = "{helper_text} {{{{task}}}} {"{{a}}" if flow == "read" else ""}"
}}
topology t {{
  slot agent  : Agent  [1..1]
  slot helper : Helper [{0 if flow == "alone" else 1}..1]
  flow {{
    {statements}
  }}
}}
system s {{
  models      = [{", ".join(f"m{m}" for m in range(models))}]
  topologies  = [t]
  budget      = 1e11
  task_tokens = {task}
}}
'''
    shape = dict(tools=[named[t] for t in tools], rounds=rounds, calls=calls, agent_cap=agent_cap, helper_cap=helper_cap,
                 task=task, agent_text=agent_text, helper_text=helper_text, flow=flow, pool=pool)
    return source, shape


def rates(model, prompt: int) -> tuple[float, float]:
    (base_in, base_out), tier = model[0], model[1]
    if tier and prompt > tier[0]:
        return max(base_in, tier[1]), max(base_out, tier[2])
    return base_in, base_out


def by_hand(shape: dict, agent_model, helper_model) -> dict:
    """Each call's figures, and the total and latency, from the source's numbers alone."""
    def cap(role_cap, model):
        return min(role_cap, model[2]) if model[2] else role_cap

    def attempt(model, tokens):
        return None if model[3] is None else model[3][0] + model[3][1] * tokens

    agent_cap = cap(shape["agent_cap"], agent_model)
    own_text = len((shape["agent_text"] + "  ").encode()) + MESSAGE_FRAMING
    agent_own = own_text + shape["task"]
    calls = {}
    helper = None
    if shape["flow"] != "alone":
        helper_cap = cap(shape["helper_cap"], helper_model)
        helper_own = len((shape["helper_text"] + "  ").encode()) + MESSAGE_FRAMING + shape["task"]
        if shape["flow"] == "read":
            helper_own += agent_cap
        else:
            agent_own += helper_cap
        rate_in, rate_out = rates(helper_model, helper_own)
        helper = (helper_own * rate_in + helper_cap * rate_out, attempt(helper_model, helper_cap))
    tools, rounds, per_round = shape["tools"], shape["rounds"], shape["calls"]
    specs = TOOLS_FRAMING + sum(spec + TOOL_SPEC_FRAMING for spec, _, _, _ in tools)
    result = max(size for _, size, _, _ in tools) + RESULT_FRAMING
    prompts = [agent_own + (specs if k < rounds else 0) + k * (agent_cap + per_round * result) for k in range(rounds + 1)]
    cost = math.fsum(p * rates(agent_model, p)[0] + agent_cap * rates(agent_model, p)[1] for p in prompts)
    cost += rounds * per_round * max(price for _, _, price, _ in tools)
    one = attempt(agent_model, agent_cap)
    agent_latency = None if one is None else (rounds + 1) * one + rounds * max(t for _, _, _, t in tools)
    calls["agent"] = (agent_own, prompts, cost, agent_latency)
    total = cost + (helper[0] if helper else 0.0)
    latencies = [agent_latency] + ([helper[1]] if helper else [])
    latency = None if any(s is None for s in latencies) else sum(latencies)
    return {"agent": calls["agent"], "helper": helper, "total": total, "latency": latency}


def compiled(tmp_path, source: str):
    path = tmp_path / "t.bam"
    path.write_text(source, encoding="utf-8")
    result = compile_file(str(path), plan_dir=str(tmp_path))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result.plan.system("s").template("t")


@pytest.mark.parametrize("seed", range(40))
def test_a_tool_loops_bound_is_the_one_worked_out_by_hand(tmp_path, seed):
    source, shape = random_program(random.Random(seed))
    template = compiled(tmp_path, source)
    expected = by_hand(shape, shape["pool"][0], shape["pool"][0])
    (agent,) = [node for node in template.nodes if node.slot == "agent"]
    own, prompts, cost, latency = expected["agent"]
    assert (agent.input_tokens, list(agent.round_input_tokens)) == (own, prompts), source
    assert (agent.rounds, agent.tool_calls) == (shape["rounds"], shape["calls"])
    assert math.isclose(agent.cost, cost, rel_tol=1e-9), (source, agent.cost, cost)
    assert math.isclose(template.worst_case_cost, expected["total"], rel_tol=1e-9), source
    if latency is None:
        assert agent.latency_s is None
    else:
        assert math.isclose(agent.latency_s, latency, rel_tol=1e-9)
        assert math.isclose(template.worst_case_latency_s, expected["latency"], rel_tol=1e-9)
    helpers = [node for node in template.nodes if node.slot == "helper"]
    assert all(node.rounds is None and node.round_input_tokens is None for node in helpers)


def load(tmp_path, source: str):
    path = tmp_path / "t.bam"
    path.write_text(source, encoding="utf-8")
    program, diagnostics, _ = check_file(str(path), budgets=False)
    assert program is not None, [d.message for d in diagnostics]
    return program


def best_by_hand(shape: dict, budget: float):
    """Every binding of the two seats, priced by hand: the best within the budget by the binder's
    objective (seats per tier strongest first, then the lower cost), as (tier seats, cost)."""
    pool, levels = shape["pool"], sorted({model[4] for model in shape["pool"]})
    best = None
    helpers = range(len(pool)) if shape["flow"] != "alone" else [None]
    for agent, helper in itertools.product(range(len(pool)), helpers):
        figures = by_hand(shape, pool[agent], pool[helper] if helper is not None else None)
        if figures["total"] > budget * (1 + 1e-9):
            continue
        seats = [pool[agent][4]] + ([pool[helper][4]] if helper is not None else [])
        key = (tuple(seats.count(level) for level in levels), -figures["total"])
        if best is None or key > best:
            best = key
    return None if best is None else (best[0], -best[1])


@pytest.mark.parametrize("seed", range(25))
def test_the_binder_picks_the_binding_found_by_hand(tmp_path, seed):
    rng = random.Random(500 + seed)
    source, shape = random_program(rng, models=3, tiers=False)
    program = load(tmp_path, source)
    system = program.systems["s"]
    totals = sorted(by_hand(shape, a, h)["total"] for a, h in itertools.product(shape["pool"], repeat=2))
    for budget in (totals[0] * 0.99, rng.uniform(totals[0], totals[-1]), totals[-1] * 1.01):
        found = bind.bind_template(program, system, "t", budget)
        truth = best_by_hand(shape, budget)
        if truth is None:
            assert not found.feasible, (source, budget)
            continue
        assert found.feasible, (source, budget)
        assert tuple(found.tier_seats) == truth[0], (source, budget)
        assert math.isclose(found.worst_case_cost, truth[1], rel_tol=1e-9), (source, budget, found.worst_case_cost, truth)


@pytest.mark.parametrize("seed", range(10))
def test_a_larger_budget_never_loses_a_binding(tmp_path, seed):
    rng = random.Random(900 + seed)
    source, shape = random_program(rng, models=3, tiers=True)
    program = load(tmp_path, source)
    system = program.systems["s"]
    previous = None
    for budget in sorted(rng.uniform(1e3, 1e6) for _ in range(5)):
        found = bind.bind_template(program, system, "t", budget)
        if previous is not None:
            assert found.feasible, (source, budget)
            assert tuple(found.tier_seats) >= previous, (source, budget)
        if found.feasible:
            assert found.worst_case_cost <= budget * (1 + 1e-9)
            previous = tuple(found.tier_seats)


def test_the_worked_bound_in_the_language_reference_is_what_compile_prints(tmp_path):
    """docs/language.md works one bound out by hand; `bamasc compile` must give the same figures."""
    from bamasc.cli import main

    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    worked = doc[doc.index("**Worked by hand.**"):]
    block = worked[worked.index("```bam\n") + len("```bam\n"):worked.index("\n```\n")]
    after = worked[worked.index("\n```\n"):]
    cost = float(re.search(r"\*\*(\d+) µ\$\*\*", after).group(1))
    seconds = float(re.search(r"\*\*(\d+) s\*\*", after).group(1))
    path = tmp_path / "desk.bam"
    path.write_text(block + "\n", encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["compile", str(path), "--format", "json"]) == 0
    (template,) = json.loads(out.getvalue())["systems"][0]["templates"]
    assert template["worst_case_cost"] == cost == 21889
    assert template["worst_case_latency_s"] == seconds == 44
    (node,) = template["nodes"]
    assert node["round_input_tokens"] == [1780, 4000, 6220, 7189]  # the doc's rounds, in its text too
    assert all(f"{tokens}" in after for tokens in node["round_input_tokens"])


def test_lint_of_the_tools_example_imports_neither_the_tool_nor_mcp_and_starts_nothing():
    """Linting (and compiling) examples/support_tools.bam loads no tool module, no MCP SDK and no
    jsonschema, and starts no process: run in a fresh interpreter that records every import and spawn."""
    import subprocess

    probe = (
        "import sys, subprocess, os\n"
        "spawned = []\n"
        "real = subprocess.Popen.__init__\n"
        "def popen(self, *a, **k):\n"
        "    spawned.append(a)\n"
        "    return real(self, *a, **k)\n"
        "subprocess.Popen.__init__ = popen\n"
        "for name in ('posix_spawn', 'fork', 'execv', 'execve', 'system'):\n"
        "    if hasattr(os, name):\n"
        "        setattr(os, name, lambda *a, _n=name, **k: spawned.append(_n))\n"
        "from bamasc.cli import main\n"
        "code = main(['lint', 'examples/support_tools.bam'])\n"
        "code += main(['compile', 'examples/support_tools.bam'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'jsonschema', 'support_tools', 'files_server'))\n"
        "print(code, loaded, spawned)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 [] []", done.stdout
