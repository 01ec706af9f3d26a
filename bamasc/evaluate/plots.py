"""The benchmark's and the reproduction's cost-versus-accuracy plots: every series its own colour and marker."""

from __future__ import annotations

# Filled markers that stay apart at 6 points; the star is the published point's.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "8", "d", "H")
PUBLISHED_COLOUR = "black"


def series_styles(count: int) -> list[tuple[tuple[float, ...], str]]:
    """(colour as RGBA, marker) for each of `count` series: no two share a colour, and no two share a
    marker while there are markers left (past that, a marker repeats with another colour). The colours
    are the ten of matplotlib's "tab10", then the twenty of "tab20", then evenly spaced hues."""
    from matplotlib import colormaps

    if count <= 10:
        colours = [colormaps["tab10"](i) for i in range(count)]
    elif count <= 20:
        colours = [colormaps["tab20"](i) for i in range(count)]
    else:
        colours = [colormaps["hsv"](i / count) for i in range(count)]
    return [(colour, MARKERS[i % len(MARKERS)]) for i, colour in enumerate(colours)]


def plot_bench(data: dict, path: str) -> None:
    """Mean cost per task (µ$) against accuracy (%), written as a PNG to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5), dpi=100)
    system = [run for run in data["runs"] if not run["baseline"] and run["feasible"]]
    baselines = [run for run in data["runs"] if run["baseline"] and run["feasible"]]
    styles = series_styles(1 + len(baselines))  # the system's line first, then each baseline's point
    if system:
        costs = [run["mean_cost"] for run in system]
        accuracy = [100 * run["accuracy"] for run in system]
        colour, marker = styles[0]
        axis.plot(costs, accuracy, marker=marker, color=colour, label=f"{data['system']} (one point per budget)")
        for run, x, y in zip(system, costs, accuracy):
            axis.annotate(f"{run['budget']:g} µ$", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    for run, (colour, marker) in zip(baselines, styles[1:]):
        axis.plot([run["mean_cost"]], [100 * run["accuracy"]], linestyle="none", marker=marker, color=colour,
                  markersize=8, label=f"{run['system']} ({run['template']}, {', '.join(run['models'])})")
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

    # Text stays text in the SVG, so its legend can be read back.
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "bamasc"}):
        figure, labels = reproduction_figure(data)
        for path in paths:
            figure.savefig(path, metadata={"Date": None} if path.endswith(".svg") else None)
        plt.close(figure)
    return labels


def reproduction_figure(data: dict):
    """(the figure `plot_reproduction` saves, the series' labels in legend order); the caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[dict]] = {}
    for row in data["rows"]:
        if row["feasible"]:
            series.setdefault(row["row"], []).append(row)
    labels = []
    figure, axis = plt.subplots(figsize=(8, 5), dpi=100)
    for (label, rows), (colour, marker) in zip(series.items(), series_styles(len(series))):
        rows = sorted(rows, key=lambda row: row["budget"])
        axis.plot([row["mean_cost"] for row in rows], [100 * row["accuracy"] for row in rows],
                  marker=marker, color=colour, label=label)
        labels.append(label)
    published = data.get("published")
    if published:
        label = f"published ({published['dataset']}, {published['budget']:g} µ$)"
        axis.plot([published["mean_cost"]], [100 * published["accuracy"]], linestyle="none", marker="*",
                  markersize=14, color=PUBLISHED_COLOUR, label=label, zorder=3)
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
    return figure, labels
