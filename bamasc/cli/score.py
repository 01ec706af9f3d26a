"""`bamasc score`: score a file of model outputs against a published dataset."""

from __future__ import annotations

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output, scoring
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    score = commands.add_parser("score", help="score a file of model outputs against a dataset")
    score.add_argument("--dataset", required=True, metavar="D", help=scoring.DATASET_HELP)
    score.add_argument("--kind", required=True, choices=scoring.KINDS)
    score.add_argument("--predictions", required=True, metavar="JSONL",
                       help="one object a line: `id` or `task_id` (else the line number) and `prediction`")
    score.add_argument("-o", "--output", metavar="JSONL", help="write one verdict a line here")
    score.add_argument("--split", choices=scoring.SPLITS, help=scoring.SPLIT_HELP)
    scoring.add_sampling_options(score)
    score.add_argument("--scorer", choices=scoring.SCORERS, help=scoring.SCORER_HELP)
    score.add_argument("--concurrency", type=cli_args.positive, default=2, metavar="N",
                       help="MBPP programs run at once (default 2)")
    score.add_argument("--skip-bad-rows", action="store_true", help="report malformed rows and go on")
    scoring.add_sandbox_options(score)
    score.set_defaults(run=run)


def run(args) -> int:
    from bamasc.words import counted

    report = Report()
    if not inputs.is_file(report, args.predictions):
        return report.return_code
    if args.output and not inputs.writable(report, args.output, "the verdicts"):
        return report.return_code
    from bamasc.evaluate.scorers import scorer_for

    try:
        scorer_for(args.kind, args.scorer)
    except ValueError as problem:
        output.usage(report, problem)
        return report.return_code
    dataset = scoring.load_dataset(report, args.dataset, args.kind, args.split, args.skip_bad_rows)
    if dataset is None:
        return report.return_code
    items = scoring.sampled(report, dataset.items, args)
    if items is None:
        return report.return_code
    from bamasc.evaluate.predictions import PredictionError, read_predictions
    from bamasc.evaluate.sandbox import Limits
    from bamasc.evaluate.scorers import score_items

    predictions = inputs.rows(report, read_predictions, args.predictions, args.skip_bad_rows, PredictionError)
    if predictions is None:
        return report.return_code
    known = {item.id for item in dataset.items}
    unknown = [key for key in predictions if key not in known]
    if unknown:
        output.warning(f"{counted(len(unknown), 'prediction')} with an id the dataset does not have (first: {unknown[0]!r})")
    # Predictions for items the sampling options left out are not scored, and not unknown either.
    missing = sum(item.id not in predictions for item in items)
    if missing:
        output.warning(f"no prediction for {counted(missing, 'item')}: scored as wrong")
    pairs = [(item, predictions.get(item.id)) for item in items]
    isolation = scoring.isolation(report, args, args.kind)
    if isolation is None:
        return report.return_code
    # scoring.isolation has checked the sandbox can run here: score_items refuses nothing more.
    verdicts = score_items(args.kind, pairs, Limits(wall_time=args.code_timeout), concurrency=args.concurrency,
                           isolation=isolation, scorer=args.scorer)
    if args.output:
        _write_verdicts(verdicts, args.output)
        print(f"verdicts written to {args.output}")
    correct = sum(verdict.correct for verdict in verdicts)
    print(f"scored {len(verdicts)} {args.kind} items from {args.dataset}")
    print(f"accuracy: {correct}/{len(verdicts)}")
    return report.return_code


def _write_verdicts(verdicts, path: str) -> None:
    import json

    with open(path, "w", encoding="utf-8") as handle:
        for verdict in verdicts:
            row = {"id": verdict.id, "correct": verdict.correct, "prediction": verdict.prediction,
                   "reference": verdict.reference, "detail": verdict.detail}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
