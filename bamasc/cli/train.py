"""`bamasc train`: train the topology policy on offline rows and write a checkpoint.

The parser imports no ML library: the defaults left unset here are
TrainConfig's (policy/train.py), repeated in the help, and a test keeps the
two in step.
"""

from __future__ import annotations

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report

REWARDS = ("success", "failure", "overflow", "efficiency", "infeasible", "task_weight", "budget_weight")
OBJECTIVES = ("weighted", "naive", "reference")  # policy.train.OBJECTIVES, repeated so that the parser imports no jax


def add_parser(commands) -> None:
    train = commands.add_parser("train", help="train the topology policy on offline rows; writes a checkpoint")
    train.add_argument("file", metavar="FILE")
    train.add_argument("--data", required=True, metavar="JSONL", help="offline rows (from `bamasc collect`)")
    train.add_argument("-o", "--output", required=True, metavar="CHECKPOINT", help="e.g. policy.msgpack")
    train.add_argument("--system")
    train.add_argument("--skip-bad-rows", action="store_true", help="report malformed offline rows and go on")
    train.add_argument("--epochs", type=cli_args.positive,
                       help="the most passes over the training rows (default 100), 10 with --objective reference")
    train.add_argument("--seed", type=int, help="initialisation, batch order and split "
                       "(default 0), 42 with --objective reference (123 for an MBPP system)")
    train.add_argument("--holdout", type=cli_args.share, help="share of task ids held out for the report (default 0.2)")
    train.add_argument("--entropy", type=cli_args.finite,
                       help="entropy bonus weight beta, in reward units of success - failure (default 0.25), "
                            "on raw rewards with --objective reference (0.001 there)")
    train.add_argument("--objective", choices=OBJECTIVES,
                       help="weighted: importance-weighted REINFORCE (the default); naive: -log pi * R on bamasc's "
                            "network and settings; reference: the BAMAS reference's training as a whole (its loss "
                            "on raw rewards, infeasible templates trained on, its network, settings, seed and "
                            "epoch rule; docs/policy.md)")
    train.add_argument("--validation", type=cli_args.share,
                       help="share of the training task ids that choose the epoch; 0: no early stopping (default 0.25)")
    train.add_argument("--patience", type=cli_args.positive,
                       help="epochs without a better validation reward before stopping (default 10)")
    train.add_argument("--learning-rate", type=cli_args.finite,
                       help="Adam step size (default 0.001), 0.003 with --objective reference")
    train.add_argument("--batch-size", type=cli_args.positive,
                       help="rows per step (default 64), 20000 with --objective reference")
    train.add_argument("--hidden", type=cli_args.positive, help="width of the hidden layers (default 128)")
    train.add_argument("--embedding", choices=("minilm", "hashed"), default="minilm",
                       help="task embedding: all-MiniLM-L6-v2, or hashed words (a model-free stand-in)")
    train.add_argument("--cache", metavar="DIR", help="embedding cache folder (default: ~/.cache/bamasc)")
    for name in REWARDS:
        train.add_argument(
            f"--reward-{name.replace('_', '-')}", type=cli_args.finite, metavar="X", help=f"reward constant '{name}' (default: the system's)"
        )
    train.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    if not (inputs.is_file(report, args.file) and inputs.is_file(report, args.data)):
        return report.return_code
    if args.output.endswith(".json"):
        output.usage(report, f"name the checkpoint e.g. policy.msgpack, not {args.output}: "
                             "its metadata is written beside it as .json")
        return report.return_code
    system = inputs.checked_system(report, args.file, args.system)
    if system is None:
        return report.return_code
    from bamasc.extras import EXTRAS, MINILM

    needs = [(EXTRAS["policy"], "training a policy")]
    needs += [(MINILM, "--embedding minilm (hashed needs no model)")] if args.embedding == "minilm" else []
    if not inputs.extras(report, needs, "train"):
        return report.return_code
    from bamasc.policy.data import OfflineDataError, read_offline_rows

    rows = inputs.rows(report, read_offline_rows, args.data, args.skip_bad_rows, OfflineDataError)
    if rows is None:
        return report.return_code
    if not rows:
        output.failure(report, f"{args.data} has no rows")
        return report.return_code
    import time

    from bamasc.policy.checkpoint import load_policy, save_policy
    from bamasc.policy.features import HASHED, MINILM, EmbeddingUnavailable, Features, budget_scale, default_cache_dir
    from bamasc.policy.report import report_text
    from bamasc.policy.train import Reward, TrainConfig, checkpoint_metadata, train_policy
    from bamasc.records import as_dict

    overrides = {name: getattr(args, f"reward_{name}") for name in REWARDS}
    reward = Reward(**{**as_dict(system.reward), **{k: v for k, v in overrides.items() if v is not None}})
    for name in ("task_weight", "budget_weight"):
        if getattr(reward, name) < 0:  # as the reward block refuses one (BAM224)
            output.usage(report, f"--reward-{name.replace('_', '-')} may not be negative: a weight multiplies its term")
            return report.return_code
    given = {
        name: getattr(args, name)
        for name in ("hidden", "learning_rate", "epochs", "batch_size", "entropy", "seed", "holdout", "validation",
                     "patience", "objective")
        if getattr(args, name) is not None
    }
    if args.objective == "reference":
        for name in ("validation", "patience"):
            if name in given:
                output.usage(report, f"--{name} does not apply to --objective reference: it keeps its best epoch "
                                     "by the training rows, as the reference does")
                return report.return_code
        from bamasc.evaluate.scorers import answer_kind_dataset
        from bamasc.policy.train import reference_config

        config = reference_config(answer_kind_dataset(system.answer), **given, reward=reward)
    else:
        config = TrainConfig(**given, reward=reward)
    embedding = MINILM if args.embedding == "minilm" else HASHED
    features = Features(embedding, args.cache or default_cache_dir())
    scale = budget_scale(system)
    started = time.perf_counter()
    progress = output.ProgressBar()
    try:
        result = train_policy(rows, system.topologies, config, features.embed, scale, progress)
    except EmbeddingUnavailable as problem:
        output.failure(report, problem)
        return report.return_code
    except ValueError as problem:
        output.failure(report, f"{args.data}: {problem}")
        return report.return_code
    finally:
        progress.close()
    elapsed = time.perf_counter() - started
    metadata = checkpoint_metadata(system, embedding, scale, config, args.data, len(rows), result)
    meta_path = save_policy(args.output, result.state.params, metadata)
    load_policy(args.output, system.topologies)  # self-check: the written checkpoint loads and matches the system
    print(f"trained on {result.samples} runs of {result.train_tasks - result.validation_tasks} tasks in {elapsed:.1f} s "
          f"({len(result.history)} epochs, final loss {result.history[-1]:.4f})")
    if result.validation:
        print(f"kept epoch {result.best_epoch}: the best reward on {result.validation_tasks} validation tasks, "
              f"{max(result.validation):.3f}")
    if result.training_scores:
        print(f"kept epoch {result.best_epoch}: the best mean reward of the training rows whose template the "
              f"sampled policy agreed with (the reference's rule), {max(result.training_scores):.3f}")
    if result.heldout is not None:
        print(report_text(result.heldout))
    else:
        print("no held-out tasks (--holdout 0): no report")
    print(f"policy written to {args.output} (reloaded and checked), metadata to {meta_path}")
    return report.return_code
