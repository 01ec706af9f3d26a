"""A plan file runs only what its sources give: every edit or malformed value is refused by name.

One plan is compiled from examples/gsm8k.bam; each test writes an edited copy
beside it (so its sources resolve) and loads it, in-process or through the
`bamasc` command.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
import subprocess
import sys

import pytest

from bamasc.cli import main
from bamasc.plan.compile import compile_file
from bamasc.plan.lengths import LengthFit
from bamasc.plan.build import build_plan
from bamasc.plan.load import PlanVerificationError, StalePlanError, load_plan
from bamasc.plan.schema import PlanFormatError, dumps, to_data
from tests.conftest import ROOT

GSM8K = os.path.join(ROOT, "examples", "gsm8k.bam")
REFUSALS = (PlanFormatError, StalePlanError, PlanVerificationError)
NAN = float("nan")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(folder, plan path, plan data): gsm8k.bam compiled with `bamasc compile -o`."""
    folder = tmp_path_factory.mktemp("plan")
    shutil.copy(GSM8K, folder / "gsm8k.bam")
    plan_path = folder / "plan.json"
    assert main(["compile", str(folder / "gsm8k.bam"), "-o", str(plan_path)]) == 0
    data = json.loads(plan_path.read_text(encoding="utf-8"))
    # The paths below name templates by position; this is the order they stand in.
    assert [t["name"] for t in data["systems"][0]["templates"]] == ["linear", "star", "feedback", "planner"]
    assert [s["name"] for s in data["systems"]] == ["gsm8k", "gsm8k_linear_nano", "gsm8k_star_nano"]
    return folder, plan_path, data


_written = iter(range(10**9))


def write_plan(folder, content) -> str:
    """`content` (data, or text as is) in a new file beside the sources."""
    path = folder / f"edited{next(_written)}.json"
    if isinstance(content, (bytes, str)):
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return str(path)


def refusal(path: str) -> str:
    with pytest.raises(REFUSALS) as problem:
        load_plan(path)
    return str(problem.value)


def edited(data, where, value):
    """A deep copy of `data` with the value at the path `where` (keys and indexes) replaced."""
    result = copy.deepcopy(data)
    target = result
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    return result


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bamasc", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


# ---------------------------------------------------------------- the attack from the issue


def test_a_plan_whose_binding_was_edited_does_not_run(compiled):
    """The star template's third seat moved to the strong model, its nodes left alone: the
    runtime would make three strong calls under a bound proven for two."""
    folder, _, data = compiled
    star = ("systems", 0, "templates", 1)
    assert data["systems"][0]["selection"]["selected"] == "star"
    assert data["systems"][0]["templates"][1]["binding"][2]["model"] == "gpt41_nano"
    path = write_plan(folder, edited(data, (*star, "binding", 2, "model"), "deepseek_v3"))
    run = run_cli("exec", path, "--task", "What is 6 times 7?", "--dry-run")
    assert run.returncode == 1, run.stdout
    assert "systems.gsm8k.templates.star.binding[2].model" in run.stderr and '"deepseek_v3"' in run.stderr
    assert '"gpt41_nano"' in run.stderr and "Traceback" not in run.stderr
    assert "spent:" not in run.stdout  # nothing ran


def test_the_unedited_plan_runs_and_what_it_runs_is_the_compiler_s(compiled):
    folder, plan_path, data = compiled
    plan, program = load_plan(str(plan_path))
    fresh = compile_file(str(folder / "gsm8k.bam"), plan_dir=str(folder))
    assert to_data(plan) == to_data(build_plan(fresh.program, fresh.bindings, str(folder)))
    assert plan.system().template("star").binding[2].model == "gpt41_nano"
    run = run_cli("exec", str(plan_path), "--task", "What is 6 times 7?", "--fake", "echo")
    assert run.returncode == 0, run.stderr
    # Its bound at the task's own length (18 bytes, the fake's tokens), not the compiled 1578.2.
    bound = LengthFit(program, plan.system()).bound_at(plan.system().template("star"), len(b"What is 6 times 7?"))
    assert f"bound {bound:.1f}" in run.stdout and bound < 1578.2


def test_a_reformatted_plan_is_the_same_plan(compiled):
    """Key order, spacing and 1625 for 1625.0 change no value: such a file is accepted."""
    folder, plan_path, data = compiled
    original, _ = load_plan(str(plan_path))
    budget = edited(data, ("systems", 0, "budget"), 1625)
    plan, _ = load_plan(write_plan(folder, json.dumps(budget, sort_keys=True, separators=(",", ":"))))
    assert to_data(plan) == to_data(original)


