"""Loads a plan only if its sources, compiled again with the plan's own settings, give it back.

Nothing the runtime uses is taken from the file: `load_plan` reads the file's
sources and `compiled_with`, compiles the sources again, and returns that
plan, after checking that the file says the same field for field (docs/plan.md).
"""

from __future__ import annotations

import hashlib
import os
import stat

from bamasc.version import __version__
from bamasc.plan.diff import differences, same_value
from bamasc.plan.read import Settings, read_plan_data, read_settings
from bamasc.plan.schema import Plan, PlanFormatError, canonical_sha256, plan_data
from bamasc.source import as_typed
from bamasc.syntax.resources import STDLIB_PATH
from bamasc.words import show


class StalePlanError(Exception):
    """The sources the plan was compiled from have changed since."""


class PlanVerificationError(Exception):
    """The plan says something its sources do not give, or a recorded bound does not hold."""


# Every way loading refuses a plan; each message names the field at fault.
REFUSALS = (PlanFormatError, StalePlanError, PlanVerificationError)


def source_path(label: str, plan_dir: str) -> str:
    if label.startswith("std/"):
        return os.path.join(STDLIB_PATH, label[4:])
    return os.path.normpath(os.path.join(plan_dir, label))


def load_plan(path: str) -> tuple[Plan, object]:
    """The plan and the program compiled again from the plan's sources, with its settings.

    Raises PlanFormatError (not a plan, or a field needed to recompile it is
    malformed), StalePlanError (sources, policy checkpoint or bamasc changed:
    recompile) or PlanVerificationError (a field differs from what the sources
    give, or a bound does not hold). Each message names the field and its value.
    """
    data, settings, plan_dir = _opened(path)
    command = recompile_command(settings, plan_dir, path)
    changed = _changed_sources(settings, plan_dir)
    if changed:
        program = _program(settings.root, plan_dir)
        details = _price_changes(data.get("prices"), program) if program is not None else []
        what = "; ".join(details) if details else "its source changed"
        raise StalePlanError(f"{path} is stale: {', '.join(changed)} changed since it was compiled ({what}). Recompile it: {command}")
    _check_catalog(data, settings, plan_dir, path, command)
    version = data.get("compiler_version")
    if not same_value(version, __version__):
        raise StalePlanError(
            f"{path}: compiler_version is {show(version)}, but this is bamasc {__version__}, which runs only "
            f"plans it compiles the same way. Recompile it: {command}"
        )
    compiled = _recompile(settings, plan_dir, path)
    _confirm(path, data, settings, command, compiled.plan, compiled.program)
    return compiled.plan, compiled.program


def check_written_plan(path: str, plan: Plan, program) -> None:
    """`compile -o`'s self-check: the file reads back as exactly `plan`, whose bounds re-verify.

    Nothing is compiled again: `plan` was compiled a moment ago from the same
    sources and settings, which is what loading would repeat.
    """
    data, settings, plan_dir = _opened(path)
    _confirm(path, data, settings, recompile_command(settings, plan_dir, path), plan, program)


def _opened(path: str) -> tuple[dict, Settings, str]:
    """The plan file's data, the settings it was compiled with, and its folder (source paths are relative to it)."""
    data = read_plan_data(path)
    try:
        settings = read_settings(data)
    except PlanFormatError as problem:
        raise PlanFormatError(f"{path}: {problem}") from None
    return data, settings, os.path.dirname(os.path.abspath(path))


def _confirm(path: str, data: dict, settings: Settings, command: str, plan: Plan, program) -> None:
    """Refuse `data` unless every field equals `plan`, compiled from its sources; then re-verify the bounds."""
    _check_policies(data, plan, path)
    expected = plan_data(plan)
    found = differences(data, expected)
    if found.count == 1 and not same_value(data.get("plan_sha256"), expected["plan_sha256"]):
        # Every field the sources give matched; only the compile settings are left to have changed.
        raise PlanVerificationError(
            f"{path}: plan_sha256 does not match the plan's contents, so compiled_with (system "
            f"{show(settings.system)}, budget {show(settings.budget)}, method {show(settings.method)}) or "
            f"plan_sha256 was edited after compiling. Recompile it with the settings you mean"
        )
    if found.count:
        raise PlanVerificationError(f"{path} is not what its sources compile to: {found.summary()}. Recompile it: {command}")
    verify_plan(plan, program)


def recompile_command(settings: Settings, plan_dir: str, path: str) -> str:
    """The `bamasc compile` command that writes this plan again."""
    words = ["bamasc", "compile", as_typed(source_path(settings.root, plan_dir))]
    if settings.system is not None:
        words += ["--system", settings.system]
    if settings.budget is not None:
        words += ["--budget", repr(settings.budget)]
    if settings.method == "paper":
        words += ["--cost-model", "paper"]
    elif settings.method != "lexicographic":
        words += ["--method", settings.method]
    return " ".join(words + ["-o", path])


