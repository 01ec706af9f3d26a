"""`bamasc exec`: run one task or a dataset on a plan, never spending past the budget."""

from __future__ import annotations

import os
import sys

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report

# Task outcomes that make `exec` exit 1: no answer, or a broken promise.
FAILED_STATUSES = frozenset({"error", "failed", "overbilled"})


def add_parser(commands) -> None:
    execute = commands.add_parser("exec", help="run tasks on a plan, never spending past the budget")
    execute.add_argument("file", metavar="FILE|PLAN")
    source = execute.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help="one task text")
    source.add_argument("--dataset", metavar="JSONL", help="tasks, one JSON object per line (id, task/question/...)")
    execute.add_argument("--system")
    execute.add_argument("--budget", type=cli_args.budget, help="with a .bam file: compile at this budget")
    execute.add_argument("--template", help="run this template instead of the selected one")
    execute.add_argument("--trace", metavar="JSONL", help="append one line per call and per task here")
    execute.add_argument("--otlp", metavar="URL",
                         help="send the run's calls as OpenTelemetry spans to this OTLP/HTTP collector when it ends "
                              "(its base URL, e.g. http://127.0.0.1:4318, or its /v1/traces endpoint)")
    cli_args.add_run_options(execute, "--concurrency")
    execute.add_argument("--resume", action="store_true",
                         help="with --trace: skip tasks finished in the trace, continue the others with what they spent")
    execute.add_argument("--dry-run", action="store_true", help="answer every call with the full output cap (fake verbose)")
    cli_args.add_run_options(execute, "--fake", "--cassette", "--record")
    execute.add_argument("--guard", choices=("reserve", "posthoc"), default="reserve",
                         help="posthoc is the paper's after-the-fact check, kept as a benchmark baseline only")
    cli_args.add_run_options(execute, "--skip-bad-rows", "--timeout", "--retries", "--total-budget", "--allocate")
    cli_args.add_run_options(execute, "--engine", "--ray-address", "--actors")
    execute.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    loaded = inputs.plan_and_program(report, args)
    if loaded is None:
        return report.return_code
    plan, program = loaded
    tasks = _tasks(report, args)
    if tasks is None:
        return report.return_code
    from bamasc.cli import batch_budget

    if not batch_budget.check(report, args):
        return report.return_code
    if args.ray_address and args.engine != "ray":
        output.usage(report, "--ray-address needs --engine ray")
        return report.return_code
    if args.resume and not args.trace:
        output.usage(report, "--resume needs --trace FILE: the trace holds what each task already spent")
        return report.return_code
    # Before any task runs: a trace that cannot be written would lose every charge.
    if args.trace and not inputs.writable(report, args.trace, "the trace"):
        return report.return_code
    # Before any task runs: a run that stops for a missing module has spent on answers it cannot use.
    if not inputs.extras(report, _extras(args, plan, program), "exec"):
        return report.return_code
    live = None
    if args.otlp:
        from bamasc.cli.trace import LiveExport

        live = LiveExport.start(report, args.otlp, args.trace)
        if live is None:
            return report.return_code
    import asyncio

    from bamasc.records import replace
    from bamasc.runtime.execute import ExecOptions
    from bamasc.runtime.providers.base import ProviderError
    from bamasc.runtime.report import dataset_report, task_report
    from bamasc.runtime.tools import ToolStartError
    from bamasc.runtime.workers import run_batch

    options = ExecOptions(
        concurrency=args.concurrency,
        trace_path=live.trace_path if live else args.trace,
        resume=args.resume,
        guard=args.guard,
        fake_mode="verbose" if args.dry_run else args.fake,
        cassette=args.cassette,
        record=args.record,
        retry=cli_args.retry_policy(args),
        template=args.template,
    )
    # The one task's calls are kept for its ledger table; a dataset's are only summed.
    calls: list[dict] | None = [] if args.task is not None else None
    first: list = []
    progress = output.RunProgress() if args.dataset else None
    try:
        system = plan.system(args.system)
        if system.selection["rule"] == "policy" and not args.template:
            from bamasc.policy.errors import PolicyError
            from bamasc.policy.select import selector_for

            try:
                options = replace(options, selector=selector_for(system, program))
            except PolicyError as problem:
                output.failure(report, problem)
                return _ended(report, live)
        if args.total_budget is not None:
            options = batch_budget.options(report, args, program, system, options, len(tasks))
            if options is None:
                return _ended(report, live)

        def keep_first(result) -> None:
            if not first:
                first.append(result)

        try:
            if args.engine == "ray" and getattr(tasks, "threads", False):
                output.usage(report, f"{args.dataset}: rows with a `thread` run on the local engine (--engine local), "
                             "which runs a thread's turns in order")
                return _ended(report, live)
            if args.engine == "ray":
                from bamasc.runtime.ray_engine import run_on_ray

                outcome = run_on_ray(plan, program, system.name, tasks, options, actors=args.actors,
                                     address=args.ray_address, progress=progress, calls=calls, on_result=keep_first)
            else:
                outcome = asyncio.run(run_batch(plan, program, system.name, tasks, options, progress, calls,
                                                keep_first))
        finally:
            if progress is not None:  # the bar's line ends before any message about how the run ended
                progress.close()
    except KeyError as problem:
        output.usage(report, f"unknown system or template: {problem}")
        return _ended(report, live)
    except (ProviderError, ValueError, ToolStartError) as problem:  # a tool that cannot start: nothing was spent
        output.failure(report, problem)
        return _ended(report, live)
    except KeyboardInterrupt:
        print("\ninterrupted: every finished task is in the trace; --resume continues", file=sys.stderr)
        report.failed()
        return _ended(report, live)
    totals = outcome.totals
    if args.task is not None and first and first[0].template is not None:
        print(task_report(first[0], system.in_class(first[0].template, first[0].length_class), calls))
    else:
        print(dataset_report(totals, outcome.summary, len(outcome.done)))
        if args.task is not None and first and first[0].status == "too_long":
            print(f"task: {first[0].error}")
    if outcome.ledger is not None:
        print(batch_budget.summary(outcome))
    if args.dry_run:
        template = system.template(options.template or system.selection["selected"])
        bound = totals.worst_bound if totals.worst_bound is not None else template.worst_case_cost
        print(f"dry run (every call answered with its full output cap): worst spent {totals.worst_cost:.1f} µ$, "
              f"bound {bound:.1f} µ$")
    if outcome.stopped:
        print(f"stopped early: {outcome.stopped}", file=sys.stderr)
    if totals.overran or totals.interrupted or outcome.stopped or any(totals.statuses[s] for s in FAILED_STATUSES):
        report.failed()
    report.left_undone(totals.skipped)
    if live is not None:
        live.finish(report, program, plan)
    return report.return_code


