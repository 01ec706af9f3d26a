"""Binder wall time: the binder as shipped, its MILP on HiGHS and on CBC, beside the per-vector binder it replaced.

    python benchmarks/bench_binder.py [--baseline DIR] [--limit 60] [--runs 5] [--quick]
                                      [--shape N ...] [--no-cliff] [--between K] [--budget µ$ ...] [--no-cbc] [--no-cbc-only]

Every cell is measured in a fresh process that imports one source tree (this
one, or the `--baseline` tree, e.g. `git worktree add DIR 5a565ea`, the binder
that solved one seat ILP per count vector): one untimed run first, then the
median of up to `--runs` warm runs in that process (fewer for slow cells). The
reference is the warm `compile_file("examples/gsm8k.bam")` of this tree in the
same run; "x gsm8k" is a cell's time over it.

Cases: generated pipelines of `v_i = parallel s_i(task, v_{i-1})` (or `chain`)
statements, each bound at three budgets: loose (every seat at its largest
count fits on tier 1), tight (1.3 x the cheapest binding) and medium (their
geometric mean), with `--between K` at K more budgets spaced geometrically
between tight and loose, and with `--budget` at those given; and the budget
cliff, ten tier-1 models and a tier-2 model with a 1-token output cap, at
every budget from 6,000 to 20,000 µ$.

"HiGHS" is the binder as shipped: above the strategy's `sweep_from_columns` columns it
first offers a pipeline to the dynamic program over slots (optimize/pareto.py)
and solves no MILP where that answers. "MILP" is the same binder with the
dynamic program switched off, so every binding comes from the template MILP on
HiGHS; "CBC" is that binder with `exact.optimise_columns` replaced by
`pulp_model.optimise_columns_with_cbc`: the same MILPs, solved by CBC through
PuLP. "same" says whether two cells found the same objective (tier seats,
quality, worst-case cost): "MILP same" the shipped binder against the MILP,
"CBC same" CBC against HiGHS on the same MILP. A run past `--limit` seconds is stopped (the solver's own
time limit, and a watchdog that ends the process) and shown as "> limit". The
baseline refuses templates with more than 4,096 count vectors (BAM503).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Relative to each tree: the baseline's copy spells the same prices out (it predates `catalog(...)`).
GSM8K = os.path.join("examples", "gsm8k.bam")
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

# (slots, lo, hi, models, qualities): 1,024, 4,096, 4,096, 46,656, 3**20 (3.5e9) and 6**20 (3.7e15)
# count vectors; the last two give each model a quality of its own, so fewer models dominate others.
SHAPES = (
    (5, 0, 3, 2, False), (6, 0, 3, 2, False), (2, 0, 63, 2, False), (6, 0, 5, 2, False), (20, 1, 3, 50, False),
    (20, 0, 5, 50, False), (20, 1, 3, 50, True),
)  # fmt: skip
TIGHT = 1.3  # tight budget: this times the cheapest binding
CLIFF_BUDGETS = range(6000, 20001, 1000)


def pipeline_source(slots: int, lo: int, hi: int, models: int, shape: str, seed: int = 0, qualities: bool = False) -> str:
    """`slots` slots of [lo..hi] in a pipeline of `shape` statements, each reading the last one's value.

    Models take tiers 1, 2, 3 in turn, with seeded random prices (cheaper by
    tier) and output caps, and with `qualities` a seeded quality each from 0.5
    to 2; the budget is given at bind time."""
    rng = random.Random(seed)
    graded = random.Random(seed + 1)
    out = []
    for m in range(models):
        tier = 1 + m % 3
        price_in = round(rng.uniform(0.05, 3.0) / tier, 3)
        price_out = round(price_in * rng.uniform(2, 5), 3)
        cap = rng.choice([256, 384, 512, 1024])
        quality = f"  quality = {round(graded.uniform(0.5, 2.0), 2)}\n" if qualities else ""
        out.append(
            f'model m{m} {{\n  provider = fake\n  name = "m{m}"\n'
            f"  price {{ input = {price_in}  output = {price_out} }}\n  tier = {tier}\n  max_output = {cap}\n{quality}}}"
        )
    for s in range(slots):
        previous = f" {{{{v{s - 1}}}}}" if s else ""
        out.append(f'role R{s} {{\n  reads = answer\n  prompt = "Do it: {{{{task}}}}{previous}"\n}}')
    flow = []
    for s in range(slots):
        call = f"{shape} s{s}({'task' if s == 0 else f'task, v{s - 1}'})"
        flow.append(f"    v{s} = {call}" if s < slots - 1 else f"    answer {call}")
    declared = "\n".join(f"  slot s{s} : R{s} [{lo}..{hi}]" for s in range(slots))
    out.append(f"topology big {{\n{declared}\n  flow {{\n" + "\n".join(flow) + "\n  }\n}")
    names = ", ".join(f"m{m}" for m in range(models))
    out.append(f"system big {{\n  models = [{names}]\n  topologies = [big]\n  budget = 1000\n  task_tokens = 200\n}}")
    return "\n\n".join(out) + "\n"


def cliff_source() -> str:
    """Ten tier-1 models and one tier-2 model with `max_output = 1`; `linear [1..5]` (the budget cliff)."""
    strong = [
        f'model s{i} {{\n  provider = fake\n  name = "s{i}"\n'
        f"  price {{ input = {8 + 0.5 * i:.1f}  output = {2.0 + 0.3 * i:.1f} }}\n  tier = 1\n}}"
        for i in range(10)
    ]
    names = ", ".join(f"s{i}" for i in range(10))
    return "\n".join(strong) + f"""
