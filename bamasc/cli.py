"""The `bamasc` command line: parses arguments, calls library functions, prints, sets exit codes.

Heavy libraries (solvers, ML, provider SDKs) are imported only inside the
command that needs them, so `bamasc lint` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from bamasc import __version__

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_USAGE = 2

FORMATS = ("text", "json", "sarif", "github")


class Report:
    """Counts what a command found and owns the exit code."""

    def __init__(self) -> None:
        self.errors = 0
        self.warnings = 0
        self.usage_problems = 0

    def add(self, diagnostics) -> None:
        for diagnostic in diagnostics:
            if diagnostic.severity == "error":
                self.errors += 1
            else:
                self.warnings += 1

    def usage(self, message: str) -> None:
        self.usage_problems += 1
        print(f"bamasc: error: {message}", file=sys.stderr)

    @property
    def exit_code(self) -> int:
        if self.usage_problems:
            return EXIT_USAGE
        return EXIT_ERRORS if self.errors else EXIT_OK

    def summary(self, files: int) -> str:
        def plural(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"

        return f"{plural(files, 'file')} checked: {plural(self.errors, 'error')}, {plural(self.warnings, 'warning')}"


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter with the width found without importing shutil.

    argparse builds a formatter for every add_argument call, and the default one
    imports shutil (and with it bz2 and lzma) just to read the terminal width:
    several milliseconds of a start-up that `bamasc lint` keeps small.
    """

    def __init__(self, prog: str) -> None:
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit():
            width = int(columns)
        else:
            try:
                width = os.get_terminal_size(sys.__stdout__.fileno()).columns
            except (OSError, ValueError, AttributeError):
                width = 80
        super().__init__(prog, width=max(40, width - 2))


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's own usage errors keep exit code 2
        self.print_usage(sys.stderr)
        print(f"bamasc: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`only`) just one command's parser: `bamasc lint` then
    builds none of the others, which matters for its start-up."""
    parser = _Parser(prog="bamasc", description="Compiler for budget-aware multi-agent LLM systems.")
    parser.add_argument("--version", action="version", version=f"bamasc {__version__}")
    # An explicit prog spares argparse a help formatter (and its shutil import) at start-up.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, prog="bamasc")
    commands.required = True
    for name, add in COMMANDS.items():
        if only is None or only == name:
            add(commands)
    return parser


def _add_lint(commands) -> None:
    lint = commands.add_parser("lint", help="check .bam files without compiling them (fast; for CI and pre-commit)")
    lint.add_argument("files", nargs="+", metavar="FILE")
    lint.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    lint.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    lint.add_argument("--with-importers", action="store_true",
                      help="also lint every .bam file under the current directory that imports a FILE (pre-commit)")
    lint.add_argument(
        "--max-diagnostics", type=int, default=200, metavar="N", help="text format: show at most N (default 200)"
    )
    lint.set_defaults(run=run_lint)


def _add_compile(commands) -> None:
    compile_ = commands.add_parser("compile", help="bind models to every template under the budget and emit a plan")
    compile_.add_argument("file", metavar="FILE")
    compile_.add_argument("--system", help="the system to compile (default: every system in the file)")
    compile_.add_argument("--budget", type=_budget, help="override the budget: µ$ (1625) or dollars ($0.001625)")
    compile_.add_argument("-o", "--output", metavar="PLAN", help="write the plan JSON here")
    compile_.add_argument("--format", choices=("text", "json"), default="text")
    compile_.add_argument("--method", choices=("lexicographic", "weights"), default="lexicographic",
                          help="tier objective: HiGHS lexicographic (exact at any scale) or the paper's weights")
    compile_.add_argument("--sweep", type=_sweep, metavar="LO:HI:STEP", help="bind at every budget in this range")
    compile_.add_argument("--plot", metavar="PNG", help="with --sweep: plot worst-case cost against budget")
    compile_.add_argument("--task", metavar="TEXT",
                          help="with select = policy(...): the policy's template probabilities for this task")
    compile_.set_defaults(run=run_compile)


def _add_explain(commands) -> None:
    explain = commands.add_parser("explain", help="why each seat got its model, and every call's cost bound")
    explain.add_argument("file", metavar="FILE|PLAN")
    explain.add_argument("--system")
    explain.add_argument("--template", help="default: the selected template")
    explain.add_argument("--budget", type=_budget)
    explain.set_defaults(run=run_explain)


def _add_graph(commands) -> None:
    graph = commands.add_parser("graph", help="draw a plan's call graph")
    graph.add_argument("plan", metavar="PLAN")
    graph.add_argument("--format", choices=("mermaid", "dot", "png"), default="mermaid")
    graph.add_argument("--system")
    graph.add_argument("--template", help="default: the selected template")
    graph.add_argument("-o", "--output", help="file to write (required for png)")
    graph.set_defaults(run=run_graph)


def _add_exec(commands) -> None:
    execute = commands.add_parser("exec", help="run tasks on a plan, never spending past the budget")
    execute.add_argument("file", metavar="FILE|PLAN")
    source = execute.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help="one task text")
    source.add_argument("--dataset", metavar="JSONL", help="tasks, one JSON object per line (id, task/question/...)")
    execute.add_argument("--system")
    execute.add_argument("--budget", type=_budget, help="with a .bam file: compile at this budget")
    execute.add_argument("--template", help="run this template instead of the selected one")
    execute.add_argument("--trace", metavar="JSONL", help="append one line per call and per task here")
    execute.add_argument("--concurrency", type=_positive, default=8, metavar="N")
    execute.add_argument("--resume", action="store_true",
                         help="with --trace: skip tasks finished in the trace, continue the others with what they spent")
    execute.add_argument("--dry-run", action="store_true", help="answer every call with the full output cap (fake verbose)")
    execute.add_argument("--fake", choices=("echo", "verbose"), help="answer every model with the offline fake provider")
    execute.add_argument("--cassette", metavar="JSONL", help="replay recorded calls (or record them with --record)")
    execute.add_argument("--record", action="store_true", help="record every real call to --cassette")
    execute.add_argument("--guard", choices=("reserve", "posthoc"), default="reserve",
                         help="posthoc is the paper's after-the-fact check, kept as a benchmark baseline only")
    execute.add_argument("--skip-bad-rows", action="store_true", help="report malformed dataset rows and go on")
    execute.add_argument("--timeout", type=_seconds, default=60.0, help="seconds per call attempt (default 60)")
    execute.add_argument("--retries", type=int, default=3, help="retries per call after the first attempt (default 3)")
    execute.set_defaults(run=run_exec)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"need a whole number of at least 1, not {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError(f"need seconds above 0 (at most 3600), not {text!r}")
    return value


def _budget(text: str) -> float:
    try:
        value = float(text[1:]) * 1_000_000 if text.startswith("$") else float(text.removesuffix("µ$").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a budget: {text!r} (write µ$ like 1625, or dollars like $0.001625)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a budget must be above zero, not {text}")
    from bamasc.limits import MAX_BUDGET, written

    if not value <= MAX_BUDGET:  # NaN and infinity too
        raise argparse.ArgumentTypeError(
            f"a budget must be at most {written(MAX_BUDGET)} µ$ (${MAX_BUDGET / 1e6:,.0f}), not {text}"
        )
    return value


def _sweep(text: str) -> list[float]:
    try:
        lo, hi, step = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a range: {text!r} (write LO:HI:STEP in µ$, e.g. 250:3000:250)") from None
    from bamasc.limits import MAX_BUDGET, written

    if not (0 < lo <= hi <= MAX_BUDGET and 0 < step <= MAX_BUDGET):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(
            f"need 0 < LO <= HI <= {written(MAX_BUDGET)} and 0 < STEP <= {written(MAX_BUDGET)}, got {text}"
        )
    steps = (hi - lo) / step + 1e-9
    if steps >= 1000:  # compared before int(): a tiny step makes it infinite
        raise argparse.ArgumentTypeError(f"{text} gives more than 1000 budgets, too many for one sweep")
    count = int(steps) + 1
    return [lo + i * step for i in range(count)]


def run_lint(args) -> int:
    from bamasc import diagnostics as render
    from bamasc.lint import lint_paths

    report = Report()
    # A missing, unreadable or non-UTF-8 file is a BAM006/BAM005 diagnostic, not a usage
    # error: CI then still gets valid SARIF (or JSON, or an annotation) that names it.
    files = list(args.files)
    if args.with_importers:
        from bamasc.lint import importers

        files += [path for path in importers(files) if path not in files]
    result = lint_paths(files)
    report.add(result.diagnostics)
    if args.strict and report.warnings:
        report.errors += report.warnings
    if args.format == "json":
        print(render.render_json(result.diagnostics, result.files))
    elif args.format == "sarif":
        print(render.render_sarif(result.diagnostics, root=os.getcwd()))
    elif args.format == "github":
        text = render.render_github(result.diagnostics)
        if text:
            print(text)
    else:
        if result.diagnostics:
            print(render.render_text(result.diagnostics, result.sources, limit=args.max_diagnostics))
        print(report.summary(len(result.files)), file=sys.stderr)
    return report.exit_code


def _print_diagnostics(diagnostics, sources) -> None:
    from bamasc.diagnostics import render_text

    if diagnostics:
        print(render_text(diagnostics, sources), file=sys.stderr)


def _compile(report: Report, path: str, system, budget, method, plan_dir=None):
    """Compile or report why not; returns the Compiled result or None."""
    from bamasc.plan.compile import CompileError, compile_file

    if not os.path.isfile(path):
        report.usage(f"no such file: {path}")
        return None
    try:
        result = compile_file(path, system, budget, method, plan_dir)
    except CompileError as problem:
        report.usage(str(problem))
        return None
    report.add(result.diagnostics)
    _print_diagnostics(result.diagnostics, result.sources)
    return result


def run_compile(args) -> int:
    report = Report()
    if args.plot and not args.sweep:
        report.usage("--plot needs --sweep")
        return report.exit_code
    if args.task is not None and args.sweep:
        report.usage("--task and --sweep do not go together")
        return report.exit_code
    if args.plot and not writable(report, args.plot, "the plot"):
        return report.exit_code
    if args.sweep:
        return _run_sweep(args, report)
    plan_dir = os.path.dirname(os.path.abspath(args.output)) if args.output else None
    result = _compile(report, args.file, args.system, args.budget, args.method, plan_dir)
    if result is None or result.plan is None:
        return report.exit_code
    from bamasc.plan.render import compile_table
    from bamasc.plan.schema import dumps

    text = dumps(result.plan)
    if args.output:
        temporary = args.output + ".tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temporary, args.output)
        except OSError as problem:
            report.usage(f"cannot write the plan to {args.output}: {problem.strerror}")
            return report.exit_code
        # Self-check: the written plan reads back as the one compiled, and its bounds re-verify.
        if not _written_plan_checks(report, args.output, result.plan, result.program):
            return report.exit_code
    if args.format == "json":
        print(text, end="")
    else:
        print(compile_table(result.plan))
        if args.output:
            print(f"plan written to {args.output} (bounds re-verified)")
    if args.task is not None:
        # With --format json the plan owns standard output; the probabilities go beside it.
        out = sys.stderr if args.format == "json" else sys.stdout
        _print_policy_choice(report, result.plan, result.program, args.task, out)
    return report.exit_code


def _print_policy_choice(report: Report, plan, program, task: str, out) -> None:
    """`compile --task`: each policy system's template probabilities for the task, and its pick."""
    from bamasc.policy.errors import PolicyError
    from bamasc.policy.select import PolicySelector, feasibility, policy_path, probability_text

    systems = [system for system in plan.systems if system.selection["rule"] == "policy"]
    if not systems:
        report.usage("--task needs a system that selects by policy (select = policy(\"CHECKPOINT\"))")
        return
    for system in systems:
        try:
            selector = PolicySelector.load(policy_path(system, program), [t.name for t in system.templates])
            feasible = feasibility(system)
            (probs,) = selector.probabilities([task], system.budget, feasible)
            (pick,) = selector.choose([task], system.budget, feasible)
        except PolicyError as problem:
            print(f"bamasc: error: {problem}", file=sys.stderr)
            report.errors += 1
            continue
        print(probability_text(system, probs, pick), file=out)


def _run_sweep(args, report: Report) -> int:
    from bamasc.plan.sweep import plot_sweep, sweep, sweep_table

    rows = []
    for budget in args.sweep:
        result = _compile(report, args.file, args.system, budget, args.method)
        if result is None:
            return report.exit_code
        if result.program is None:
            return report.exit_code
        rows.append((budget, result.bindings))
        report.errors = 0  # an unreachable budget is a row of the sweep, not a failure
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
    return report.exit_code


def writable(report: Report, path: str, what: str) -> bool:
    """Whether `what` can be written to `path`, checked before the work that produces it,
    so a typo in -o costs a usage error now, not a traceback after a long run."""
    if os.path.isdir(path):
        report.usage(f"cannot write {what} to {path}: it is a directory")
        return False
    existed = os.path.lexists(path)
    try:
        open(path, "a", encoding="utf-8").close()  # "a": an existing file keeps its contents until the real write
        if not existed:
            os.remove(path)
    except OSError as problem:
        report.usage(f"cannot write {what} to {path}: {problem.strerror or problem}")
        return False
    return True


def _load_plan_or_report(report: Report, path: str):
    from bamasc.plan.load import REFUSALS, load_plan

    if not os.path.isfile(path):
        report.usage(f"no such file: {path}")
        return None
    try:
        return load_plan(path)
    except REFUSALS as problem:
        _refused(report, problem)
        return None


def _written_plan_checks(report: Report, path: str, plan, program) -> bool:
    from bamasc.plan.load import REFUSALS, check_written_plan

    try:
        check_written_plan(path, plan, program)
    except REFUSALS as problem:
        _refused(report, problem)
        return False
    return True


def _refused(report: Report, problem: Exception) -> None:
    print(f"bamasc: error: {problem}", file=sys.stderr)
    report.errors += 1


def _plan_and_program(report: Report, args):
    """(plan, program) from a plan JSON (loaded and re-verified) or a .bam file (compiled now)."""
    if args.file.endswith(".json"):
        if args.budget is not None:
            report.usage("--budget needs a .bam file: a plan is compiled for its budget")
            return None
        return _load_plan_or_report(report, args.file)
    result = _compile(report, args.file, args.system, args.budget, "lexicographic")
    if result is None or result.plan is None:
        return None
    return result.plan, result.program


def run_explain(args) -> int:
    from bamasc.plan.explain import explain_text

    report = Report()
    loaded = _plan_and_program(report, args)
    if loaded is None:
        return report.exit_code
    plan, program = loaded
    try:
        system = plan.system(args.system)
        print(explain_text(plan, system, program, args.template))
    except KeyError as problem:
        report.usage(f"unknown system or template: {problem}")
    return report.exit_code


def run_graph(args) -> int:
    from bamasc.plan import render

    report = Report()
    if args.output and not writable(report, args.output, "the graph"):
        return report.exit_code
    loaded = _load_plan_or_report(report, args.plan)
    if loaded is None:
        return report.exit_code
    plan, _ = loaded
    try:
        template = render.pick_template(plan.system(args.system), args.template)
    except KeyError as problem:
        report.usage(f"unknown system or template: {problem}")
        return report.exit_code
    if args.format == "png":
        if not args.output:
            report.usage("--format png needs -o FILE.png")
            return report.exit_code
        from bamasc.plan.draw import draw_png

        draw_png(template, args.output)
        print(f"graph written to {args.output}")
        return report.exit_code
    text = render.mermaid(template) if args.format == "mermaid" else render.dot(template)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as problem:  # the disk filled up, or the folder went away, since the check
            report.usage(f"cannot write the graph to {args.output}: {problem.strerror or problem}")
    else:
        print(text, end="")
    return report.exit_code


def _read_rows(read, path: str, skip_bad: bool, error: type[Exception]):
    """`read(path, skip_bad)` -> (rows, problems), reported: None once a bad row is
    printed (with the hint to skip such rows), else the rows, each skipped one warned about."""
    try:
        rows, problems = read(path, skip_bad)
    except error as problem:
        print(f"bamasc: error: {problem} (use --skip-bad-rows to skip such rows)", file=sys.stderr)
        return None
    for problem in problems:
        print(f"bamasc: warning: skipped {problem}", file=sys.stderr)
    return rows


def run_exec(args) -> int:
    import asyncio

    from bamasc.records import replace
    from bamasc.runtime.execute import DatasetError, ExecOptions, Task, read_dataset, run_tasks
    from bamasc.runtime.providers.base import ProviderError
    from bamasc.runtime.report import dataset_report, task_report
    from bamasc.runtime.retry import RetryPolicy

    report = Report()
    loaded = _plan_and_program(report, args)
    if loaded is None:
        return report.exit_code
    plan, program = loaded
    if args.task is not None:
        tasks = [Task("task", args.task)]
    else:
        if not os.path.isfile(args.dataset):
            report.usage(f"no such file: {args.dataset}")
            return report.exit_code
        if args.trace and os.path.exists(args.trace) and os.path.samefile(args.trace, args.dataset):
            report.usage(f"--trace {args.trace} is the dataset itself: traces are appended to")
            return report.exit_code
        tasks = _read_rows(read_dataset, args.dataset, args.skip_bad_rows, DatasetError)
        if tasks is None:
            return EXIT_ERRORS
    if args.resume and not args.trace:
        report.usage("--resume needs --trace FILE: the trace holds what each task already spent")
        return report.exit_code
    # Before any task runs: a trace that cannot be written would lose every charge.
    if args.trace and not writable(report, args.trace, "the trace"):
        return report.exit_code
    options = ExecOptions(
        concurrency=args.concurrency,
        trace_path=args.trace,
        resume=args.resume,
        guard=args.guard,
        fake_mode="verbose" if args.dry_run else args.fake,
        cassette=args.cassette,
        record=args.record,
        retry=RetryPolicy(max_attempts=1 + max(0, args.retries), timeout=args.timeout),
        template=args.template,
    )
    calls: list[dict] = []
    progress = _progress_bar() if args.dataset else None
    try:
        system = plan.system(args.system)
        if system.selection["rule"] == "policy" and not args.template:
            from bamasc.policy.errors import PolicyError
            from bamasc.policy.select import selector_for

            try:
                options = replace(options, selector=selector_for(system, program))
            except PolicyError as problem:
                print(f"bamasc: error: {problem}", file=sys.stderr)
                return EXIT_ERRORS
        results, summary, skipped = asyncio.run(run_tasks(plan, program, system.name, tasks, options, progress, calls))
    except KeyError as problem:
        report.usage(f"unknown system or template: {problem}")
        return report.exit_code
    except (ProviderError, ValueError) as problem:
        print(f"bamasc: error: {problem}", file=sys.stderr)
        return EXIT_ERRORS
    except KeyboardInterrupt:
        print("\ninterrupted: every finished task is in the trace; --resume continues", file=sys.stderr)
        return EXIT_ERRORS
    if progress is not None:
        print(file=sys.stderr)
    template = system.template(results[0].template if results else options.template or system.selection["selected"])
    if args.task is not None and results:
        print(task_report(results[0], template, calls))
    else:
        print(dataset_report(results, summary, skipped))
    if args.dry_run:
        worst = max((r.cost for r in results), default=0.0)
        bound = max((r.bound for r in results), default=template.worst_case_cost)
        print(f"dry run (every call answered with its full output cap): worst spent {worst:.1f} µ$, bound {bound:.1f} µ$")
    if any(r.overran or r.status in FAILED_STATUSES for r in results):
        report.errors += 1
    return report.exit_code


# Task outcomes that make `exec` exit 1: no answer, or a broken promise.
FAILED_STATUSES = frozenset({"error", "failed", "overbilled"})


def _progress_bar():
    """A one-line progress bar on standard error (only where it is a terminal)."""
    interactive = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        if not interactive and done != total and done % max(1, total // 10):
            return
        width = 30
        filled = int(width * done / max(1, total))
        end = "" if interactive else "\n"
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = argv[0] if argv else None
    args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        # The reader (`| head`) went away: stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _elsewhere(module: str, function: str):
    """A command whose parser lives in the package that owns it, imported only when needed."""

    def add(commands) -> None:
        from importlib import import_module

        getattr(import_module(module), function)(commands)

    return add


# Command name -> the function that adds its parser, in the order `--help` lists them.
COMMANDS = {
    "lint": _add_lint,
    "compile": _add_compile,
    "explain": _add_explain,
    "graph": _add_graph,
    "exec": _add_exec,
    "bench": _elsewhere("bamasc.evaluate.commands", "add_bench"),
    "score": _elsewhere("bamasc.evaluate.commands", "add_score"),
    "collect": _elsewhere("bamasc.policy.commands", "add_collect"),
    "train": _elsewhere("bamasc.policy.commands", "add_train"),
}


if __name__ == "__main__":
    sys.exit(main())