def _recompile(settings: Settings, plan_dir: str, path: str):
    from bamasc.plan.compile import CompileError, compile_file

    try:
        compiled = compile_file(source_path(settings.root, plan_dir), settings.system, settings.budget, settings.method, plan_dir)
    except (CompileError, ValueError) as problem:
        # The sources are the ones it was compiled from, so the settings are what fails.
        raise PlanVerificationError(f"{path}: compiled_with does not compile its sources: {problem}") from None
    _keep_cache_problems(compiled.diagnostics)
    if compiled.program is None:
        raise StalePlanError(f"{path}: its source {settings.root} no longer compiles; fix it and recompile")
    if compiled.plan is None:
        first = next((d.message for d in compiled.diagnostics if d.severity == "error"), "no plan")
        raise PlanVerificationError(f"{path}: compiling {settings.root} with its compiled_with settings gives no plan: {first}")
    return compiled


def _check_policies(data: dict, plan: Plan, path: str) -> None:
    """A plan compiled with a policy checkpoint is stale once that checkpoint changes."""
    recorded = {}
    systems = data.get("systems")
    for entry in systems if isinstance(systems, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("selection"), dict):
            recorded[entry["name"]] = entry["selection"].get("policy_sha256")
    for system in plan.systems:
        before = recorded.get(system.name)
        now = system.selection.get("policy_sha256")
        if system.selection.get("policy") and isinstance(before, str) and before != now:
            raise StalePlanError(
                f"{path} is stale: the policy checkpoint of system '{system.name}' "
                f"({system.selection.get('policy')}) changed since it was compiled "
                f"(systems.{system.name}.selection.policy_sha256 is {show(before)}, the checkpoint's is {show(now)}). "
                "Recompile it."
            )


def _check_catalog(data: dict, settings: Settings, plan_dir: str, path: str, command: str) -> None:
    """A plan priced from the catalogue is stale once the catalogue gives other prices, as if its source changed."""
    prices = data.get("prices")
    if not isinstance(prices, dict) or not any(
        isinstance(entry, dict) and entry.get("source") == "catalog" for entry in prices.values()
    ):
        return
    try:
        intact = data.get("plan_sha256") == canonical_sha256({k: v for k, v in data.items() if k != "plan_sha256"})
    except (TypeError, ValueError):
        intact = False
    if not intact:
        return  # an edited file: verification names the field that differs
    from bamasc import catalog

    # Against the snapshot's own prices, as the compile bound: a cache that says otherwise is rebuilt.
    with catalog.from_package():
        program = _program(settings.root, plan_dir)
    details = _price_changes(prices, program) if program is not None else []
    if details:
        raise StalePlanError(
            f"{path} is stale: the price catalogue changed since it was compiled ({'; '.join(details)}). "
            f"Recompile it: {command}"
        )


def _changed_sources(settings: Settings, plan_dir: str) -> list[str]:
    changed = []
    for label, recorded in settings.sources:
        digest = _file_sha256(source_path(label, plan_dir))
        if digest is None:
            changed.append(f"{label} (missing)")
        elif digest != recorded:
            changed.append(label)
    return changed


