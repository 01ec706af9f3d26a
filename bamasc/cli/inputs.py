"""What a command is given, checked and loaded: files, sources compiled, plans re-verified, rows read.

Each function prints what is wrong, counts it on the command's Report, and
returns None (or False), so a command stops with `report.return_code`.
"""

from __future__ import annotations

import os
import sys

from bamasc.cli import output
from bamasc.cli.report import Report


def is_file(report: Report, path: str) -> bool:
    if not os.path.isfile(path):
        output.usage(report, f"no such file: {path}")
        return False
    return True


def writable(report: Report, path: str, what: str) -> bool:
    """Whether `what` can be written to `path`, checked before the work that produces it,
    so a typo in -o costs a usage error now, not a traceback after a long run."""
    if os.path.isdir(path):
        output.usage(report, f"cannot write {what} to {path}: it is a directory")
        return False
    existed = os.path.lexists(path)
    try:
        open(path, "a", encoding="utf-8").close()  # "a": an existing file keeps its contents until the real write
        if not existed:
            os.remove(path)
    except OSError as problem:
        output.usage(report, f"cannot write {what} to {path}: {problem.strerror or problem}")
        return False
    return True


def write_text(report: Report, path: str, what: str, text: str) -> bool:
    """Write a command's output file; a usage error naming `what` and `path` where it cannot be written."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as problem:
        output.usage(report, f"cannot write {what} to {path}: {problem.strerror or problem}")
        return False
    return True


def compiled(report: Report, path: str, system, budget, method, plan_dir=None):
    """The Compiled result of a .bam file, its diagnostics printed; None if it could not be compiled."""
    from bamasc.plan.compile import CompileError, compile_file

    if not is_file(report, path):
        return None
    try:
        result = compile_file(path, system, budget, method, plan_dir)
    except CompileError as problem:
        output.usage(report, problem)
        return None
    report.add(result.diagnostics)
    output.diagnostics(result.diagnostics, result.sources)
    return result


def api_error(report: Report, problem) -> None:
    """Print a BamError of the Python API as the command line always has: its diagnostics as they are
    (counted), else `bamasc: error:` and its message, a usage error (exit 2) or an error in the input (exit 1)."""
    if problem.diagnostics:
        print(problem.message, file=sys.stderr)
        report.add(problem.diagnostics)
    else:
        (output.usage if problem.exit_code == 2 else output.failure)(report, problem.message)


def loaded_plan(report: Report, path: str):
    """(plan, program) of a plan JSON, loaded and re-verified; None if it is refused."""
    from bamasc.plan.load import REFUSALS, load_plan

    if not is_file(report, path):
        return None
    try:
        return load_plan(path)
    except REFUSALS as problem:
        output.failure(report, problem)
        return None
    finally:
        cache_problems()


def cache_problems() -> None:
    """Warn of each file of the price catalogue's cache found damaged (and rebuilt) while loading."""
    catalog = sys.modules.get("bamasc.catalog")  # not loaded: nothing read its cache
    for problem in catalog.take_cache_problems() if catalog is not None else ():
        output.warning(problem)


def written_plan_checks(report: Report, path: str, plan, program) -> bool:
    """Whether the plan written to `path` reads back as `plan` and its bounds re-verify."""
    from bamasc.plan.load import REFUSALS, check_written_plan

    try:
        check_written_plan(path, plan, program)
    except REFUSALS as problem:
        output.failure(report, problem)
        return False
    return True


def plan_and_program(report: Report, args):
    """(plan, program) from a plan JSON (loaded and re-verified) or a .bam file (compiled now), through the
    Python API; None once the problem is printed."""
    import bamasc
    from bamasc.api.plan import internals

    if args.file.endswith(".json"):
        if args.budget is not None:
            output.usage(report, "--budget needs a .bam file: a plan is compiled for its budget")
            return None
        try:
            return internals(bamasc.Plan.load(args.file))
        except bamasc.BamError as problem:
            api_error(report, problem)
            return None
        finally:
            cache_problems()
    try:
        plan = bamasc.load(args.file).compile(args.system, args.budget, folder=os.getcwd())
    except bamasc.BamError as problem:
        api_error(report, problem)
        return None
    report.add(plan.diagnostics)
    if plan.diagnostics_text:
        print(plan.diagnostics_text, file=sys.stderr)
    return internals(plan)


def checked_system(report: Report, path: str, name: str | None):
    """The named (or first) system of a checked .bam file; None once the problems are printed."""
    found = checked_program_system(report, path, name)
    return None if found is None else found[1]


def checked_program_system(report: Report, path: str, name: str | None):
    """(the checked program, its named or first system) of a .bam file; None once the problems are printed."""
    from bamasc.plan.compile import check_file

    program, found, sources = check_file(path)
    report.add(found)
    output.diagnostics(found, sources)
    if program is None:
        return None
    if name is None:
        if not program.systems:
            output.usage(report, "the file declares no system")
            return None
        return program, next(iter(program.systems.values()))
    if name not in program.systems:
        output.usage(report, f"no system '{name}'; the file declares: {', '.join(program.systems)}")
        return None
    return program, program.systems[name]


def rows(report: Report, read, path: str, skip_bad: bool, error: type[Exception]):
    """`read(path, skip_bad)` -> (rows, problems): the rows, each skipped one warned about;
    None once a bad row is reported (with the hint to skip such rows)."""
    try:
        found, problems = read(path, skip_bad)
    except error as problem:
        output.failure(report, f"{problem} (use --skip-bad-rows to skip such rows)")
        return None
    for problem in problems:
        output.warning(f"skipped {problem}")
    return found


def extras(report: Report, needs, command: str) -> bool:
    """Whether every optional extra of `needs` ((extra, what needs it), bamasc.extras) is installed,
    checked before the command spends anything; a missing one is named with its pip command."""
    from bamasc.extras import ExtraMissing, require_all

    try:
        require_all(needs, command)
    except ExtraMissing as problem:
        output.failure(report, problem)
        return False
    return True


def run_extras(program, model_names, offline: bool) -> list:
    """The extras of the providers of `model_names` that will answer for real (`offline`: the fake
    provider or a cassette played back answers every call)."""
    from bamasc.extras import for_providers

    return [] if offline else for_providers(program.models[name].provider for name in model_names)


def bearer_token(report: Report, args, no_auth_warning: str) -> bytes | None:
    """The token clients must send, from the variable `--token-env` names; None with `--no-auth`, after the warning."""
    if args.no_auth:
        output.warning(no_auth_warning)
        return None
    value = os.environ.get(args.token_env, "")
    if not value.strip():
        output.usage(report, f"--token-env {args.token_env}: the environment variable is not set or empty")
        return None
    return value.strip().encode("utf-8", "surrogateescape")
