"""`bamasc explain`: why each seat got its model, and every call's cost bound."""

from __future__ import annotations

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    explain = commands.add_parser("explain", help="why each seat got its model, and every call's cost bound")
    explain.add_argument("file", metavar="FILE|PLAN")
    explain.add_argument("--system")
    explain.add_argument("--template", help="default: the selected template")
    explain.add_argument("--budget", type=cli_args.budget)
    explain.set_defaults(run=run)


def run(args) -> int:
    from bamasc.plan.explain import explain_text

    report = Report()
    paths = {}
    if args.file.endswith(".json"):  # a plan file records no binder paths
        loaded = inputs.plan_and_program(report, args)
    else:
        # Compiled now, as `plan_and_program` compiles a .bam file, keeping each binding's path.
        result = inputs.compiled(report, args.file, args.system, args.budget, "lexicographic")
        loaded = None if result is None or result.plan is None else (result.plan, result.program)
        if loaded is not None:
            paths = {name: {b.template: b.path for b in found if b.path is not None}
                     for name, found in result.bindings.items()}
    if loaded is None:
        return report.return_code
    plan, program = loaded
    try:
        system = plan.system(args.system)
        print(explain_text(plan, system, program, args.template, paths.get(system.name)))
    except KeyError as problem:
        output.usage(report, f"unknown system or template: {problem}")
    return report.return_code
