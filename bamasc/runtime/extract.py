"""Reading model outputs: final answers by kind, critic verdicts, planner step cards."""

from __future__ import annotations

import json
import re

_HASHES = re.compile(r"####\s*([^\n]*)")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_CONCLUSION = re.compile(r"CONCLUSION\s*:\s*(CORRECT|INCORRECT|APPROVED|REJECTED)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    opening = text.index("{", start)
    closing = matching_brace(text, opening)
    return None if closing is None else text[opening + 1 : closing].strip()


def matching_brace(text: str, start: int) -> int | None:
    """The index of the `}` that closes the `{` at `start` (nested braces counted), or None."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _plain_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "")
    if "." in value and "e" not in value.lower():
        value = value.rstrip("0").rstrip(".") or "0"
    return value


def extract_number(text: str) -> str | None:
    """GSM8K style: `#### n`, else the last `\\boxed{}`, else the last number in the text."""
    for candidate in (_last(_HASHES.findall(text)), last_boxed(text)):
        if candidate is not None:
            number = _plain_number(candidate)
            if number is not None:
                return number
    return _plain_number(text)


def extract_code(text: str) -> str:
    """The last fenced block (preferring ```python), else the whole text."""
    blocks = _FENCE.findall(text)
    if not blocks:
        return text.strip()
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    return (python or [body for _, body in blocks])[-1].strip()


def extract_code_first(text: str) -> str:
    """MBPP code as the BAMAS reference kit takes it: the whole text when it parses as Python, else the
    first fenced block that parses, else the imports and `def` blocks salvaged from prose when they
    parse together, else the whole text. (`extract_code` takes the last block instead.)"""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if _parses(text):
        return text
    for _, body in _FENCE.findall(text):
        if _parses(body.strip()):
            return body.strip()
    salvaged = _salvage_functions(text)
    return salvaged if salvaged is not None and _parses(salvaged) else text


def _parses(code: str) -> bool:
    import ast

    try:
        ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte
        return False
    return True


def _salvage_functions(text: str) -> str | None:
    """Import lines, and every line from the first `def` on up to the first unindented line that is
    neither an import nor another `def`; None without a `def`."""
    imports: list[str] = []
    functions: list[str] = []
    for line in text.split("\n"):
        bare = line.strip()
        if bare.startswith("import ") or (bare.startswith("from ") and " import " in bare):
            imports.append(bare)
        elif bare.startswith("def "):
            functions.append(line)
        elif functions:
            if bare and not line.startswith((" ", "\t")):
                break
            functions.append(line)
    if not functions:
        return None
    return "\n".join(imports + [""] + functions if imports else functions)


def extract_answer(kind: str, text: str | None) -> str | None:
    if text is None:
        return None
    if kind == "number":
        return extract_number(text)
    if kind == "code":
        return extract_code(text)
    if kind == "boxed":
        return last_boxed(text)
    if kind == "json":
        return json_answer(text)
    return text.strip()


def json_answer(text: str) -> str | None:
    """`answer = json`: the reply's JSON value (a structured output's object), written compact; None when the
    reply is not JSON."""
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python reads
        return None


def approved(verdict: str) -> bool:
    """A critic approves with `CONCLUSION: CORRECT` (or APPROVED); anything else, unparseable
    verdicts included, counts as a rejection, so an unclear critic never ends a loop early."""
    found = _CONCLUSION.findall(verdict)
    return bool(found) and found[-1].upper() in ("CORRECT", "APPROVED")


class MalformedPlan(ValueError):
    """The planner's output is not a JSON list of step cards."""


def _card_list(text: str) -> list:
    """The planner's JSON list of step cards, maybe fenced."""
    candidate = text
    fences = _FENCE.findall(text)
    if fences:
        candidate = fences[-1][1]
    start, end = candidate.find("["), candidate.rfind("]")
    if start < 0 or end < start:
        raise MalformedPlan("the plan has no JSON list of step cards")
    try:
        cards = json.loads(candidate[start : end + 1])
    except json.JSONDecodeError as problem:
        raise MalformedPlan(f"the plan's step list is not valid JSON: {problem.msg}") from None
    if not isinstance(cards, list):
        raise MalformedPlan("the plan's step cards are not a JSON list")
    return cards


def step_cards(text: str, max_steps: int) -> list[str]:
    """The planner's steps: a JSON list of {"step": "..."} objects or strings, maybe fenced."""
    steps = []
    for card in _card_list(text):
        if isinstance(card, str) and card.strip():
            steps.append(card.strip())
        elif isinstance(card, dict) and isinstance(card.get("step"), str) and card["step"].strip():
            steps.append(card["step"].strip())
        else:
            raise MalformedPlan(f"a step card must be a string or {{\"step\": \"...\"}}, not {json.dumps(card)[:60]}")
    if not steps:
        raise MalformedPlan("the plan has no steps")
    # Steps past max_steps were never budgeted: they are dropped, not run.
    return steps[:max_steps]


def card_seat(text: str, step: int, seats: tuple[str, ...]) -> str:
    """The slot step `step` (from 0) of a dynamic plan runs on: its card's "by", else the first seat.
    A card naming a seat the plan does not have is a MalformedPlan that quotes the card."""
    card = _card_list(text)[step]
    by = card.get("by") if isinstance(card, dict) else None
    if by is None:
        return seats[0]
    if by not in seats:
        raise MalformedPlan(f"step {step + 1} is given to {json.dumps(by)}, which is none of the seats ({', '.join(seats)}): {_quote(card)}")
    return by


def card_reads(text: str, step: int) -> tuple[int, ...]:
    """The earlier steps (from 0) step `step` of a dynamic plan reads: its card's "reads" (numbered
    from 1, duplicates dropped), else the step before it. A step that does not exist yet is a MalformedPlan."""
    card = _card_list(text)[step]
    reads = card.get("reads") if isinstance(card, dict) else None
    if reads is None:
        return (step - 1,) if step else ()
    if not isinstance(reads, list) or any(type(j) is not int or not 1 <= j <= step for j in reads):
        allowed = f"steps 1 to {step}" if step else "no step (it is the first)"
        raise MalformedPlan(f"step {step + 1} reads {json.dumps(reads)[:60]}, but it may read {allowed}: {_quote(card)}")
    return tuple(sorted({j - 1 for j in reads}))


def card_choice(decision, text: str):
    """What a plan's output answers a walker decision (ir/walk.py) with: its step cards for
    "steps", the seat of step `limit` for "seat", the steps it reads for "reads"."""
    if decision.kind == "steps":
        return step_cards(text, decision.limit)
    if decision.kind == "seat":
        return card_seat(text, decision.limit, decision.among)
    return card_reads(text, decision.limit)


def _quote(card) -> str:
    text = json.dumps(card, ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


def _last(items: list[str]) -> str | None:
    return items[-1] if items else None


def majority(answer: str, outputs: list):
    """The output whose extracted answer most outputs share (each has `text` and `tier`); a tie
    goes to the answer with the stronger (lower) tier, and within the group to its strongest output."""
    groups: dict[str | None, list] = {}
    for output in outputs:
        groups.setdefault(extract_answer(answer, output.text), []).append(output)
    best = max(groups.values(), key=lambda group: (len(group), -min(o.tier for o in group)))
    return min(best, key=lambda o: o.tier)