# ---------------------------------------------------------------- each field the runtime uses

S = ("systems", 0)
STAR = (*S, "templates", 1)
EDITS = [
    # (where, new value, what the refusal must name)
    ((*STAR, "binding", 2, "model"), "deepseek_v3", "systems.gsm8k.templates.star.binding[2].model"),
    ((*STAR, "binding", 0, "slot"), "critic", "systems.gsm8k.templates.star.binding[0].slot"),
    ((*STAR, "binding", 1, "instance"), 7, "systems.gsm8k.templates.star.binding[1].instance"),
    ((*STAR, "nodes", 0, "model"), "gpt41_nano", "systems.gsm8k.templates.star.nodes[0].model"),
    ((*STAR, "nodes", 0, "role"), "Critic", "systems.gsm8k.templates.star.nodes[0].role"),
    ((*STAR, "nodes", 1, "id"), "executor[9]@0.parallel9", "systems.gsm8k.templates.star.nodes[1].id"),
    ((*STAR, "nodes", 0, "output_tokens"), 100000, "systems.gsm8k.templates.star.nodes[0].output_tokens"),
    ((*STAR, "counts", "executor"), 3, "systems.gsm8k.templates.star.counts.executor"),
    ((*STAR, "counts"), {"executor": 4, "critic": 1}, "systems.gsm8k.templates.star.counts.critic"),
    ((*STAR, "worst_case_cost"), 1000.0, "systems.gsm8k.templates.star.worst_case_cost"),
    ((*STAR, "feasible"), False, "systems.gsm8k.templates.star.feasible"),
    ((*STAR, "answer_nodes"), [], "systems.gsm8k.templates.star.answer_nodes"),
    ((*STAR, "name"), "linear", "systems.gsm8k.templates[1].name"),
    ((*S, "budget"), 2000, "systems.gsm8k.budget"),
    ((*S, "budget"), NAN, "systems.gsm8k.budget is NaN"),
    ((*S, "budget"), math.inf, "systems.gsm8k.budget is Infinity"),
    ((*S, "budget"), "1625", 'systems.gsm8k.budget is "1625"'),
    ((*S, "budget"), -1625, "systems.gsm8k.budget is -1625"),
    ((*S, "budget"), True, "systems.gsm8k.budget is true"),
    ((*S, "budget"), None, "systems.gsm8k.budget is null"),
    ((*S, "budget"), 10**400, "systems.gsm8k.budget is 100000000000..."),
    ((*S, "task_tokens"), 1, "systems.gsm8k.task_tokens"),
    ((*S, "min_agents"), 0, "systems.gsm8k.min_agents"),
    ((*S, "answer"), "bogus", 'systems.gsm8k.answer is "bogus"'),
    ((*S, "on_exhausted"), "bogus", 'systems.gsm8k.on_exhausted is "bogus"'),
    ((*S, "on_exhausted"), "fail", 'systems.gsm8k.on_exhausted is "fail"'),
    ((*S, "selection", "selected"), "linear", "systems.gsm8k.selection.selected"),
    ((*S, "selection", "rule"), "cheapest", "systems.gsm8k.selection.rule"),
    ((*S, "selection", "policy"), "policy.msgpack", "systems.gsm8k.selection.policy"),
    ((*S, "selection", "policy_sha256"), "0" * 64, "systems.gsm8k.selection.policy_sha256"),
    ((*S, "name"), "gsm8k_linear_nano", "systems[0].name"),
    (("prices", "deepseek_v3", "input"), 0.0, "prices.deepseek_v3.input is 0.0"),
    (("prices", "gpt41_nano", "tier"), 1, "prices.gpt41_nano.tier"),
    (("prices", "gpt41_nano", "max_output"), 10, "prices.gpt41_nano.max_output"),
    (("systems",), {}, "systems is an empty object"),
    (("systems",), [], "systems.gsm8k is missing"),
    (("source_sha256",), "0" * 64, "source_sha256"),
    (("compiled_with", "budget"), 2000, "compiled_with.budget is 2000"),
    (("compiled_with", "budget"), NAN, "compiled_with.budget is NaN"),
    (("compiled_with", "budget"), "2000", 'compiled_with.budget is "2000"'),
    (("compiled_with", "system"), "gsm8k", 'compiled_with.system is "gsm8k"'),
    (("compiled_with", "system"), ["gsm8k"], "compiled_with.system is a list"),
    (("compiled_with", "method"), "weights", "compiled_with"),
    (("compiled_with", "method"), "annealing", 'compiled_with.method is "annealing"'),
    (("compiled_with",), None, "compiled_with is null"),
    (("plan_sha256",), "0" * 64, "plan_sha256"),
    (("schema_version",), 1, "schema_version is 1"),
    (("schema_version",), True, "schema_version is true"),
    (("compiler_version",), "0.0.1", 'compiler_version is "0.0.1"'),
    (("root",), "other.bam", 'root is "other.bam"'),
    (("sources",), "gsm8k.bam", 'sources is "gsm8k.bam"'),
    (("sources", 0, "path"), "/etc/passwd", 'sources[0].path is "/etc/passwd"'),
    (("sources", 0, "sha256"), 12, "sources[0].sha256 is 12"),
]