model weak {{
  provider = fake
  name = "weak"
  price {{ input = 0.1  output = 0.4 }}
  tier = 2
  max_output = 1
}}
role Executor {{
  max_output = 400
  reads = answer
  prompt = "Solve: {{{{task}}}} {{{{previous?}}}}"
}}
topology linear {{
  slot executor : Executor [1..5]
  flow {{ answer chain executor(task) }}
}}
system s {{
  models = [{names}, weak]
  topologies = [linear]
  budget = 6000
  task_tokens = 200
}}
"""


# --- the measuring process: imports the tree it runs in, measures one cell, prints JSON ---


def child() -> None:
    spec = json.load(sys.stdin)
    sys.path.insert(0, os.getcwd())  # the tree under measurement, ahead of any installed bamasc
    import bamasc

    print(json.dumps({"imported": bamasc.__file__}), flush=True)
    limit = spec["limit"]
    run = _runner(spec, lambda: deadline)
    if isinstance(run, str):
        print(json.dumps({"status": run}), flush=True)
        return
    times, result = [], None
    while len(times) <= _repeats(times, spec["runs"]):
        deadline = time.monotonic() + limit
        # The watchdog ends the process from a thread of its own, even inside a solver call.
        faulthandler.dump_traceback_later(limit + 2.0, exit=True, file=open(os.devnull, "w"))
        start = time.perf_counter()
        try:
            result = run()
        except TimeoutError:
            print(json.dumps({"status": "timeout"}), flush=True)
            return
        except Exception as error:  # noqa: BLE001 -- a refusal is a result here
            status = "refused" if "4096" in str(error) or "BAM503" in str(error) else f"error: {error}"
            print(json.dumps({"status": status}), flush=True)
            return
        elapsed = time.perf_counter() - start
        faulthandler.cancel_dump_traceback_later()
        if elapsed > limit:
            print(json.dumps({"status": "timeout"}), flush=True)
            return
        times.append(elapsed)
    print(json.dumps({"status": "ok", "seconds": statistics.median(times[1:]), "runs": len(times) - 1, **result}))


def _repeats(times: list[float], most: int) -> int:
    """How many timed runs to take, judged by the untimed first one: fewer for slow cells."""
    if not times:
        return 1
    return most if times[0] < 1.0 else min(most, 3) if times[0] < 10.0 else 1


def _runner(spec, deadline):
    """A function binding the cell once and returning what it found, or why there is none ("refused")."""
    from bamasc.plan.compile import check_file, compile_file

    _patch_solver(spec["solver"], deadline)
    if spec["kind"] == "gsm8k":

        def compile_once():
            bindings = compile_file(spec["path"]).bindings["gsm8k"]
            return {
                "solves": sum(b.solves for b in bindings),
                "feasible": f"{sum(b.feasible for b in bindings)} of {len(bindings)} templates",
                "tier_seats": None,
                "objectives": [_objective(b) for b in bindings],
            }

        return compile_once
    program, diagnostics, _ = check_file(spec["path"], budgets=False)
    if program is None:
        codes = {getattr(d, "code", "") for d in diagnostics}
        return "refused" if "BAM503" in codes else f"error: {[d.message for d in diagnostics][:1]}"
    from bamasc.optimize.bind import bind_template

    system = program.systems[spec["system"]]

    def bind_once():
        found = bind_template(program, system, spec["template"], spec["budget"])
        return {
            "solves": found.solves,
            "feasible": found.feasible,
            "cost": found.worst_case_cost if found.feasible else None,
            "cheapest": found.cheapest_cost,
            "tier_seats": list(found.tier_seats),
            "objectives": [_objective(found)],
        }

    return bind_once


def _objective(found) -> list:
    cost = found.worst_case_cost if found.feasible else None
    return [found.feasible, list(found.tier_seats), round(found.quality, 6), cost]


def _patch_solver(solver: str, deadline) -> None:
    """Give every MILP solve the time left before the deadline; switch the dynamic program off for
    "milp" and "cbc", and hand the MILPs to CBC for "cbc"."""
    try:
        from bamasc.optimize import exact
    except ImportError:  # the per-vector binder: its solves have no time limit; the watchdog stops it
        return
    if solver != "highs":
        try:
            from bamasc.optimize import strategy
        except ImportError:  # a tree from before the binder strategy, whose thresholds were module constants
            exact.SWEEP_FROM_COLUMNS = math.inf
        else:
            from bamasc.records import replace

            strategy.DEFAULT_STRATEGY = replace(strategy.DEFAULT_STRATEGY, sweep_from_columns=math.inf)
    left = lambda: max(0.01, deadline() - time.monotonic())  # noqa: E731
    if solver == "cbc":
        from bamasc.optimize.pulp_model import optimise_columns_with_cbc

        exact.optimise_columns = lambda ilp, objectives, **_: optimise_columns_with_cbc(ilp, objectives, left())
    else:
        highs = exact.optimise_columns
        exact.optimise_columns = lambda ilp, objectives, **options: highs(ilp, objectives, **options, time_limit=left())


# --- the driver ---


def measure(tree: str, spec: dict) -> dict:
    """One cell, in a fresh process importing `tree` (cwd first on sys.path; checked)."""
    env = {**ENV, "PYTHONPATH": tree}
    backstop = (spec["runs"] + 1) * spec["limit"] + 120
    try:
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child"],
            input=json.dumps(spec), cwd=tree, env=env, capture_output=True, text=True, timeout=backstop,
        )  # fmt: skip
        lines = done.stdout.splitlines()
    except subprocess.TimeoutExpired as stopped:
        out = stopped.stdout or ""
        lines = (out.decode() if isinstance(out, bytes) else out).splitlines()
    if not lines:
        sys.exit(f"the measuring process in {tree} printed nothing: {done.stderr[-2000:]}")
    imported = json.loads(lines[0])["imported"]
    if not imported.startswith(os.path.join(tree, "")):
        sys.exit(f"the measuring process imported bamasc from {imported}, not from {tree}")
    return json.loads(lines[-1]) if len(lines) > 1 else {"status": "timeout"}


def show(cell: dict, limit: float) -> str:
    if cell["status"] == "timeout":
        return f"> {limit:.0f} s"
    if cell["status"] != "ok":
        return cell["status"]
    seconds = cell["seconds"]
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ratio(cell: dict, reference: dict) -> str:
    if cell["status"] != "ok" or reference["status"] != "ok":
        return "n/a"
    return f"{cell['seconds'] / reference['seconds']:.1f}x"


def same(a: dict, b: dict) -> str:
    """"yes"; "NO" when feasibility, tier seats or quality differ; else how much dearer b's binding is."""
    if a["status"] != "ok" or b["status"] != "ok":
        return "n/a"
    dearer = 0.0
    for x, y in zip(a["objectives"], b["objectives"], strict=True):
        if x[:3] != y[:3]:
            return "NO"
        if x[3] is not None and not math.isclose(x[3], y[3], rel_tol=1e-9, abs_tol=1e-6):
            dearer = max(dearer, y[3] - x[3], key=abs)
    return "yes" if not dearer else f"tiers yes, cost {dearer:+.3f} µ$"