def _file_sha256(path: str) -> str | None:
    """The file's hash, or None when it is not a readable regular file (a FIFO or a device would never end)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except (OSError, ValueError):
        return None


def _program(root: str, plan_dir: str):
    from bamasc.ir.budget import check_loaded
    from bamasc.diagnostics import has_errors
    from bamasc.loader import load

    loaded = load(source_path(root, plan_dir))
    if has_errors(loaded.diagnostics) or not loaded.modules:
        return None
    program, diagnostics = check_loaded(loaded)
    _keep_cache_problems(diagnostics)
    return None if has_errors(diagnostics) else program


def _keep_cache_problems(diagnostics) -> None:
    """A damaged catalogue cache (BAM411) is for the caller of load_plan to tell, which shows no
    diagnostics: each is handed back to the catalogue (`catalog.take_cache_problems`)."""
    from bamasc import catalog

    for diagnostic in diagnostics:
        if diagnostic.code == "BAM411":
            catalog.keep_cache_problem(diagnostic.message)


def _price_changes(prices, program) -> list[str]:
    """Each recorded price or tier that the changed source no longer declares."""
    changes = []
    for name, recorded in prices.items() if isinstance(prices, dict) else ():
        model = program.models.get(name)
        if model is None:
            changes.append(f"model {show(name)} was removed")
            continue
        if not isinstance(recorded, dict):
            continue
        pricing = model.prices().record()
        for key, now in (("input", model.price_input), ("output", model.price_output), ("tier", model.tier),
                         *((key, pricing[key]) for key in ("cache_read", "cache_write", "tiers", "per_request", "catalog"))):
            if not (recorded.get(key) == now if isinstance(now, (list, dict)) else same_value(recorded.get(key), now)):
                label = "tier" if key == "tier" else f"{key.replace('_', ' ')} price"
                changes.append(f"{label} of model '{name}' went from {_shown(recorded.get(key))} to {_shown(now)}")
    return changes


def _shown(value) -> str:
    """A price as a message gives it: a number as is, the tiers or the catalogue entry in JSON."""
    import json

    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else show(value)


def verify_plan(plan: Plan, program) -> None:
    """Every feasible template's bounds, recomputed on its call graph, match, and fit the budget and the deadline."""
    from bamasc.ir.graph import verified_cost
    from bamasc.ir.unroll import unroll

    for system in plan.systems:
        for tokens, template in _bound_templates(system):
            if not template.feasible:
                continue
            expected = unroll(program.topologies[template.name], template.counts).calls
            if [(c.id, c.inputs, c.step) for c in expected] != [(n.id, n.inputs, n.step) for n in template.nodes]:
                raise PlanVerificationError(
                    f"system '{system.name}', template '{template.name}': the recorded calls differ from the flow's"
                )
            try:
                trusted = {call.id: call for call in expected}
                caps = _seat_caps(template, program)
                total = verified_cost(template.graph(), program.roles, program.models, tokens, trusted, caps=caps)
            except ValueError as problem:
                raise PlanVerificationError(f"system '{system.name}', template '{template.name}': {problem}") from None
            if abs(total - template.worst_case_cost) > 1e-6 * max(1.0, total):
                raise PlanVerificationError(
                    f"system '{system.name}', template '{template.name}': recorded worst case "
                    f"{template.worst_case_cost:.4f} µ$, the graph gives {total:.4f} µ$"
                )
            # A paper-cost-model pool may exceed the budget (BAM506); the run-time guard holds it to it.
            if total > system.budget * (1 + 1e-9) and plan.compiled_with.get("method") != "paper":
                raise PlanVerificationError(
                    f"system '{system.name}', template '{template.name}': worst case {total:.4f} µ$ "
                    f"exceeds the budget of {system.budget:g} µ$"
                )
            _verify_latency(system, template, program, caps)


def _bound_templates(system):
    """(task tokens, template) for every template of every length class of `system`."""
    classes = [(system.task_tokens, system.templates)]
    classes += [(c.task_tokens, c.templates) for c in system.length_classes or ()]
    return [(tokens, template) for tokens, templates in classes for template in templates]


def _seat_caps(template, program) -> dict:
    """(slot, instance) -> the output cap the plan chose for the seat; ValueError for a cap its role's range
    `max_output = lo..hi` does not hold, or one on a role whose cap is fixed."""
    roles = {slot.name: program.roles[slot.role] for slot in program.topologies[template.name].slots}
    caps = {}
    for seat in template.binding:
        if seat.cap is None:
            continue
        role = roles.get(seat.slot)
        if role is None or role.min_output is None or not isinstance(seat.cap, int) or not 1 <= seat.cap <= role.max_output:
            raise ValueError(f"seat {seat.slot}[{seat.instance}]: output cap {seat.cap!r} is not one its role may have")
        caps[(seat.slot, seat.instance)] = seat.cap
    return caps


def _verify_latency(system, template, program, caps=None) -> None:
    """The recorded worst-case latency is the critical path of the graph, and within the deadline.

    A recorded figure below the recomputed one is refused: it would promise a
    deadline the plan cannot keep."""
    from bamasc.ir.graph import verified_latency

    where = f"system '{system.name}', template '{template.name}'"
    try:
        bound = verified_latency(template.graph(), program.roles, program.models, caps=caps)
    except ValueError as problem:
        raise PlanVerificationError(f"{where}: {problem}") from None
    recorded = template.worst_case_latency_s
    if (bound.seconds is None) != (recorded is None) or (
        bound.seconds is not None and abs(recorded - bound.seconds) > 1e-9 * max(1.0, bound.seconds)
    ):
        shown = "none" if recorded is None else f"{recorded:g} s"
        raise PlanVerificationError(
            f"{where}: recorded worst-case latency {shown}, the graph gives "
            + ("none (a model declares no latency)" if bound.seconds is None else f"{bound.seconds:g} s")
        )
    if system.deadline_s is not None and (bound.seconds is None or bound.seconds > system.deadline_s):
        raise PlanVerificationError(
            f"{where}: worst-case latency "
            + ("unknown" if bound.seconds is None else f"{bound.seconds:g} s")
            + f" exceeds the deadline of {system.deadline_s:g} s"
        )
