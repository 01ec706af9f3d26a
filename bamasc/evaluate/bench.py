"""`bamasc bench` as a library call: a system across budgets and its baselines on a dataset, scored.

For every budget the system is compiled at that budget and every task runs
on the template it selects, under the budget guard; the answers are scored
against the dataset's references. Each baseline (a system of the same file
with one template and one model) runs once at its own declared budget. The
result is plain JSON data (`RESULT_KEYS`, one row per run), rendered as a
table here and as a cost-versus-accuracy plot by `plots.py`.
"""

from __future__ import annotations

import asyncio
import os

from bamasc.evaluate.cells import percentile, tally  # noqa: F401 (percentile: the interface)
from bamasc.evaluate.datasets import Dataset
from bamasc.evaluate.progress import Stages
from bamasc.evaluate.scorers import READS_OUTPUT, Verdict, score_items
from bamasc.records import replace
from bamasc.runtime.execute import ExecOptions, Task
from bamasc.runtime.workers import run_tasks

RESULT_KEYS = ("file", "system", "dataset", "kind", "tasks", "runs")


class BenchError(ValueError):
    """A request the benchmark cannot run: an unknown or unsuitable baseline system."""


def check_baseline(program, name: str) -> None:
    """A baseline is one fixed template with every seat on one model (the paper's framework + model rows)."""
    if name not in program.systems:
        raise BenchError(f"no system '{name}' for --baseline; the file declares: {', '.join(program.systems)}")
    system = program.systems[name]
    if len(system.topologies) != 1 or len(system.models) != 1:
        raise BenchError(
            f"baseline system '{name}' must have one template and one model "
            f"(it has {len(system.topologies)} and {len(system.models)})"
        )


def bench(
    path: str,
    dataset: Dataset,
    system: str,
    budgets: list[float],
    baselines: tuple[str, ...] = (),
    options: ExecOptions | None = None,
    code_concurrency: int = 2,
    code_limits=None,
    progress=None,
    save=None,
    isolation: str = "namespaces",
    scorer: str | None = None,
    task_progress=None,
) -> dict:
    """Run `system` at every budget and each baseline at its own budget on every item of `dataset`;
    MBPP programs run `code_concurrency` at a time under `code_limits` (a sandbox.Limits);
    `scorer` names another scorer for the dataset's kind (scorers.SCORERS).
    After each run, `progress(run)` hears of it and `save(data)` gets the results so far; after each task,
    `task_progress(done, total, spent, None)` hears the tasks ended and to run over every run, and the µ$
    they spent."""
    options = options or ExecOptions()
    runs: list[dict] = []
    data = {
        "file": os.path.basename(path),
        "system": system,
        "dataset": os.path.basename(dataset.path.rstrip("/")),
        "kind": dataset.kind,
        "tasks": len(dataset.items),
        "runs": runs,
    }
    plan = [(budget, system, False) for budget in budgets] + [(None, name, True) for name in baselines]
    stages = Stages(task_progress, len(dataset.items) * len(plan)) if task_progress is not None else None
    for budget, name, baseline in plan:
        this_run = stages.stage(len(dataset.items)) if stages is not None else None
        runs.append(bench_run(path, dataset, name, budget, options, baseline, code_concurrency, code_limits, isolation,
                              scorer=scorer, progress=this_run))
        if progress is not None:
            progress(runs[-1])
        if save is not None:
            save(data)
    return data


def write_results(data: dict, path: str) -> None:
    """Write bench results as JSON through a temporary file, so an interruption leaves
    the last complete results at `path`, never a half-written file."""
    import json

    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    os.replace(temporary, path)