def budgets(path: str) -> tuple[float, float, float]:
    """Loose, medium and tight budgets for the generated template `big` (this tree's binder)."""
    from bamasc.optimize.bind import bind_template
    from bamasc.plan.compile import check_file

    program, _, _ = check_file(path, budgets=False)
    system = program.systems["big"]
    loose = math.ceil(bind_template(program, system, "big", math.inf).worst_case_cost * 1.05)
    tight = math.ceil(bind_template(program, system, "big", 0.0).cheapest_cost * TIGHT)
    return float(loose), float(round(math.sqrt(loose * tight))), float(tight)


def row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def cells(label, cell, milp, cbc, old, reference, limit, extra=()) -> list:
    found = cell if cell["status"] == "ok" else None
    return [
        *label,
        _yes_no(found["feasible"]) if found else "n/a",
        f"{found['cost']:,.0f}" if found and found.get("cost") is not None else "-",
        "/".join(map(str, found["tier_seats"])) if found and found["tier_seats"] else "-",
        found["solves"] if found else "n/a",
        show(cell, limit),
        ratio(cell, reference),
        *extra,
        show(milp, limit) if milp else "not run",
        same(cell, milp) if milp else "n/a",
        show(cbc, limit) if cbc else "not run",
        same(milp, cbc) if cbc else "n/a",
        show(old, limit) if old else "not run",
        ratio(old, cell) if old else "n/a",
        same(cell, old) if old else "n/a",
    ]


