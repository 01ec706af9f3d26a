"""Compiling the paper's setups: golden bindings, plan round trips, staleness, and the CLI."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from bamasc.cli import main
from bamasc.ir.alternatives import worst_case
from bamasc.plan.compile import compile_file
from bamasc.plan.load import PlanVerificationError, StalePlanError, load_plan
from bamasc.plan.schema import dumps
from tests.conftest import ROOT

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "compile")
PAPER_BUDGETS = (500, 875, 1250, 1625, 2000)


def _summary(result) -> dict:
    """What the golden files pin down: per template, feasibility, counts, seats and the bound."""
    (system,) = result.plan.systems
    return {
        "budget": system.budget,
        "selected": system.selection["selected"],
        "templates": {
            t.name: {
                "feasible": t.feasible,
                "worst_case_cost": None if t.worst_case_cost is None else round(t.worst_case_cost, 4),
                "counts": t.counts,
                "binding": [f"{s.slot}[{s.instance}]={s.model}" for s in t.binding],
                "tier_seats": t.objective["tier_seats"],
                "cheapest_cost": None if t.cheapest_cost is None else round(t.cheapest_cost, 4),
            }
            for t in system.templates
        },
    }


@pytest.mark.parametrize("budget", PAPER_BUDGETS)
def test_gsm8k_bindings_match_golden_files(budget):
    result = compile_file(GSM8K, system="gsm8k", budget=budget)
    assert result.plan is not None
    summary = _summary(result)
    golden = os.path.join(GOLDEN, f"gsm8k.{budget}.json")
    if os.environ.get("BAMASC_UPDATE_GOLDEN"):
        with open(golden, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2, sort_keys=True)
            handle.write("\n")
    with open(golden, encoding="utf-8") as handle:
        assert summary == json.load(handle)
    for template in result.plan.systems[0].templates:
        if template.feasible:
            assert template.worst_case_cost <= budget
            # Each node's cost is its own worst case. The template's bound is at most their worst
            # case over decisions: it also counts a plan's step cards once for all its steps.
            worst = worst_case((tuple(map(tuple, node.alternative)), node.cost) for node in template.nodes)
            assert template.worst_case_cost <= worst.total + 1e-6


@pytest.mark.parametrize("budget", PAPER_BUDGETS)
def test_weights_and_lexicographic_agree_on_the_paper_setup(budget):
    exact = _summary(compile_file(GSM8K, system="gsm8k", budget=budget))
    weighted = _summary(compile_file(GSM8K, system="gsm8k", budget=budget, method="weights"))
    for name, template in exact["templates"].items():
        assert template["tier_seats"] == weighted["templates"][name]["tier_seats"]
        assert template["feasible"] == weighted["templates"][name]["feasible"]


def test_plan_json_contract_keys():
    plan = json.loads(dumps(compile_file(GSM8K, system="gsm8k").plan))
    for key in ("schema_version", "source_sha256", "systems"):
        assert key in plan
    system = plan["systems"][0]
    for key in ("name", "budget", "selection", "templates"):
        assert key in system
    for template in system["templates"]:
        for key in ("name", "feasible", "worst_case_cost", "objective", "binding"):
            assert key in template
        for seat in template["binding"]:
            assert set(seat) == {"slot", "instance", "model"}


@pytest.fixture
def workspace(tmp_path):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    return tmp_path


def test_compile_round_trips_through_plan_json(workspace, capsys):
    plan_path = workspace / "plan.json"
    assert main(["compile", str(workspace / "gsm8k.bam"), "-o", str(plan_path)]) == 0
    assert "bounds re-verified" in capsys.readouterr().out
    plan, program = load_plan(str(plan_path))
    assert plan.root == "gsm8k.bam"
    assert {s["path"] for s in plan.sources} >= {"gsm8k.bam", "std/linear.bam"}
    assert plan.system().selection["selected"] in program.systems["gsm8k"].topologies


def test_editing_a_price_makes_the_plan_stale(workspace):
    plan_path = workspace / "plan.json"
    assert main(["compile", str(workspace / "gsm8k.bam"), "-o", str(plan_path)]) == 0
    source = workspace / "gsm8k.bam"
    source.write_text(source.read_text().replace('= catalog("openai/gpt-4.1-nano")', "{ input = 0.12  output = 0.40 }"))
    with pytest.raises(StalePlanError, match="input price of model 'gpt41_nano' went from 0.1 to 0.12"):
        load_plan(str(plan_path))
    assert main(["graph", str(plan_path)]) == 1


def test_a_tampered_bound_fails_verification(workspace):
    plan_path = workspace / "plan.json"
    assert main(["compile", str(workspace / "gsm8k.bam"), "-o", str(plan_path)]) == 0
    data = json.loads(plan_path.read_text())
    template = next(t for t in data["systems"][0]["templates"] if t["feasible"])
    template["nodes"][0]["cost"] -= 50
    template["worst_case_cost"] -= 50
    plan_path.write_text(json.dumps(data))
    with pytest.raises(PlanVerificationError, match="the graph gives"):
        load_plan(str(plan_path))


def test_compile_text_json_and_system_option(workspace, capsys):
    path = str(workspace / "gsm8k.bam")
    assert main(["compile", path, "--budget", "$0.000875"]) == 0
    text = capsys.readouterr().out
    assert "budget 875 µ$" in text and "planner" in text and "(needs" in text
    assert main(["compile", path, "--format", "json", "--system", "gsm8k"]) == 0
    assert json.loads(capsys.readouterr().out)["systems"][0]["name"] == "gsm8k"
    assert main(["compile", path, "--system", "nope"]) == 2
    assert "no system 'nope'" in capsys.readouterr().err


def test_an_unreachable_budget_is_an_error_with_the_smallest_workable_budget(workspace, capsys):
    assert main(["compile", str(workspace / "gsm8k.bam"), "--budget", "100"]) == 1
    err = capsys.readouterr().err
    assert "BAM502" in err and "smallest workable budget" in err


def test_explain_names_alternatives_and_rules(workspace, capsys):
    assert main(["explain", str(workspace / "gsm8k.bam"), "--template", "feedback"]) == 0
    out = capsys.readouterr().out
    assert "Calls (tokens x USD/Mtok = µ$)" in out
    assert "stronger deepseek_v3" in out or "weaker gpt41_nano" in out
    assert "budget:" in out and "require #1" in out


def test_graph_formats(workspace, capsys):
    plan_path = workspace / "plan.json"
    assert main(["compile", str(workspace / "gsm8k.bam"), "-o", str(plan_path)]) == 0
    capsys.readouterr()
    assert main(["graph", str(plan_path), "--format", "mermaid", "--template", "planner"]) == 0
    mermaid = capsys.readouterr().out
    assert mermaid.startswith("flowchart TD") and "Planner@" in mermaid and "-.->" in mermaid
    assert main(["graph", str(plan_path), "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph")
    png = workspace / "graph.png"
    assert main(["graph", str(plan_path), "--format", "png", "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_sweep_table_and_plot(workspace, capsys):
    plot = workspace / "sweep.png"
    assert main(["compile", str(workspace / "gsm8k.bam"), "--sweep", "250:2000:250", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "Pareto front" in out
    lines = [line for line in out.splitlines() if line[:4].strip().isdigit()]
    assert len(lines) >= 8  # one row per budget (250, 500, ..., 2000)
    assert plot.read_bytes()[:4] == b"\x89PNG" and plot.stat().st_size > 10000


def test_sweep_as_json_is_json(workspace, capsys):
    import json

    assert main(["compile", str(workspace / "gsm8k.bam"), "--system", "gsm8k", "--sweep", "500:1500:500",
                 "--format", "json"]) == 0
    sweep = json.loads(capsys.readouterr().out)
    assert sweep["system"] == "gsm8k" and [p["budget"] for p in sweep["points"]] == [500.0, 1000.0, 1500.0]
    assert all("selected" in point and "templates" in point for point in sweep["points"])


def test_counts_in_messages_agree_with_their_noun():
    from bamasc.words import counted

    assert [counted(n, "instance") for n in (0, 1, 2)] == ["0 instances", "1 instance", "2 instances"]


def test_a_retrained_policy_makes_the_plan_stale(workspace):
    source = workspace / "gsm8k.bam"
    source.write_text(source.read_text().replace("select       = strongest", 'select       = policy("policy.msgpack")', 1))
    checkpoint = workspace / "policy.msgpack"
    checkpoint.write_bytes(b"first training")
    plan_path = workspace / "plan.json"
    assert main(["compile", str(source), "--system", "gsm8k", "-o", str(plan_path)]) == 0
    recorded = json.loads(plan_path.read_text())["systems"][0]["selection"]
    assert recorded["policy"] == "policy.msgpack" and len(recorded["policy_sha256"]) == 64
    load_plan(str(plan_path))
    checkpoint.write_bytes(b"second training")
    with pytest.raises(StalePlanError, match="policy checkpoint of system 'gsm8k'"):
        load_plan(str(plan_path))


def test_a_budget_given_on_the_command_line_replaces_the_declared_one_in_every_check(tmp_path, capsys):
    """A declared budget no template fits is a lint error (BAM404); `--budget` that fits compiles,
    and a smaller `--budget` is judged by the binder alone, never by the declared budget."""
    text = open(GSM8K, encoding="utf-8").read().replace("budget       = 1625", "budget       = 1")
    assert "budget       = 1 " in text
    path = tmp_path / "tiny.bam"
    path.write_text(text, encoding="utf-8")
    assert main(["lint", str(path)]) == 1
    assert "BAM404" in "".join(capsys.readouterr())
    assert main(["compile", str(path), "--system", "gsm8k", "--budget", "1625"]) == 0
    capsys.readouterr()
    main(["compile", str(path), "--system", "gsm8k", "--budget", "600"])
    said = "".join(capsys.readouterr())
    assert "BAM501" in said and "BAM404" not in said and "BAM405" not in said and "of 1 µ$" not in said


def test_rules_that_conflict_at_any_budget_are_named_alike_at_every_budget():
    """`lone` in tight.bam cannot be bound at any budget; the rows blamed must not depend on the budget tried."""
    path = os.path.join(ROOT, "tests", "fixtures", "stages", "tight.bam")
    blamed = set()
    for budget in (100, 500, 5000):
        result = compile_file(path, budget=budget)
        (binding,) = [b for found in result.bindings.values() for b in found if b.template == "lone"]
        assert not binding.feasible and binding.cheapest_cost is None
        blamed.add(binding.binding_rows)
    assert blamed == {("min_agents",)}