def bench_run(path, dataset: Dataset, system: str, budget, options, baseline: bool = False, code_concurrency: int = 2,
              code_limits=None, isolation: str = "namespaces", method: str = "lexicographic",
              checkpoint: str | None = None, scorer: str | None = None, progress=None) -> dict:
    """One run of the benchmark: `system` compiled at `budget` (None: its own) with `method`, every item
    run and scored (by `scorer`, or the dataset kind's own). `checkpoint` selects the template per task
    with that policy instead of the system's `select`. `progress` hears of each task as
    `workers.run_batch` tells it."""
    from bamasc.plan.compile import compile_file

    compiled = compile_file(path, system=system, budget=budget, method=method)
    declared = compiled.program.systems[system].budget if compiled.program is not None else None
    row = {
        "system": system,
        "baseline": baseline,
        "budget": budget if budget is not None else declared,
        "feasible": compiled.plan is not None,
    }
    if compiled.plan is None:
        reasons = [d.message for d in compiled.diagnostics if d.severity == "error"]
        return dict(row, error="; ".join(reasons) or "no plan")
    plan = compiled.plan.system(system)
    template = plan.template(plan.selection["selected"])
    if checkpoint is not None or (plan.selection["rule"] == "policy" and options.selector is None):
        # As `bamasc exec` does: the system's policy (or the one given) picks a template per task.
        from bamasc.policy.errors import PolicyError
        from bamasc.policy.select import selector_for

        try:
            options = replace(options, selector=selector_for(plan, compiled.program, checkpoint=checkpoint))
        except PolicyError as problem:  # a missing or mismatched checkpoint: the command reports it
            raise BenchError(str(problem)) from None
    tasks = [Task(item.id, item.prompt) for item in dataset.items]
    results, _, _ = asyncio.run(run_tasks(compiled.plan, compiled.program, system, tasks, options, progress))
    answers = {result.task_id: result for result in results}
    whole = scorer in READS_OUTPUT  # this scorer extracts from the whole output itself
    pairs = [(item, answers[item.id].output if whole else answers[item.id].answer) for item in dataset.items]
    verdicts = score_items(dataset.kind, pairs, code_limits, code_concurrency, isolation, scorer)
    # Each task's bound is taken at its length (a `too_long` task, which did not run, has none).
    bound = max((result.bound for result in results if result.bound is not None), default=template.worst_case_cost)
    return dict(row, template=template.name, models=sorted({s.model for s in template.binding}),
                bound=round(bound, 6), **summarize(dataset, results, verdicts))


def summarize(dataset: Dataset, results, verdicts: list[Verdict]) -> dict:
    """Every item's record and verdict, and what `cells.tally` counts of them (accuracy, cost statistics,
    overruns, the template mix)."""
    items = []
    for item, result, verdict in zip(dataset.items, results, verdicts):
        items.append(
            {
                "id": item.id,
                "template": result.template,
                "status": result.status,
                "cost": round(result.cost, 6),
                "overran": result.overran,
                "answer": result.answer if dataset.kind != "mbpp" else None,
                "correct": verdict.correct,
                "detail": verdict.detail,
            }
        )
    return {**tally(items), "items": items}


def bench_table(data: dict) -> str:
    from bamasc.plan.render import text_table

    rows = []
    for run in data["runs"]:
        name = run["system"] + (" (baseline)" if run["baseline"] else "")
        if not run["feasible"]:
            rows.append([name, f"{run['budget']:g}", "infeasible", "-", "-", "-", "-", "-"])
            continue
        mix = ", ".join(f"{template} {count}" for template, count in run["templates"].items())
        rows.append(
            [
                name,
                f"{run['budget']:g}",
                mix,
                f"{run['correct']}/{run['tasks']} ({run['accuracy']:.1%})",
                f"{run['mean_cost']:.1f}",
                f"{run['p95_cost']:.1f}",
                f"{run['bound']:.1f}",
                str(run["overruns"]),
            ]
        )
    header = ["run", "budget µ$", "templates", "accuracy", "mean µ$", "p95 µ$", "bound µ$", "overruns"]
    title = f"{data['system']} on {data['dataset']} ({data['kind']}, {data['tasks']} tasks)"
    return title + "\n\n" + text_table(header, rows)
