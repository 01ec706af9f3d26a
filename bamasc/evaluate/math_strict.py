"""Hendrycks-strict MATH scoring: the MATH paper's own answer check, string equality after its normalisation.

The MATH benchmark (Hendrycks et al., 2021) scores a model by taking the
contents of the last `\\boxed{...}` of its output (or `\\fbox{...}` where there
is no `\\boxed`), normalising that string and the reference's the same way,
and comparing them for equality. Nothing is evaluated: `0.50` is not `1/2`
(`0.5` is, by one of the rules), and `\\frac{1}2` is not `\\frac{1}{2}`. The
BAMAS paper reports MATH accuracy this way; `scorers.math_equal` is the
lenient scorer beside it (more normalisation, then sympy).

Where a rule of the normalisation cannot apply (two `\\text{ ` units, a
`\\frac` with nothing after it), the original check gives up normalising and
compares the two strings as they are; so does this one.
"""

from __future__ import annotations

import re

_INTEGER = re.compile(r"^-?[0-9]+$")


class _GiveUp(Exception):
    """A rule met a string it cannot rewrite: compare without normalising."""


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (else of the last `\\fbox{...}`), braces balanced;
    `\\boxed 5` (a space, no braces) reads up to the next `$`. None without one, or when it never closes."""
    start = text.rfind("\\boxed")
    name = "\\boxed"
    if start < 0:
        start, name = text.rfind("\\fbox"), "\\fbox"
        if start < 0:
            return None
    rest = start + len(name)
    if text.startswith(" ", rest):
        return text[rest + 1 :].split("$", 1)[0]
    if not text.startswith("{", rest):
        return None
    depth = 0
    for index in range(rest, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[rest + 1 : index]
    return None


def strip_string(text: str) -> str:
    """The MATH scorer's normalisation, rule by rule in its order; raises _GiveUp where a rule cannot apply."""
    text = text.replace("\n", "").replace("\\!", "")
    text = text.replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "")
    text = _remove_right_units(text)
    text = text.replace("\\%", "")  # a bare % stays: the original removes only the escaped one
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    # "x = 5" and "k=5" answer with the value: one "=", and at most two characters before it.
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        text = sides[1]
    text = _fix_sqrt(text)
    text = text.replace(" ", "")
    text = _fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _fix_a_slash_b(text)


def _remove_right_units(text: str) -> str:
    """`5\\text{ cm}` is 5: everything from the one `\\text{ ` (with its space) on is a unit."""
    if "\\text{ " not in text:
        return text
    parts = text.split("\\text{ ")
    if len(parts) != 2:
        raise _GiveUp
    return parts[0]


def _fix_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`: the one character after `\\sqrt` becomes its argument."""
    if "\\sqrt" not in text:
        return text
    pieces = text.split("\\sqrt")
    out = pieces[0]
    for piece in pieces[1:]:
        if not piece:
            raise _GiveUp
        if piece[0] != "{":
            piece = "{" + piece[0] + "}" + piece[1:]
        out += "\\sqrt" + piece
    return out


def _fix_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`; a `\\frac{` is left as written."""
    pieces = text.split("\\frac")
    out = pieces[0]
    for piece in pieces[1:]:
        out += "\\frac"
        if not piece:
            raise _GiveUp
        if piece[0] == "{":
            out += piece
            continue
        if len(piece) < 2:
            return text
        numerator, after = piece[0], piece[1]
        if after != "{":
            out += "{" + numerator + "}{" + after + "}" + piece[2:]
        else:
            out += "{" + numerator + "}" + piece[1:]
    return out


def _fix_a_slash_b(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}`, for two whole numbers written plainly (`03/4` stays)."""
    parts = text.split("/")
    if len(parts) != 2 or not all(_INTEGER.match(part) for part in parts):
        return text
    if any(part != str(int(part)) for part in parts):
        return text
    return "\\frac{" + parts[0] + "}{" + parts[1] + "}"


def equivalent(left: str, right: str) -> bool:
    """Hendrycks' equivalence of two answers: equal after normalisation, or equal as written
    where normalising either one gives up."""
    try:
        return strip_string(left) == strip_string(right)
    except _GiveUp:
        return left == right


def strict_math_equal(prediction: str | None, reference: str) -> tuple[bool, str | None]:
    """MATH, strictly: the prediction's last box against the reference's (or the reference itself).

    A prediction without any box is taken as an answer already extracted (as
    `bench` passes the system's `answer = boxed` extraction), so it is compared
    whole; a box that never closes is no answer. Never raises on any string.
    """
    if prediction is None:
        return False, None
    found = last_boxed(prediction) if ("\\boxed" in prediction or "\\fbox" in prediction) else prediction
    if found is None:
        return False, None
    expected = last_boxed(reference)
    if expected is None:
        expected = reference
    return equivalent(found, expected), found