@pytest.mark.parametrize("where, value, named", EDITS, ids=lambda v: str(v)[:40])
def test_an_edited_field_is_refused_by_name(compiled, where, value, named):
    folder, _, data = compiled
    message = refusal(write_plan(folder, edited(data, where, value)))
    assert named in message


def test_an_edited_source_hash_makes_the_plan_stale(compiled):
    folder, _, data = compiled
    message = refusal(write_plan(folder, edited(data, ("sources", 0, "sha256"), "0" * 64)))
    assert "is stale" in message and data["sources"][0]["path"] in message


def test_missing_extra_and_repeated_keys_are_named(compiled):
    folder, _, data = compiled
    missing = copy.deepcopy(data)
    del missing["systems"][0]["on_exhausted"]
    assert 'systems.gsm8k.on_exhausted is missing (the sources give "best_so_far")' in refusal(write_plan(folder, missing))
    extra = edited(data, (*STAR, "binding", 0, "max_tokens"), 10**6)
    assert "systems.gsm8k.templates.star.binding[0].max_tokens is not a field" in refusal(write_plan(folder, extra))
    odd = edited(data, ("prices", "deepseek_v3", "a key\u2028with \ud800 in it"), 1)
    message = refusal(write_plan(folder, odd))
    assert 'prices.deepseek_v3["a key\\u2028with \\ud800 in it"] is not a field' in message
    text = json.dumps(data).replace('"on_exhausted": "best_so_far"', '"on_exhausted": "fail", "on_exhausted": "best_so_far"', 1)
    assert 'systems.gsm8k holds the key "on_exhausted" twice' in refusal(write_plan(folder, text))


def test_a_budget_given_at_compile_time_is_recorded_and_held(compiled, tmp_path):
    shutil.copy(GSM8K, tmp_path / "gsm8k.bam")
    plan_path = tmp_path / "plan.json"
    assert main(["compile", str(tmp_path / "gsm8k.bam"), "--system", "gsm8k", "--budget", "2000", "-o", str(plan_path)]) == 0
    data = json.loads(plan_path.read_text())
    assert data["compiled_with"] == {"system": "gsm8k", "budget": 2000.0, "method": "lexicographic"}
    plan, _ = load_plan(str(plan_path))
    assert plan.system().budget == 2000
    # Back to the declared budget in one place only: the two disagree.
    message = refusal(write_plan(tmp_path, edited(data, ("systems", 0, "budget"), 1625)))
    assert "compiled_with.budget is 2000.0, but systems.gsm8k.budget is 1625" in message
    # Both edited: a budget the bindings were not made for.
    both = edited(edited(data, ("systems", 0, "budget"), 1625.0), ("compiled_with", "budget"), 1625.0)
    assert "systems.gsm8k.templates." in refusal(write_plan(tmp_path, both))


def test_a_plan_bound_with_the_weights_method_reloads(compiled):
    folder, _, _ = compiled
    result = compile_file(str(folder / "gsm8k.bam"), method="weights", plan_dir=str(folder))
    plan = build_plan(result.program, result.bindings, str(folder), "weights")
    path = write_plan(folder, dumps(plan))
    loaded, _ = load_plan(path)
    assert loaded.compiled_with["method"] == "weights" and to_data(loaded) == to_data(plan)


