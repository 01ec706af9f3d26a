"""The paper's table of a reproduction: accuracy, mean cost, overruns and template mix per row and budget,
beside the published numbers, as JSON, CSV and Markdown."""

from __future__ import annotations

import csv
import json
import os

# docs/paper.md, "The published numbers": the trained policy's row at each dataset's headline budget.
PUBLISHED = {
    "gsm8k": {"dataset": "GSM8K", "budget": 1625.0, "accuracy": 0.953, "mean_cost": 542.9},
    "mbpp": {"dataset": "MBPP", "budget": 1250.0, "accuracy": 0.826, "mean_cost": 529.2},
    "math": {"dataset": "MATH", "budget": 2000.0, "accuracy": 0.812, "mean_cost": 646.0},
}
COLUMNS = ("row", "system", "method", "budget", "feasible", "template", "tasks", "correct", "accuracy", "mean_cost",
           "bound", "overruns", "overrun_share", "template_mix", "paper_accuracy", "paper_mean_cost", "providers",
           "measured", "scorer")


def provenance(providers: str, offline: bool, tasks: int, scorer: str | None, checks: dict | None = None) -> dict:
    """What a table's numbers are: who answered (`fake echo`, `cassette`, `models`), on how many tasks, scored
    how, and whether they are measurements of the models at all (a fake's answers and costs are not)."""
    measured = providers == "models" or (providers == "cassette" and not offline)
    if providers.startswith("fake"):
        words = (f"offline: the fake provider ({providers.split(' ', 1)[1]}) answered every call; accuracies and "
                 "costs show that the kit runs, not what any model scores")
    elif providers == "cassette":
        words = "recorded calls played back: the numbers are the recording's, measured when it was made"
    elif offline:
        words = "offline: local models only; measured, but not on the paper's API models"
    else:
        words = "measured: the declared models answered every call"
    # Systems whose budget is not held by the guard (`budget_check`): their rows say so.
    unguarded = {name: check for name, check in (checks or {}).items() if check != "before"}
    return {"providers": providers, "measured": measured, "tasks": tasks, "scorer": scorer, "words": words,
            "unguarded": unguarded}


def table_data(setup, results, source: dict | None = None) -> dict:
    """The table as plain data: one row per (cell, result), in the order given, each counted from
    its result's items (a feasible result without them is a KeyError: it is no bench run's).
    `source` (`provenance`) says what the numbers are; every rendering of the table states it.

    The published numbers stand beside the rows they are of: those that select
    with a trained policy, at the dataset's headline budget.
    """
    from bamasc.evaluate.cells import TALLIED, tally

    published = PUBLISHED.get(setup.kind)
    rows = []
    for cell, result in results:
        # Counted from the items, whatever the result says of them; an infeasible run counts nothing.
        result = {key: value for key, value in result.items() if key not in TALLIED}
        if result["feasible"]:
            result.update(tally(result["items"]))
        row = {
            "row": cell.label,
            "system": cell.system,
            "method": cell.method,
            "binder": cell.binder,
            "budget": cell.budget,
            "feasible": result["feasible"],
            "template": result.get("template"),
            "tasks": result.get("tasks", 0),
            "correct": result.get("correct", 0),
            "accuracy": result.get("accuracy"),
            "mean_cost": result.get("mean_cost"),
            "bound": result.get("bound"),
            "overruns": result.get("overruns", 0),
            "overrun_share": (result.get("overruns", 0) / result["tasks"]) if result.get("tasks") else 0.0,
            "template_mix": _shares(result.get("templates", {}), result.get("tasks", 0)),
            "error": result.get("error"),
            "paper": None,
        }
        if published and result.get("by_policy") and abs(cell.budget - published["budget"]) < 1e-9:
            row["paper"] = {"accuracy": published["accuracy"], "mean_cost": published["mean_cost"]}
        rows.append(row)
    return {
        "file": os.path.basename(setup.path),
        "kind": setup.kind,
        "budgets": list(setup.budgets),
        "published": published,
        "source": source,
        "rows": rows,
    }


def _shares(templates: dict, tasks: int) -> dict[str, float]:
    return {name: round(count / tasks, 6) for name, count in templates.items()} if tasks else {}


def mix_text(mix: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in mix.items()) or "-"


def markdown(data: dict) -> str:
    published = data["published"]
    name = published["dataset"] if published else data["kind"]
    lines = [f"# {name}: {data['file']}", ""]
    source = data.get("source")
    if source:
        scored = f", scored with `{source['scorer']}`" if source.get("scorer") else ""
        lines += [f"**{'Measured' if source['measured'] else 'Not a measurement'}.** {source['tasks']} tasks per row"
                  f"{scored}; {source['words']}.", ""]
    lines += [
        "| row | budget µ$ | accuracy | mean cost µ$ | overruns | template mix | paper accuracy (published, not run here) | paper mean cost µ$ (published) |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    unguarded = (source or {}).get("unguarded") or {}
    for row in data["rows"]:
        paper = row["paper"]
        name = row["row"] + {"after": " [checked after each call]", "none": " [not guarded: real cost]"}.get(
            unguarded.get(row["system"]), "")
        published_cells = (f"{paper['accuracy']:.1%}", f"{paper['mean_cost']:.1f}") if paper else ("", "")
        if not row["feasible"]:
            cells = [name, f"{row['budget']:g}", "infeasible", "-", "-", "-", *published_cells]
        else:
            cells = [
                name, f"{row['budget']:g}", f"{row['accuracy']:.1%} ({row['correct']}/{row['tasks']})",
                f"{row['mean_cost']:.1f}", f"{row['overruns']} ({row['overrun_share']:.1%})",
                mix_text(row["template_mix"]), *published_cells,
            ]
        lines.append("| " + " | ".join(cells) + " |")
    if published:
        lines += ["", f"Published ({published['dataset']}, {published['budget']:g} µ$): {published['accuracy']:.1%} "
                      f"at {published['mean_cost']:.1f} µ$ mean cost, beside the rows that select with the trained policy."]
    return "\n".join(lines) + "\n"


def write_table(data: dict, out_dir: str) -> list[str]:
    """table.json, table.csv and table.md in `out_dir`, each through a temporary file; returns their paths."""
    paths = []
    for name, write in (("table.json", _json), ("table.csv", _csv), ("table.md", _markdown)):
        path = os.path.join(out_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8", newline="") as handle:
            write(data, handle)
        os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


def _json(data: dict, handle) -> None:
    json.dump(data, handle, indent=2, ensure_ascii=False)
    handle.write("\n")


def _markdown(data: dict, handle) -> None:
    handle.write(markdown(data))


def _csv(data: dict, handle) -> None:
    writer = csv.writer(handle)
    writer.writerow(COLUMNS)
    for row in data["rows"]:
        paper = row["paper"] or {}
        source = data.get("source") or {}
        values = dict(row, template_mix=";".join(f"{k}={v:g}" for k, v in row["template_mix"].items()),
                      paper_accuracy=paper.get("accuracy", ""), paper_mean_cost=paper.get("mean_cost", ""),
                      providers=source.get("providers"), measured=source.get("measured"), scorer=source.get("scorer"))
        writer.writerow(["" if values.get(column) is None else values[column] for column in COLUMNS])
