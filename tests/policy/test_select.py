"""Selection: infeasible templates are never picked, checkpoints round-trip, mismatched ones are refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from bamasc.policy.checkpoint import (
    PolicyError,
    load_policy,
    metadata_path,
    save_policy,
)
from bamasc.policy.features import HASHED, Features, HashedWords, budget_feature
from bamasc.plan.compile import compile_file
from bamasc.policy.select import PolicySelector, policy_path
from bamasc.policy.report import policy_choices, probabilities
from bamasc.policy.train import TrainConfig, create_state, train_policy
from tests.conftest import ROOT
from tests.policy.synthetic import TEMPLATES, table_rows

SCALE = 1250.0
ESSAY = "Write a short essay about travel and music, in three paragraphs, with a clear thesis."
CODE = "Write a python function that takes a string and returns the keys sorted, with a docstring and tests."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    rows = table_rows(tasks_per_cluster=20, seed=4)
    result = train_policy(rows, TEMPLATES, TrainConfig(seed=4, holdout=0.0), HashedWords().encode, SCALE)
    path = str(tmp_path_factory.mktemp("policy") / "policy.msgpack")
    meta = {
        "templates": list(TEMPLATES),
        "embedding_model": HASHED,
        "budget_scale": SCALE,
        "reward": {},
        "network": {"hidden": 128, "depth": 1, "budget": "steps"},
        "data_sha256": "0" * 64,
        "heldout": None,
    }
    save_policy(path, result.state.params, meta)
    return path, result.state


def test_random_networks_never_pick_an_infeasible_template():
    rng = np.random.default_rng(0)
    apply_fn = create_state(len(TEMPLATES), TrainConfig(), 384).apply_fn
    for seed in range(3):
        params = create_state(len(TEMPLATES), TrainConfig(seed=seed), 384).params
        # Make the last template's logit dominate everywhere, so only the mask can stop it.
        params["logits"]["bias"] = params["logits"]["bias"].at[3].set(100.0)
        embeddings = rng.normal(size=(500, 384)).astype(np.float32)
        budgets = rng.uniform(0.02, 3.0, size=500).astype(np.float32)
        feasible = rng.random((500, 4)) < 0.5
        feasible[np.arange(500), rng.integers(0, 4, 500)] = True
        picks = policy_choices(params, apply_fn, embeddings, budgets, feasible)
        assert feasible[np.arange(500), picks].all()
        probs = np.asarray(probabilities(params, apply_fn, embeddings, budgets, feasible))
        assert (probs[~feasible] == 0).all()
        assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
        assert (picks[feasible[:, 3]] == 3).all()


def test_the_trained_policy_never_picks_a_masked_template_at_any_budget(checkpoint):
    path, _ = checkpoint
    selector = PolicySelector(load_policy(path, TEMPLATES), Features(HASHED))
    without_planner = {"linear": True, "star": True, "feedback": True, "planner": False}
    for budget in np.linspace(100, 3000, 30):
        picks = selector.choose([ESSAY, CODE], float(budget), without_planner)
        assert "planner" not in picks
        (probs,) = selector.probabilities([ESSAY], float(budget), without_planner)
        assert probs["planner"] == 0.0 and abs(sum(probs.values()) - 1) < 1e-5
    # Where it may, the policy does pick the planner for essays at high budgets (it is their best there).
    assert selector.choose([ESSAY, CODE], 1250.0, dict.fromkeys(TEMPLATES, True)) == ["planner", "linear"]
    with pytest.raises(PolicyError, match="no template is feasible"):
        selector.choose([ESSAY], 100.0, dict.fromkeys(TEMPLATES, False))


def test_a_checkpoint_round_trips_with_the_same_probabilities(checkpoint):
    path, state = checkpoint
    loaded = load_policy(path, ("planner", "feedback", "star", "linear"))  # order does not matter, names do
    embedding = HashedWords().encode([ESSAY])
    budget = budget_feature([875.0], SCALE)
    feasible = np.ones((1, 4), bool)
    before = probabilities(state.params, state.apply_fn, embedding, budget, feasible)
    after = probabilities(loaded.params, loaded.module.apply, embedding, budget, feasible)
    assert_allclose(np.asarray(after), np.asarray(before), rtol=1e-6)
    meta = json.loads(Path(metadata_path(path)).read_text())
    assert meta["templates"] == list(TEMPLATES) and meta["format_version"] == 1 and len(meta["params_sha256"]) == 64


def test_mismatched_templates_are_a_clear_error(checkpoint):
    path, _ = checkpoint
    with pytest.raises(PolicyError) as problem:
        load_policy(path, ("linear", "star", "vote"))
    message = str(problem.value)
    assert "trained for templates linear, star, feedback, planner" in message
    assert "vote is not in it" in message and "feedback, planner, which the system does not have" in message


def test_an_unknown_embedding_model_or_changed_parameters_are_refused(checkpoint, tmp_path):
    path, _ = checkpoint
    copy = tmp_path / "copy.msgpack"
    copy.write_bytes(Path(path).read_bytes())
    meta = json.loads(Path(metadata_path(path)).read_text())
    (tmp_path / "copy.json").write_text(json.dumps({**meta, "embedding_model": "other/encoder"}))
    with pytest.raises(PolicyError, match="trained on other/encoder embeddings"):
        load_policy(str(copy), TEMPLATES)
    (tmp_path / "copy.json").write_text(json.dumps(meta))
    copy.write_bytes(copy.read_bytes()[:-4] + b"\x00\x00\x00\x00")
    with pytest.raises(PolicyError, match="does not match the parameter hash"):
        load_policy(str(copy), TEMPLATES)
    with pytest.raises(PolicyError, match="no policy checkpoint at"):
        load_policy(str(tmp_path / "missing.msgpack"), TEMPLATES)


def test_a_run_loads_the_checkpoint_whose_hash_the_plan_holds(tmp_path):
    source = Path(ROOT, "examples", "gsm8k.bam").read_text(encoding="utf-8")
    folder = tmp_path / "systems"
    folder.mkdir()
    bam = folder / "gsm8k.bam"
    bam.write_text(source.replace("select       = strongest", 'select       = policy("../policies/p.msgpack")', 1))
    checkpoint = tmp_path / "policies" / "p.msgpack"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"parameters")
    compiled = compile_file(str(bam), "gsm8k")
    system = compiled.plan.system("gsm8k")
    path = policy_path(system, compiled.program)
    assert path == str(checkpoint)  # relative to the file that declares the system, not the working directory
    assert system.selection["policy_sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()

    bam.write_text(source)
    compiled = compile_file(str(bam), "gsm8k")
    with pytest.raises(PolicyError, match="system 'gsm8k' does not select by policy"):
        policy_path(compiled.plan.system("gsm8k"), compiled.program)