def _yes_no(feasible) -> str:
    return feasible if isinstance(feasible, str) else "yes" if feasible else "no"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="DIR", help="the per-vector binder's tree (e.g. commit 5a565ea)")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds before a run is stopped")
    parser.add_argument("--runs", type=int, default=5, help="most timed runs per cell")
    parser.add_argument("--quick", action="store_true", help="the first two shapes and three cliff budgets only")
    parser.add_argument("--shape", type=int, action="append", metavar="N",
                        help="only these generated shapes (0-based, in the order of SHAPES); repeatable")
    parser.add_argument("--no-cliff", action="store_true", help="leave out the budget cliff table")
    parser.add_argument("--no-cbc", action="store_true", help="leave out the MILP and CBC columns (the binder alone)")
    parser.add_argument("--no-cbc-only", action="store_true", help="leave out the CBC column, keep the MILP one")
    parser.add_argument("--between", type=int, default=0, metavar="K",
                        help="also bind each generated template at K budgets between its tight and loose ones")  # fmt: skip
    parser.add_argument("--budget", type=float, action="append", default=[], metavar="µ$",
                        help="also bind each generated template at this budget; repeatable")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    sys.path.insert(0, ROOT)
    limit, baseline = args.limit, args.baseline and os.path.abspath(args.baseline)
    base = {"limit": limit, "runs": args.runs}

    def trio(spec):
        new = measure(ROOT, {**spec, "solver": "highs"})
        milp = None if args.no_cbc else measure(ROOT, {**spec, "solver": "milp"})
        cbc = None if args.no_cbc or args.no_cbc_only else measure(ROOT, {**spec, "solver": "cbc"})
        old = measure(baseline, {**spec, "solver": "highs"}) if baseline else None
        return new, milp, cbc, old

    import highspy
    import pulp

    version = f"{highspy.HIGHS_VERSION_MAJOR}.{highspy.HIGHS_VERSION_MINOR}.{highspy.HIGHS_VERSION_PATCH}"
    print(f"highspy {version}, PuLP {pulp.__version__}, {os.cpu_count()} CPUs; limit {limit:.0f} s a run; "
          f"median of up to {args.runs} warm runs; baseline: {args.baseline or 'none'}\n")  # fmt: skip
    # The reference gets 11 warm runs at least: a compile is 20 to 50 ms, and its first few vary most.
    reference, milp, cbc, old = trio({**base, "runs": max(args.runs, 11), "kind": "gsm8k", "path": GSM8K})
    header = ("case", "feasible", "worst case µ$", "tier seats", "solves", "HiGHS", "x gsm8k")
    tail = ("MILP", "MILP same", "CBC", "CBC same", "old binder", "old / new", "old same")
    print(row(header + tail))
    print(row(["---"] * len(header + tail)))
    print(row(cells(["gsm8k.bam compile"], reference, milp, cbc, old, reference, limit)), flush=True)

    shapes = SHAPES[:2] if args.quick else SHAPES
    if args.shape:
        shapes = tuple(SHAPES[n] for n in args.shape)
    with tempfile.TemporaryDirectory() as scratch:
        print()
        header = ("template", "vectors", "budget", "feasible", "worst case µ$", "tier seats", "solves", "HiGHS")
        print(row(header + ("x gsm8k", *tail)))
        print(row(["---"] * (len(header) + 1 + len(tail))))
        for shape in ("parallel", "chain"):
            for slots, lo, hi, models, qualities in shapes:
                path = os.path.join(scratch, f"{shape}-{slots}-{lo}-{hi}-{models}-{qualities}.bam")
                with open(path, "w", encoding="utf-8") as file:
                    file.write(pipeline_source(slots, lo, hi, models, shape, qualities=qualities))
                vectors = (hi - lo + 1) ** slots
                name = f"{shape}, {slots} slots [{lo}..{hi}], {models} models{' with qualities' if qualities else ''}"
                loose, medium, tight = budgets(path)
                named = [("loose", loose), ("medium", medium), ("tight", tight)]
                # --between K: K more budgets, geometrically spaced strictly between tight and loose.
                named += [("between", float(round(tight * (loose / tight) ** (i / (args.between + 1)))))
                          for i in range(1, args.between + 1)]  # fmt: skip
                named += [("given", budget) for budget in args.budget]
                for kind, budget in named:
                    spec = {**base, "kind": "bind", "path": path, "system": "big", "template": "big", "budget": budget}
                    new, milp, cbc, old = trio(spec)
                    label = [name, f"{vectors:,}" if vectors < 1e6 else f"{vectors:.1e}", f"{kind} {budget:,.0f}"]
                    print(row(cells(label, new, milp, cbc, old, reference, limit)), flush=True)

        if args.no_cliff:
            return
        path = os.path.join(scratch, "cliff.bam")
        with open(path, "w", encoding="utf-8") as file:
            file.write(cliff_source())
        print()
        header = ("budget µ$", "feasible", "worst case µ$", "tier seats", "solves", "HiGHS", "x gsm8k", "x 6,000")
        print(row(header + tail))
        print(row(["---"] * len(header + tail)))
        first = None
        for budget in CLIFF_BUDGETS[:3] if args.quick else CLIFF_BUDGETS:
            spec = {**base, "kind": "bind", "path": path, "system": "s", "template": "linear", "budget": float(budget)}
            new, milp, cbc, old = trio(spec)
            first = first or new
            print(row(cells([f"{budget:,}"], new, milp, cbc, old, reference, limit, [ratio(new, first)])), flush=True)


if __name__ == "__main__":
    main()
