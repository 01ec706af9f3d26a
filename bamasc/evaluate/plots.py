"""The benchmark's cost-versus-accuracy plot: one point per budget of the system, one per baseline."""

from __future__ import annotations

BASELINE_MARKERS = ("s", "^", "D", "v", "P", "X", "*", "<", ">")


def plot_bench(data: dict, path: str) -> None:
    """Mean cost per task (µ$) against accuracy (%), written as a PNG to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5), dpi=100)
    system = [run for run in data["runs"] if not run["baseline"] and run["feasible"]]
    if system:
        costs = [run["mean_cost"] for run in system]
        accuracy = [100 * run["accuracy"] for run in system]
        axis.plot(costs, accuracy, marker="o", color="tab:blue", label=f"{data['system']} (one point per budget)")
        for run, x, y in zip(system, costs, accuracy):
            axis.annotate(f"{run['budget']:g} µ$", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    baselines = [run for run in data["runs"] if run["baseline"] and run["feasible"]]
    for index, run in enumerate(baselines):
        axis.scatter(
            [run["mean_cost"]], [100 * run["accuracy"]], marker=BASELINE_MARKERS[index % len(BASELINE_MARKERS)],
            s=60, label=f"{run['system']} ({run['template']}, {', '.join(run['models'])})",
        )
    axis.set_xlabel("mean cost per task (µ$)")
    axis.set_ylabel("accuracy (%)")
    axis.set_ylim(-5, 105)
    axis.set_xlim(left=0)
    axis.set_title(f"{data['system']} on {data['dataset']}: cost against accuracy ({data['tasks']} tasks)")
    axis.grid(alpha=0.3)
    if system or baselines:
        axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_reproduction(data: dict, paths: list[str]) -> list[str]:
    """The reproduction's cost against accuracy: one line per row of the table (a point per budget) and
    the published point, written to each of `paths` (the format follows the suffix: .png, .svg).
    Returns the series' labels, in legend order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[dict]] = {}
    for row in data["rows"]:
        if row["feasible"]:
            series.setdefault(row["row"], []).append(row)
    labels = []
    # Text stays text in the SVG, so its legend can be read back.
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bamasc"}):
        figure, axis = plt.subplots(figsize=(8, 5), dpi=100)
        for index, (label, rows) in enumerate(series.items()):
            rows = sorted(rows, key=lambda row: row["budget"])
            axis.plot([row["mean_cost"] for row in rows], [100 * row["accuracy"] for row in rows],
                      marker=("o", *BASELINE_MARKERS)[index % (len(BASELINE_MARKERS) + 1)], label=label)
            labels.append(label)
        published = data.get("published")
        if published:
            label = f"published ({published['dataset']}, {published['budget']:g} µ$)"
            axis.scatter([published["mean_cost"]], [100 * published["accuracy"]], marker="*", s=160, color="black",
                         label=label, zorder=3)
            labels.append(label)
        axis.set_xlabel("mean cost per task (µ$)")
        axis.set_ylabel("accuracy (%)")
        axis.set_ylim(-5, 105)
        axis.set_xlim(left=0)
        source = data.get("source")
        title = f"{data['file']}: cost against accuracy"
        if source:
            kind = "measured" if source["measured"] else f"offline, {source['providers']}: not a measurement"
            title += f"\n({kind}; {source['tasks']} tasks per point)"
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
        if labels:
            axis.legend(fontsize=8, loc="best")
        figure.tight_layout()
        for path in paths:
            figure.savefig(path, metadata={"Date": None} if path.endswith(".svg") else None)
        plt.close(figure)
    return labels
