"""Budget sweeps: the selected binding and every template's bound at each budget, and a plot."""

from __future__ import annotations

from bamasc.optimize.bind import TemplateBinding, select_template
from bamasc.plan.render import text_table


def sweep(rows: list[tuple[float, dict[str, list[TemplateBinding]]]]) -> dict:
    """Per budget and template: feasible, bound, tier seats; the selection; the Pareto front."""
    system = next(iter(rows[0][1])) if rows else None
    points = []
    for budget, by_system in rows:
        found = by_system[system]
        selected = select_template(found, "strongest")
        points.append(
            {
                "budget": budget,
                "selected": selected.template if selected else None,
                "templates": {
                    b.template: {
                        "feasible": b.feasible,
                        "worst_case_cost": b.worst_case_cost if b.feasible else None,
                        "tier_seats": list(b.tier_seats),
                        "quality": b.quality,
                        "seats": [f"{s.slot}[{s.instance}]={s.model}" for s in b.seats],
                    }
                    for b in found
                },
            }
        )
    by_value = any(b.objective_kind == "value" for _, by_system in rows for b in by_system[system])
    return {"system": system, "points": points, "pareto": _pareto(points, by_value)}


def _pareto(points: list[dict], by_value: bool = False) -> list[dict]:
    """Distinct (template, bound, objective) options that no other option beats on both cost and strength
    (seats per tier, then quality; by value, the value alone)."""
    options = {}
    for point in points:
        for name, entry in point["templates"].items():
            if entry["feasible"]:
                key = (name, round(entry["worst_case_cost"], 6), tuple(entry["tier_seats"]), round(entry["quality"], 9))
                options.setdefault(key, point["budget"])
    front = []
    for key, first_budget in options.items():
        name, cost, seats, quality = key
        strength = (quality,) if by_value else (seats, quality)
        dominated = any(
            other_cost <= cost
            and ((other_quality,) if by_value else (other_seats, other_quality)) >= strength
            and (other_cost, other_seats, other_quality) != (cost, seats, quality)
            and not (by_value and (other_cost, other_quality) == (cost, quality))
            for (_, other_cost, other_seats, other_quality) in options
        )
        if not dominated:
            front.append({"template": name, "worst_case_cost": cost, "tier_seats": list(seats), "quality": quality, "from_budget": first_budget})
    return sorted(front, key=lambda entry: entry["worst_case_cost"])


def sweep_table(data: dict) -> str:
    if not data["points"]:
        return "(no budgets)"
    templates = list(data["points"][0]["templates"])
    rows = []
    for point in data["points"]:
        row = [f"{point['budget']:g}", point["selected"] or "-"]
        for name in templates:
            entry = point["templates"][name]
            row.append(f"{entry['worst_case_cost']:.1f} {entry['tier_seats']}" if entry["feasible"] else "-")
        rows.append(row)
    text = f"system {data['system']}: worst-case µ$ and [seats per tier] of each template's best binding\n"
    text += text_table(["budget", "selected", *templates], rows)
    front = [
        [entry["template"], f"{entry['worst_case_cost']:.1f}", str(entry["tier_seats"]), f"{entry['quality']:g}", f"{entry['from_budget']:g}"]
        for entry in data["pareto"]
    ]
    text += "\n\nPareto front (no other binding is both cheaper and stronger):\n"
    text += text_table(["template", "worst case µ$", "seats per tier", "quality", "from budget"], front)
    return text


def plot_sweep(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5), dpi=100)
    budgets = [p["budget"] for p in data["points"]]
    for name in data["points"][0]["templates"] if data["points"] else ():
        costs = [p["templates"][name]["worst_case_cost"] for p in data["points"]]
        axis.plot(budgets, [c if c is not None else float("nan") for c in costs], marker="o", label=name)
    axis.plot(budgets, budgets, linestyle="--", color="grey", label="budget")
    axis.set_xlabel("budget (µ$ per task)")
    axis.set_ylabel("worst-case cost of the best binding (µ$)")
    axis.set_title(f"system {data['system']}: proven bound per template")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