def test_an_edited_policy_reference_is_refused(tmp_path):
    source = tmp_path / "gsm8k.bam"
    source.write_text(open(GSM8K, encoding="utf-8").read().replace("select       = strongest", 'select       = policy("policy.msgpack")', 1))
    (tmp_path / "policy.msgpack").write_bytes(b"a checkpoint")
    (tmp_path / "other.msgpack").write_bytes(b"another checkpoint")
    plan_path = tmp_path / "plan.json"
    assert main(["compile", str(source), "--system", "gsm8k", "-o", str(plan_path)]) == 0
    data = json.loads(plan_path.read_text())
    message = refusal(write_plan(tmp_path, edited(data, ("systems", 0, "selection", "policy"), "other.msgpack")))
    assert 'systems.gsm8k.selection.policy is "other.msgpack", but the sources give "policy.msgpack"' in message
    message = refusal(write_plan(tmp_path, edited(data, ("systems", 0, "selection", "policy_sha256"), "0" * 64)))
    assert "systems.gsm8k.selection.policy_sha256" in message and "stale" in message


# ---------------------------------------------------------------- files that are not plans

NOT_PLANS = [
    (b"", "is not JSON"),
    (b"[]", "it holds a list of 0 items"),
    (b"null", "it holds null"),
    (b'"a plan"', 'it holds "a plan"'),
    (b"NaN", "it holds NaN"),
    (b'{"schema_version": 4, "a": "\xff\xfe"}', "not UTF-8 text (the byte at offset 28 is invalid)"),
    (b"\xef\xbb\xbf{}", "is not JSON"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
    (b'{"schema_version": ' + b"9" * 5000 + b"}", "a number of thousands of digits"),
    (b"{}", "schema_version is null"),
    (b'{"schema_version": 4}', "sources is null"),
    (b'{"schema_version": 4.0, "sources": [{"path": "gsm8k.bam", "sha256": "x"}]}', "sources[0].sha256"),
]


@pytest.mark.parametrize("content, named", NOT_PLANS, ids=lambda v: repr(v)[:30])
def test_a_file_that_is_no_plan_is_refused(compiled, content, named):
    folder, _, _ = compiled
    assert named in refusal(write_plan(folder, content))


def test_a_truncated_plan_is_refused_wherever_it_ends(compiled):
    folder, plan_path, _ = compiled
    text = plan_path.read_bytes()
    for end in (1, 100, len(text) // 2, len(text) - 3):
        assert "is not JSON" in refusal(write_plan(folder, text[:end]))


def test_a_folder_or_a_fifo_is_no_plan(compiled):
    folder, _, _ = compiled
    assert "is not a regular file" in refusal(str(folder))
    fifo = folder / "plan.fifo"
    os.mkfifo(fifo)
    assert "is not a regular file" in refusal(str(fifo))
    assert "cannot read" in refusal(str(folder / "absent.json"))
    assert "cannot read" in refusal(str(folder / "nul\x00.json"))
    run = run_cli("exec", str(fifo), "--task", "x", "--fake", "echo")
    assert run.returncode == 2 and "no such file" in run.stderr


# ---------------------------------------------------------------- mutation fuzz


def _same_json(a, b) -> bool:
    """JSON equality, told apart from Python's: true is not 1, NaN is not NaN, numbers by value."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b


def _places(value, where=()):
    """Every (path, value) in the data, containers included."""
    yield where, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _places(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _places(item, (*where, index))


def _strange(rng: random.Random, old):
    choices = [
        None, True, False, 0, -1, 1, 2**63, -(10**30), 1e308, -0.0, NAN, math.inf, -math.inf, "", "x",
        "deepseek_v3", "gpt41_nano", "star", "fail", "\ud800", [], {}, [[[]]], {"name": "gsm8k"},
        [None] * 3, "9" * 100,
    ]
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        choices += [old + 1, old - 1, old * 1.0001, -old, float(old), str(old)]
    if isinstance(old, str):
        choices += [old + "x", old.upper(), old[:-1], [old]]
    return rng.choice(choices)


def _mutate(rng: random.Random, data):
    """One random edit: a value replaced, a key removed or added, a list item dropped, doubled or moved."""
    result = copy.deepcopy(data)
    where, old = rng.choice(list(_places(result))[1:])
    parent = result
    for step in where[:-1]:
        parent = parent[step]
    key = where[-1]
    action = rng.choice(("replace", "replace", "replace", "remove", "add", "list"))
    if action == "remove" and isinstance(parent, dict):
        del parent[key]
    elif action == "add" and isinstance(old, dict):
        old[rng.choice(("extra", "name", "budget", "model", ""))] = _strange(rng, None)
    elif action == "list" and isinstance(old, list) and old:
        index = rng.randrange(len(old))
        rng.choice((lambda: old.pop(index), lambda: old.insert(index, copy.deepcopy(old[index])), lambda: old.reverse()))()
    else:
        parent[key] = _strange(rng, old)
    return result, where


def test_random_edits_are_refused_or_change_nothing(compiled):
    folder, plan_path, data = compiled
    original, _ = load_plan(str(plan_path))
    rng = random.Random(20240611)
    refused = accepted = 0
    for _ in range(120):
        mutated, where = _mutate(rng, data)
        path = write_plan(folder, json.dumps(mutated))
        try:
            plan, _ = load_plan(path)
        except REFUSALS as problem:
            refused += 1
            message = str(problem)
            assert message and "Traceback" not in message
            leaf = next((step for step in reversed(where) if isinstance(step, str)), None)
            if where[0] not in ("sources", "root") and leaf is not None and not _same_json(mutated, data):
                # A refusal names the field edited (or the field its edit conflicts with).
                assert leaf in message or where[0] in message, (where, message)
        else:
            accepted += 1
            assert _same_json(mutated, data), where
            assert to_data(plan) == to_data(original)
        os.remove(path)
    assert refused > 100  # almost every random edit changes something


def test_random_edits_through_the_command_line_exit_cleanly(compiled):
    folder, _, data = compiled
    rng = random.Random(7)
    for _ in range(4):
        mutated, _ = _mutate(rng, data)
        path = write_plan(folder, json.dumps(mutated))
        for command in (("exec", path, "--task", "x", "--fake", "echo"), ("explain", path)):
            run = run_cli(*command)
            if _same_json(mutated, data):
                assert run.returncode == 0, run.stderr
            else:
                assert run.returncode in (1, 2) and "Traceback" not in run.stderr, run.stderr
                assert run.stderr.startswith("bamasc: error:"), run.stderr


def test_explain_and_graph_refuse_an_edited_plan(compiled, capsys):
    folder, _, data = compiled
    path = write_plan(folder, edited(data, (*STAR, "binding", 2, "model"), "deepseek_v3"))
    assert main(["explain", path]) == 1
    assert "systems.gsm8k.templates.star.binding[2].model" in capsys.readouterr().err
    assert main(["graph", path]) == 1
    assert "systems.gsm8k.templates.star.binding[2].model" in capsys.readouterr().err


def test_the_recompile_command_names_the_source_as_a_user_would_type_it(tmp_path, monkeypatch):
    from bamasc.plan.load import recompile_command
    from bamasc.plan.read import Settings

    (tmp_path / "plans").mkdir()
    monkeypatch.chdir(tmp_path)
    settings = Settings("../x.bam", (("../x.bam", "0" * 64),), "s", 1625.0, "lexicographic")
    command = recompile_command(settings, str(tmp_path / "plans"), "plans/p.json")
    assert command == "bamasc compile x.bam --system s --budget 1625.0 -o plans/p.json"
    outside = Settings("/elsewhere/y.bam", (("/elsewhere/y.bam", "0" * 64),), None, None, "weights")
    assert recompile_command(outside, str(tmp_path), "p.json") == "bamasc compile /elsewhere/y.bam --method weights -o p.json"


def test_a_plan_edited_to_say_a_call_does_not_read_the_task_is_refused(compiled):
    """Every call of the linear template reads the task. An edit that says the first does not,
    and lowers its tokens, cost and the template's worst case to match, would make its bound
    `task_tokens` short. The plan is compared with what its sources compile to, and the bound
    is recomputed taking whether a call reads the task from the flow, not from the plan."""
    folder, _, data = compiled
    task_tokens = 500
    linear = copy.deepcopy(data)
    template = linear["systems"][0]["templates"][0]
    node = template["nodes"][0]
    assert node["reads_task"] is True
    rate = node["input_cost"] / node["input_tokens"]
    node["reads_task"] = False
    node["input_tokens"] -= task_tokens
    node["input_cost"] -= rate * task_tokens
    node["cost"] -= rate * task_tokens
    template["worst_case_cost"] -= rate * task_tokens
    message = refusal(write_plan(folder, linear))
    assert "nodes[0].reads_task is false, but the sources give true" in message, message
