"""`bamasc compile`: bind models under the budget and emit a plan, or sweep a range of budgets."""

from __future__ import annotations

import os
import sys

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    compile_ = commands.add_parser("compile", help="bind models to every template under the budget and emit a plan")
    compile_.add_argument("file", metavar="FILE")
    compile_.add_argument("--system", help="the system to compile (default: every system in the file)")
    compile_.add_argument("--budget", type=cli_args.budget, help="override the budget: µ$ (1625) or dollars ($0.001625)")
    compile_.add_argument("-o", "--output", metavar="PLAN", help="write the plan JSON here")
    compile_.add_argument("--format", choices=("text", "json"), default="text")
    compile_.add_argument("--method", choices=("lexicographic", "weights", "greedy"), default="lexicographic",
                          help="tier objective: HiGHS lexicographic (exact at any scale), the paper's weights, "
                          "or greedy seat by seat (the paper's ablation)")
    compile_.add_argument("--cost-model", choices=("exact", "paper"), default="exact",
                          help="exact worst-case bound (default) or the BAMAS reference's per-seat estimate and weights")
    compile_.add_argument("--sweep", type=cli_args.budget_range, metavar="LO:HI:STEP", help="bind at every budget in this range")
    compile_.add_argument("--plot", metavar="PNG", help="with --sweep: plot worst-case cost against budget")
    compile_.add_argument("--task", metavar="TEXT",
                          help="with select = policy(...): the policy's template probabilities for this task")
    compile_.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    if args.plot and not args.sweep:
        output.usage(report, "--plot needs --sweep")
        return report.return_code
    if args.task is not None and args.sweep:
        output.usage(report, "--task and --sweep do not go together")
        return report.return_code
    if args.plot and not inputs.writable(report, args.plot, "the plot"):
        return report.return_code
    if args.cost_model == "paper":
        if args.method != "lexicographic":
            output.usage(report, "--cost-model paper binds with the reference's own objective; leave out --method")
            return report.return_code
        args.method = "paper"
    if args.sweep:
        return _sweep(args, report)
    import bamasc
    from bamasc.api.plan import internals

    # The plan's source paths are relative to the folder it is written to (the working one when printed only).
    folder = os.path.dirname(os.path.abspath(args.output)) if args.output else os.getcwd()
    try:
        plan = bamasc.load(args.file).compile(args.system, args.budget, args.method, folder=folder)
    except bamasc.BamError as problem:
        inputs.api_error(report, problem)
        return report.return_code
    report.add(plan.diagnostics)
    if plan.diagnostics_text:
        print(plan.diagnostics_text, file=sys.stderr)
    if args.output:
        try:
            # Self-check: the written plan reads back as the one compiled, and its bounds re-verify.
            plan.save(args.output)
        except bamasc.BamError as problem:
            inputs.api_error(report, problem)
            return report.return_code
    compiled, program = internals(plan)
    if args.format == "json":
        print(plan.to_json(), end="")
    else:
        from bamasc.plan.render import compile_table

        print(compile_table(compiled))
        if args.output:
            print(f"plan written to {args.output} (bounds re-verified)")
    if args.task is not None:
        # With --format json the plan owns standard output; the probabilities go beside it.
        out = sys.stderr if args.format == "json" else sys.stdout
        _print_policy_choice(report, compiled, program, args.task, out)
    return report.return_code


def _print_policy_choice(report: Report, plan, program, task: str, out) -> None:
    """`compile --task`: each policy system's template probabilities for the task, and its pick."""
    from bamasc.policy.errors import PolicyError
    from bamasc.policy.select import PolicySelector, feasibility, policy_path, probability_text

    systems = [system for system in plan.systems if system.selection["rule"] == "policy"]
    if not systems:
        output.usage(report, "--task needs a system that selects by policy (select = policy(\"CHECKPOINT\"))")
        return
    for system in systems:
        try:
            selector = PolicySelector.load(policy_path(system, program), [t.name for t in system.templates])
            feasible = feasibility(system)
            (probs,) = selector.probabilities([task], system.budget, feasible)
            (pick,) = selector.choose([task], system.budget, feasible)
        except PolicyError as problem:
            output.failure(report, problem)
            continue
        print(probability_text(system, probs, pick), file=out)


def _sweep(args, report: Report) -> int:
    from bamasc.plan.sweep import plot_sweep, sweep, sweep_table

    rows = []
    for budget in args.sweep:
        # Each budget has its own Report: an unreachable budget is a row of the sweep, not a failure.
        at_budget = Report()
        result = inputs.compiled(at_budget, args.file, args.system, budget, args.method)
        if result is None or result.program is None:
            return at_budget.return_code
        rows.append((budget, result.bindings))
    data = sweep(rows)
    if args.format == "json":
        import json

        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        print(sweep_table(data))
    if args.plot:
        plot_sweep(data, args.plot)
        # With --format json the data owns standard output.
        print(f"plot written to {args.plot}", file=sys.stderr if args.format == "json" else sys.stdout)
    return report.return_code
