"""`bamasc graph`: a plan's call graph as Mermaid, Graphviz dot or a PNG."""

from __future__ import annotations

from bamasc.cli import inputs, output
from bamasc.cli.report import Report


def add_parser(commands) -> None:
    graph = commands.add_parser("graph", help="draw a plan's call graph")
    graph.add_argument("plan", metavar="PLAN")
    graph.add_argument("--format", choices=("mermaid", "dot", "png"), default="mermaid")
    graph.add_argument("--system")
    graph.add_argument("--template", help="default: the selected template")
    graph.add_argument("-o", "--output", help="file to write (required for png)")
    graph.set_defaults(run=run)


def run(args) -> int:
    from bamasc.plan import render

    report = Report()
    if args.output and not inputs.writable(report, args.output, "the graph"):
        return report.return_code
    loaded = inputs.loaded_plan(report, args.plan)
    if loaded is None:
        return report.return_code
    plan, _ = loaded
    try:
        template = render.pick_template(plan.system(args.system), args.template)
    except KeyError as problem:
        output.usage(report, f"unknown system or template: {problem}")
        return report.return_code
    if args.format == "png":
        if not args.output:
            output.usage(report, "--format png needs -o FILE.png")
            return report.return_code
        from bamasc.plan.draw import DrawError, draw_png

        try:
            draw_png(template, args.output)
        except DrawError as problem:
            output.failure(report, problem)
            return report.return_code
        except OSError as problem:  # the disk filled up, or the folder went away, since the check
            output.usage(report, f"cannot write the graph to {args.output}: {problem.strerror or problem}")
            return report.return_code
        print(f"graph written to {args.output}")
        return report.return_code
    text = render.mermaid(template) if args.format == "mermaid" else render.dot(template)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as problem:  # the disk filled up, or the folder went away, since the check
            output.usage(report, f"cannot write the graph to {args.output}: {problem.strerror or problem}")
    else:
        print(text, end="")
    return report.return_code
