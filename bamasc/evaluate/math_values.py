"""MATH answers compared by value: LaTeX read as sympy input under a whitelist, and what must not be read as equal.

The second try of the lenient MATH scorer (`scorers.math_equal`), after the
normalised strings differ. Only numbers, single-letter variables, `+ - * / ^`,
brackets and a short list of functions and constants are read, and sympy
evaluates with no builtins, so a prediction is never run as code. Text that
implicit multiplication would read as the reference's value is refused
first: a number right after a bracket or a letter (`\\frac{14}{3}1`), a
leading zero (`01`), and two answers naming different variables or
constants (`0a`, `0\\pi` against `0`).
"""

from __future__ import annotations

import re

_ALLOWED_NAMES = frozenset({"sqrt", "pi", "oo", "E", "I", "exp", "log", "ln", "sin", "cos", "tan", "Abs"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE = re.compile(r"^[0-9A-Za-z+\-*/^().,\s]*$")


def _to_sympy_text(latex: str) -> str | None:
    """LaTeX of a final answer as sympy input, or None when it holds anything else."""
    text = latex
    text = re.sub(r"\\sqrt\[([^\]]*)\]\{", r"root{\1}{", text)
    replacements = {
        "\\frac": "frac", "\\sqrt": "sqrt", "\\pi": "pi", "\\infty": "oo", "\\cdot": "*", "\\times": "*",
        "\\div": "/", "\\ln": "log", "\\log": "log", "\\exp": "exp", "\\sin": "sin", "\\cos": "cos", "\\tan": "tan",
        "\\{": "(", "\\}": ")",
    }
    for latex_name, name in replacements.items():
        text = text.replace(latex_name, name)
    if "\\" in text:
        return None
    # frac{a}{b} -> ((a)/(b)); root{n}{x} -> ((x)**(1/(n))); remaining braces group.
    for _ in range(20):
        changed = re.sub(r"frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
        changed = re.sub(r"root\{([^{}]*)\}\{([^{}]*)\}", r"((\2)**(1/(\1)))", changed)
        # Other braces group, except a frac's or root's own arguments (after the name or a "}").
        changed = re.sub(r"(?<!frac)(?<!root)(?<!\})\{([^{}]*)\}", r"(\1)", changed)
        if changed == text:
            break
        text = changed
    text = text.replace("^", "**")
    if not _SAFE.match(text) or "__" in text:
        return None
    for name in _IDENTIFIER.findall(text):
        if name not in _ALLOWED_NAMES and not re.fullmatch(r"[A-Za-z]+", name):
            return None
    return text


# Text sympy would read as a product nobody writes: a number right after a bracket or a
# letter (`\\frac{14}{3}1`, `3\\sqrt{13}1`, `x2`), or a number with a leading zero (`01`).
# Implicit multiplication would read the stray digit as "x 1" and the answer as the gold's value.
_STRAY_NUMBER = re.compile(r"[)A-Za-z]\s*[0-9.]|(?<![0-9.])0[0-9]")


def _stray(text: str) -> bool:
    return _STRAY_NUMBER.search(text) is not None


_FUNCTIONS = frozenset({"sqrt", "exp", "log", "ln", "sin", "cos", "tan", "Abs"})
_CONSTANTS = _ALLOWED_NAMES - _FUNCTIONS


def _variables(text: str) -> frozenset[str]:
    """The letters and constants an answer names: `0a` names `a` and `0\\pi` names pi, though
    sympy reads both as 0; two answers naming different ones are different answers."""
    named: set[str] = set()
    for name in _IDENTIFIER.findall(text):
        if name in _CONSTANTS:
            named.add(name)
        elif name not in _FUNCTIONS:
            named.update(name)
    return frozenset(named)


def sympy_equal(left: str, right: str) -> bool:
    """Whether two normalised answers have the same value (False when either cannot be read safely)."""
    if len(left) > 200 or len(right) > 200:
        return False
    a_text, b_text = _to_sympy_text(left), _to_sympy_text(right)
    if a_text is None or b_text is None:
        return False
    if _stray(a_text) or _stray(b_text) or _variables(a_text) != _variables(b_text):
        return False
    try:
        import sympy
        from sympy.parsing.sympy_parser import (
            convert_xor,
            implicit_multiplication_application,
            parse_expr,
            standard_transformations,
        )
    except ImportError:
        return False
    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    # Only what the parser's own generated code calls, and no builtins: a name that is not
    # here becomes a symbol.
    namespace = {
        "__builtins__": {}, "Integer": sympy.Integer, "Float": sympy.Float, "Rational": sympy.Rational,
        "Symbol": sympy.Symbol, "factorial": sympy.factorial, "pi": sympy.pi, "oo": sympy.oo, "E": sympy.E,
        "I": sympy.I, "sqrt": sympy.sqrt, "exp": sympy.exp, "log": sympy.log, "ln": sympy.log, "sin": sympy.sin,
        "cos": sympy.cos, "tan": sympy.tan, "Abs": sympy.Abs,
    }
    try:
        a = parse_expr(a_text, local_dict={}, global_dict=dict(namespace), transformations=transformations)
        b = parse_expr(b_text, local_dict={}, global_dict=dict(namespace), transformations=transformations)
        if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
            return False
        if a.free_symbols or b.free_symbols:
            return bool(sympy.simplify(a - b) == 0)
        if a.has(sympy.oo, -sympy.oo, sympy.zoo) or b.has(sympy.oo, -sympy.oo, sympy.zoo):
            return bool(a == b)
        va, vb = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
        return abs(va - vb) <= 1e-9 * max(1.0, abs(vb))
    except Exception:  # sympy raises many kinds on text it cannot read: then they are not equal
        return False
