"""The package's stages import one way (docs/architecture.md), and no module reaches into another's privates.

Read from the source with `ast`, lazy imports inside functions included, so an
import that would only run on some path still counts.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = Path(ROOT) / "bamasc"

# Each stage may import its own and lower ranks only (docs/architecture.md, the stages table).
RANK = {
    "records": 0, "rows": 0, "secrets": 0, "words": 0, "limits": 0, "encodings": 0, "prices": 0, "extras": 0, "codes": 0,
    "provider_registry": 0, "version": 0,
    "source": 1,
    "diagnostics": 2,
    "syntax": 3,
    "program": 4, "loader": 4, "catalog": 4, "fmt": 4, "combinators": 4,
    "check": 5,
    "ir": 6,
    "lint": 7, "optimize": 7,
    "plan": 8,
    "metering": 9, "http": 9,
    "runtime": 10,
    "policy": 11,
    "evaluate": 12, "api": 12,
    "lsp": 13, "cli": 13, "serve": 13, "proxy": 13,
    "__main__": 14,
}
GENERATED = {"bamasc.syntax._tables"}
# The package itself re-exports the public API (bamasc.api) for type checkers and on first
# attribute use only (PEP 562), never at import: it is above every stage and in no cycle.
FRONT_DOOR = "bamasc"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for every bamasc import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.append((full if full in modules else target, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, "", node.lineno) for alias in node.names)
    return [entry for entry in found if entry[0].startswith("bamasc")]


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "bamasc"


def _graph():
    modules = _modules()
    return modules, {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_module_has_a_stage():
    modules, _ = _graph()
    unknown = sorted({_stage(m) for m in modules} - set(RANK) - {"bamasc"})
    assert not unknown, f"give these a rank in RANK and a row in docs/architecture.md: {unknown}"


def test_the_proxy_keeps_only_http_and_translation():
    """The proxy spends through the metering core, as every surface does: it imports nothing of the runtime, nor of
    `bamasc serve` (what the two share is in bamasc.http)."""
    modules, graph = _graph()
    reached = sorted(f"{name}:{line} imports {target}" for name, imports in graph.items()
                     if _stage(name) == "proxy" for target, _, line in imports if _stage(target) in ("runtime", "serve"))
    assert not reached, reached


def test_no_stage_imports_a_later_one():
    """The front door (`import bamasc`, `from bamasc import X` with X not a module) ranks just above the API,
    whose names it re-exports: only the commands (cli, lsp, serve, proxy) may use it."""
    _, imports = _graph()
    upward = [
        f"{module}:{line} imports {target}"
        for module, found in imports.items()
        if module != FRONT_DOOR
        for target, _, line in found
        if target == FRONT_DOOR and RANK[_stage(module)] <= RANK["api"]
        or _stage(target) not in (_stage(module), "bamasc") and RANK[_stage(module)] < RANK[_stage(target)]
    ]
    assert not upward, "imports from a later stage into an earlier one:\n" + "\n".join(upward)


def test_no_module_imports_another_modules_private_names():
    _, imports = _graph()
    private = [
        f"{module}:{line} imports {target}.{name}"
        for module, found in imports.items()
        for target, name, line in found
        if name.startswith("_") and not name.startswith("__") and target != module
    ]
    assert not private, "\n".join(private)


def test_the_imports_have_no_cycle():
    modules, imports = _graph()
    edges = {m: {t for t, _, _ in found if t in modules and t != m} for m, found in imports.items() if m != FRONT_DOOR}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                return path + [module, target]
            if target not in state:
                cycle = visit(target, path + [module])
                if cycle:
                    return cycle
        state[module] = 2
        return None

    for module in sorted(modules):
        if module not in state:
            cycle = visit(module, [])
            assert cycle is None, "import cycle: " + " -> ".join(cycle[cycle.index(cycle[-1]):])


def test_no_module_is_over_400_lines():
    modules, _ = _graph()
    long = {
        name: count
        for name, path in modules.items()
        if name not in GENERATED and (count := sum(1 for _ in path.open(encoding="utf-8"))) > MAX_LINES
    }
    assert not long, f"split these along their seams: {long}"


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The rules can fail: a check module that imports the CLI is an upward import."""
    fake = {"bamasc.check.bad": tmp_path / "bad.py"}
    fake["bamasc.check.bad"].write_text("def f():\n    from bamasc.cli.report import _private\n", encoding="utf-8")
    found = _imports("bamasc.check.bad", fake["bamasc.check.bad"], {"bamasc.cli.report": Path(os.devnull)})
    assert found == [("bamasc.cli.report", "_private", 2)]
    assert RANK[_stage("bamasc.check.bad")] < RANK[_stage(found[0][0])]


def _combinator_class_tests(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of `tree` that test a node's class against one of `names` (isinstance, match, type(...))."""
    def named(node) -> bool:
        if isinstance(node, ast.Tuple):
            return any(named(element) for element in node.elts)
        return isinstance(node, (ast.Attribute, ast.Name)) and (getattr(node, "attr", None) or getattr(node, "id", None)) in names

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass") and len(node.args) == 2:
            if named(node.args[1]):
                found.append(node.lineno)
        elif isinstance(node, ast.MatchClass) and named(node.cls):
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(named(c) for c in [node.left, *node.comparators]):
            found.append(node.lineno)  # type(node) is ast.Chain
        elif isinstance(node, ast.Constant) and node.value in names and node.value not in ("Plan", "Ref", "Route"):
            found.append(node.lineno)  # type(node).__name__ == "Chain"
    return found


def test_only_the_combinators_and_syntax_test_a_combinators_ast_class():
    """docs/architecture.md, "Combinators are classes": every other stage asks the combinator."""
    from bamasc import combinators
    from bamasc.combinators import base

    names = {cls.__name__ for unit in base._COMBINATORS.values() for cls in type.mro(unit.node)[:-1]}
    assert {"Chain", "ReferenceChain", "SlotCall", "Converse", "Route", "Dynamic"} <= names, names
    offenders = []
    for name, path in _modules().items():
        if name.startswith(("bamasc.combinators", "bamasc.syntax")):
            continue
        lines = _combinator_class_tests(ast.parse(path.read_text(encoding="utf-8")), names)
        offenders += [f"{path.relative_to(ROOT)}:{line}" for line in lines]
    assert not offenders, "ask the combinator (combinators.combinator_of) instead:\n" + "\n".join(offenders)
    assert combinators.combinator_of  # the way in


def test_no_test_module_imports_another():
    """Shared test helpers live in tests/helpers/ (STYLE.md: a helpers module, not another test file)."""
    tests = Path(ROOT) / "tests"
    offenders = []
    for path in tests.rglob("*.py"):
        if "fixtures" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            names += [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom) else []
            if any(name.startswith("tests.") and name.rpartition(".")[2].startswith("test_") for name in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "move what these import into tests/helpers/:\n" + "\n".join(offenders)


def test_every_package_is_in_the_wheel():
    """A package missing from pyproject's list works in an editable checkout and is absent from an installed wheel."""
    import tomllib

    config = tomllib.loads((Path(ROOT) / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {".".join(path.parent.relative_to(ROOT).parts) for path in PACKAGE.rglob("__init__.py")}
    assert packages <= listed, sorted(packages - listed)
