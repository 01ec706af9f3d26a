"""Scoring model outputs against references: GSM8K numbers, MATH answers, MBPP code run against its asserts.

A prediction may be the model's whole output or an answer already extracted
by the system's `answer` kind: extraction is applied again and leaves an
extracted answer as it is.

MATH answers are compared as strings after a normalisation wider than the
MATH benchmark's own (fractions, `\\left`/`\\right`, units, degrees, percent
and dollar signs, spaces, `0.5` for `\\frac{1}{2}`, `a/b` for `\\frac{a}{b}`);
when the strings differ, sympy compares their values, reading only numbers,
single-letter variables and a short list of functions and constants, so it
never evaluates arbitrary text. It refuses what implicit multiplication would
read as the gold's value: a number right after a bracket or a letter
(`\\frac{14}{3}1`), a leading zero (`01`), and an answer naming a variable or
constant the other does not (`0a`, `0\\pi`). The scorer `math-strict` (math_strict.py) is
the benchmark's own check, string equality alone.
"""

from __future__ import annotations

import re

from bamasc.evaluate.math_strict import strict_math_equal
from bamasc.evaluate.math_values import sympy_equal
from bamasc.records import record
from bamasc.runtime.extract import extract_code, extract_code_first, extract_number, last_boxed, matching_brace

# Seconds an MBPP program may run: its asserts take milliseconds; a loop that never ends is wrong.
CODE_TIMEOUT = 5.0


@record
class Verdict:
    id: str
    correct: bool
    prediction: str | None  # the extracted answer that was compared
    reference: str
    detail: str = ""  # why it is wrong: the sandbox verdict, "no prediction", ...


# ---------------------------------------------------------------- numbers (GSM8K)


def number_equal(prediction: str | None, reference: str) -> tuple[bool, str | None]:
    """GSM8K: the prediction's `#### n`, else its last `\\boxed{n}`, else its last number, against
    the reference number; commas, currency and units are dropped, and the two compare exactly."""
    if prediction is None:
        return False, None
    found = extract_number(prediction)
    expected = extract_number(reference)
    if found is None or expected is None:
        return False, found
    value, wanted = exact_number(found), exact_number(expected)
    return value is not None and value == wanted, found


def exact_number(text: str):
    """The decimal value a number's text writes, exactly (a Decimal), or None when it writes none.

    Floats would round: 1450001 would come within a relative 1e-6 of 1450000, and
    0.1 + 0.2 would miss 0.3. GSM8K references are whole numbers or short decimals,
    so an exact decimal comparison is the benchmark's own rule: 15000.00 equals
    15000 and 1.5e3 equals 1500, but 15000.0000001 does not equal 15000.
    """
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


# ---------------------------------------------------------------- MATH

