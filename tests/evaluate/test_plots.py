"""The cost-versus-accuracy plots: every series its own colour and its own marker, each in the legend."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_rgba  # noqa: E402

from bamasc.evaluate import plots  # noqa: E402


def _reproduction(rows: int) -> dict:
    """A table of `rows` rows at two budgets each, and the published point."""
    found = []
    for index in range(rows):
        for budget in (875.0, 1625.0):
            found.append({"row": f"row {index}", "budget": budget, "feasible": True,
                          "mean_cost": budget / 2 + index, "accuracy": 0.5 + index / 100})
    published = {"dataset": "GSM8K", "budget": 1625.0, "mean_cost": 542.9, "accuracy": 0.953}
    return {"rows": found, "published": published, "file": "paper.bam"}


def _styles(axis) -> list[tuple[tuple, str]]:
    return [(to_rgba(line.get_color()), line.get_marker()) for line in axis.get_lines()]


@pytest.mark.parametrize("rows", [2, 11, 16, 24])
def test_every_reproduction_series_has_its_own_colour_and_marker(rows):
    import matplotlib.pyplot as plt

    figure, labels = plots.reproduction_figure(_reproduction(rows))
    try:
        axis = figure.axes[0]
        styles = _styles(axis)
        assert len(styles) == rows + 1  # a line per row, and the published point
        colours = [colour for colour, _ in styles]
        assert len(set(colours)) == len(colours), "two series share a colour"
        markers = [marker for _, marker in styles]
        distinct = min(len(markers), len(plots.MARKERS) + 1)  # past the markers, colours tell them apart
        assert len(set(markers)) == distinct
        # The legend names every series, with its own line's colour and marker.
        legend = axis.get_legend()
        assert [text.get_text() for text in legend.get_texts()] == labels == [f"row {i}" for i in range(rows)] + [
            "published (GSM8K, 1625 µ$)"]
        handles = [(to_rgba(handle.get_color()), handle.get_marker()) for handle in legend.legend_handles]
        assert handles == styles
    finally:
        plt.close(figure)


def test_the_bench_plot_gives_the_system_and_each_baseline_their_own_colour(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    runs = [{"baseline": False, "feasible": True, "mean_cost": c, "accuracy": a, "budget": b, "system": "s"}
            for c, a, b in ((400, 0.5, 500), (800, 0.7, 1000))]
    runs += [{"baseline": True, "feasible": True, "mean_cost": 300 + i, "accuracy": 0.4, "budget": 900,
              "system": f"base{i}", "template": "linear", "models": ["m"]} for i in range(3)]
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)  # keep the figure to look at it
    plots.plot_bench({"runs": runs, "system": "s", "dataset": "d", "tasks": 3}, str(tmp_path / "plot.png"))
    (figure,) = kept
    styles = _styles(figure.axes[0])
    assert len(styles) == 4 and len({colour for colour, _ in styles}) == 4 and len({m for _, m in styles}) == 4
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