def _ended(report: Report, live) -> int:
    """The exit code of a run that stopped early; its temporary trace for --otlp is removed."""
    if live is not None:
        live.close()
    return report.return_code


def _tasks(report: Report, args):
    """The one --task, or the --dataset's tasks; None once a problem is reported."""
    from bamasc.runtime.execute import DatasetError, DatasetStream, Task

    if args.task is not None:
        return [Task("task", args.task)]
    if not inputs.is_file(report, args.dataset):
        return None
    if args.trace and os.path.exists(args.trace) and os.path.samefile(args.trace, args.dataset):
        output.usage(report, f"--trace {args.trace} is the dataset itself: traces are appended to")
        return None
    return inputs.rows(report, DatasetStream.open, args.dataset, args.skip_bad_rows, DatasetError)


def _extras(args, plan, program) -> list:
    """The extras the run will import: ray for --engine ray, the OpenTelemetry SDK for --otlp, the policy
    one for a system that selects by policy, and the providers' of the models that answer for real."""
    from bamasc.extras import EXTRAS

    needs = [(EXTRAS["ray"], "--engine ray")] if args.engine == "ray" else []
    needs += [(EXTRAS["otel"], "--otlp")] if args.otlp else []
    try:
        system = plan.system(args.system)
    except KeyError:
        return needs  # an unknown system: the run says so
    if system.selection["rule"] == "policy" and not args.template:
        needs.append((EXTRAS["policy"], f"system '{system.name}', which selects by policy"))
    from bamasc.runtime.tool_loop import declarations

    tools = declarations(program, [system])  # the MCP SDK, and jsonschema, which checks every tool's arguments
    if tools:
        servers = [tool.name for tool in tools if tool.kind == "mcp"]
        needs.append((EXTRAS["mcp"], f"tool {servers[0]} (an MCP server)" if servers else f"tool {tools[0].name}"))
    else:  # jsonschema checks every answer of a role with a structured output
        held = sorted({node.role for template in system.templates for node in template.nodes
                       if getattr(program.roles.get(node.role), "output_schema", None) is not None})
        needs += [(EXTRAS["mcp"], f"role {held[0]}'s structured output")] if held else []
    models = {seat.model for template in system.templates for bound in system.bindings(template.name)
              if bound.feasible for seat in bound.binding}
    offline = bool(args.dry_run or args.fake or (args.cassette and not args.record))
    return needs + inputs.run_extras(program, models, offline)