# A unit is a \\text{...} that ends the answer (with a power: cm^2), after a value.
_UNIT_TEXT = re.compile(r"(?<=[0-9}])\s*\\(?:text|mbox|textbf|mathrm)\{\s*[^{}]*\}(?:\^\{?\d\}?)?\s*$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SLASH = re.compile(r"^(-?\d+)/(\d+)$")
_DECIMAL = re.compile(r"^-?\d*\.\d+$|^-?\d+$")


def normalize_math(answer: str) -> str:
    """The MATH scorer's normalisation of a final answer (the contents of its \\boxed{})."""
    text = answer.replace("\n", "").replace("\\!", "")
    text = text.replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    for spacing in ("\\,", "\\;", "\\:", "\\ ", "\\quad", "~"):
        text = text.replace(spacing, " ")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\circ", "").replace("°", "")
    text = text.replace("\\$", "").replace("$", "")
    text = _remove_units(text)
    text = text.replace("\\%", "").replace("%", "")
    text = text.strip().rstrip(".").strip()
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    # "x = 5" and "k=5" answer with the value.
    parts = text.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        text = parts[1]
    text = _fix_sqrt(text)
    text = text.replace(" ", "")
    text = _fix_fracs(text)
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    text = _trim_decimal(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    slash = _SLASH.match(text)
    if slash:
        text = f"\\frac{{{slash.group(1)}}}{{{slash.group(2)}}}"
    return text


def _remove_units(text: str) -> str:
    """`5\\text{ cm}` is 5: a trailing \\text{...} after a value is a unit; a whole \\text{A} is its text."""
    stripped = text.strip()
    whole = re.fullmatch(r"\\(?:text|mbox|textbf|mathrm)\{([^{}]*)\}", stripped)
    if whole:
        return whole.group(1)
    return _UNIT_TEXT.sub("", text)


def _fix_sqrt(text: str) -> str:
    """\\sqrt3 -> \\sqrt{3}."""
    return re.sub(r"\\sqrt\s*([^{\[\s\\])", r"\\sqrt{\1}", text)


def _fix_fracs(text: str) -> str:
    """\\frac12 -> \\frac{1}{2}, \\frac1{72} -> \\frac{1}{72}, \\frac{a}b -> \\frac{a}{b}."""
    pieces = text.split("\\frac")
    out = pieces[0]
    for piece in pieces[1:]:
        out += "\\frac"
        if piece.startswith("{"):
            close = matching_brace(piece, 0)
            if close is None:
                return text
            numerator, rest = piece[: close + 1], piece[close + 1 :]
        elif piece:
            numerator, rest = "{" + piece[0] + "}", piece[1:]
        else:
            return text
        if rest.startswith("{"):
            out += numerator + rest
        elif rest:
            out += numerator + "{" + rest[0] + "}" + rest[1:]
        else:
            return text
    return out


def _trim_decimal(text: str) -> str:
    """6.0 -> 6, 2.50 -> 2.5: the same number written with zeros."""
    if _DECIMAL.match(text) and "." in text:
        text = text.rstrip("0").rstrip(".")
        if text in ("", "-"):
            text = "0"
    return text


def math_equal(prediction: str | None, reference: str) -> tuple[bool, str | None]:
    """MATH: the prediction's last \\boxed{} (or the prediction itself when it has none) against the
    reference answer: normalised strings first, then sympy's value of both."""
    if prediction is None:
        return False, None
    boxed = last_boxed(prediction)
    found = boxed if boxed is not None else prediction.strip()
    expected = last_boxed(reference) or reference
    left, right = normalize_math(found), normalize_math(expected)
    if not left:
        return False, found
    if left == right:
        return True, found
    return _same_value(left, right), found


# Bracketed lists compare element by element, brackets included: (1,2] is not [1,2].
_BRACKETS = {"(": ")", "[": "]", "\\{": "\\}"}


def _same_value(left: str, right: str) -> bool:
    for opening, closing in _BRACKETS.items():
        if left.startswith(opening) and left.endswith(closing):
            if not (right.startswith(opening) or right.startswith(("(", "["))):
                return False
            break
    left_parts, right_parts = _elements(left), _elements(right)
    if left_parts is None or right_parts is None:
        return sympy_equal(left, right)
    if left_parts[0] != right_parts[0] or len(left_parts[1]) != len(right_parts[1]):
        return False
    return all(a == b or sympy_equal(a, b) for a, b in zip(left_parts[1], right_parts[1]))


def _elements(text: str) -> tuple[str, list[str]] | None:
    """(brackets, elements) of `(a,b)`, `[a,b)`, `\\{a,b\\}` or a bare `a,b`; None for one value."""
    brackets = ""
    inner = text
    for opening in ("\\{", "(", "["):
        if text.startswith(opening):
            for closing in ("\\}", ")", "]"):
                if text.endswith(closing) and len(text) > len(opening) + len(closing):
                    candidate = text[len(opening) : -len(closing)]
                    if _top_level_commas(candidate):
                        brackets, inner = opening + closing, candidate
                    break
            break
    parts = _split_top_level(inner)
    if len(parts) < 2:
        return None
    return brackets, parts


def _top_level_commas(text: str) -> bool:
    return len(_split_top_level(text)) > 1


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


# ---------------------------------------------------------------- code (MBPP)


def code_program(candidate: str, item, challenge: bool = False) -> str:
    """An MBPP item as one program, as a person would run it by hand: test imports, the candidate,
    the setup code, the asserts. (The sandbox runs these parts in two jails instead: `code_job`.)"""
    tests = list(item.tests) + (list(item.challenge_tests) if challenge else [])
    parts = ["\n".join(item.imports), candidate, item.setup, "\n".join(tests)]
    return "\n\n".join(part for part in parts if part.strip()) + "\n"


def code_job(candidate: str, item, challenge: bool = False):
    """What the sandbox judges for an MBPP item: the candidate beside the test imports and setup
    code in its jail, the asserts in the tests' jail. The reference code is never part of it."""
    from bamasc.evaluate.sandbox import Job

    tests = list(item.tests) + (list(item.challenge_tests) if challenge else [])
    return Job(candidate, tests, item.imports, item.setup)


def score_code(pairs, limits=None, concurrency: int = 2, isolation: str = "namespaces",
               extract=extract_code) -> list[Verdict]:
    """Judge each (item, prediction) in the sandbox, the candidate taken from the prediction by `extract`;
    correct only when the tests' process says every assert passed. Raises SandboxError, before running
    anything, where the sandbox cannot run here."""
    from bamasc.evaluate.sandbox import Limits, check_isolation, run_many

    limits = limits or Limits(wall_time=CODE_TIMEOUT)
    pairs = list(pairs)
    jobs, indexes = [], []
    verdicts: list[Verdict | None] = [None] * len(pairs)
    for index, (item, prediction) in enumerate(pairs):
        if prediction is None or not prediction.strip():
            verdicts[index] = Verdict(item.id, False, prediction, item.answer, "no prediction")
            continue
        jobs.append(code_job(extract(prediction), item))
        indexes.append(index)
    if jobs:
        check_isolation(isolation)
    for index, job, outcome in zip(indexes, jobs, run_many(jobs, limits, concurrency, isolation)):
        item, _ = pairs[index]
        detail = outcome.verdict if outcome.passed else f"{outcome.verdict}: {outcome.detail}"
        verdicts[index] = Verdict(item.id, outcome.passed, job.candidate, item.answer, detail)
    return verdicts


# ---------------------------------------------------------------- every kind


SCORERS = ("gsm8k", "math", "math-strict", "mbpp", "mbpp-reference")
# The scorers that read a kind besides its own: MATH strictly (Hendrycks' check), and MBPP with the
# BAMAS reference kit's extraction (the first block that parses, code salvaged from prose).
OTHER_SCORERS = {("math", "math-strict"), ("mbpp", "mbpp-reference")}
# Scorers that extract from the model's whole output rather than from the system's extracted answer.
READS_OUTPUT = frozenset({"mbpp-reference"})


def default_scorer(kind: str) -> str:
    """The scorer `reproduce` uses for a kind: MATH strictly, as the BAMAS paper scores it; the kind's own otherwise."""
    return "math-strict" if kind == "math" else kind


def scorer_for(kind: str, scorer: str | None) -> str:
    """The scorer of a `kind` dataset: its own, unless `scorer` names another that reads that kind."""
    if scorer in (None, kind) or (kind, scorer) in OTHER_SCORERS:
        return scorer or kind
    raise ValueError(f"the scorer {scorer!r} does not read {kind} datasets")


def score_items(kind: str, pairs, limits=None, concurrency=2, isolation="namespaces", scorer=None) -> list[Verdict]:
    """Verdicts for (item, prediction) pairs of a `kind` dataset, in order; a None prediction is wrong."""
    scorer = scorer_for(kind, scorer)
    if kind == "mbpp":
        extract = extract_code_first if scorer == "mbpp-reference" else extract_code
        return score_code(pairs, limits, concurrency, isolation, extract)
    compare = {"gsm8k": number_equal, "math": math_equal, "math-strict": strict_math_equal}[scorer]
    verdicts = []
    for item, prediction in pairs:
        if prediction is None:
            verdicts.append(Verdict(item.id, False, None, item.answer, "no prediction"))
            continue
        correct, found = compare(prediction, item.answer)
        detail = "" if correct else ("no answer found" if found is None else f"{found} is not {item.answer}")
        verdicts.append(Verdict(item.id, correct, found, item.answer, detail))
    return verdicts


def score(answer_kind: str, output: str | None, row: dict, scorer: str | None = None) -> bool:
    """Is `output` right for one dataset `row`? The system's `answer` kind picks the dataset and its scorer
    (number: GSM8K, boxed: MATH, code: MBPP in the sandbox), `scorer` another for it; `collect` calls this."""
    from bamasc.evaluate.datasets import item_from_row

    kind = answer_kind_dataset(answer_kind)
    if kind is None:  # text answers: the whole output against the row's `answer`, spacing ignored
        reference = row.get("answer")
        if not isinstance(reference, str):
            raise ValueError("a text answer is scored against the row's 'answer' field, which this row lacks")
        return output is not None and " ".join(output.split()) == " ".join(reference.split())
    return score_items(kind, [(item_from_row(kind, row), output)], scorer=scorer)[0].correct


def answer_kind_dataset(answer: str) -> str | None:
    """The dataset kind a system's `answer` kind scores as: number -> gsm8k, code -> mbpp, boxed -> math."""
    return {"number": "gsm8k", "code": "mbpp", "boxed": "math"}.get(answer)
