"""Completion: what may be written at the cursor, found from the text before it (which need not parse)."""

from __future__ import annotations

import re

from bamasc.check.keys import KEY_ATTRIBUTES, TEAM_ATTRIBUTES
from bamasc.check.models import MODEL_ATTRIBUTES
from bamasc.check.prompts import BUILTIN_PLACEHOLDERS
from bamasc.check.roles import ROLE_ATTRIBUTES
from bamasc.check.systems import REWARD_ATTRIBUTES, SYSTEM_ATTRIBUTES
from bamasc.check.tools import TOOL_ATTRIBUTES
from bamasc.check.topologies import FLOW_INPUTS
from bamasc.combinators import combinator_of
from bamasc.program import ANSWER_KINDS, BUDGET_CHECKS, KEY_ON_EXHAUSTED, OBJECTIVES, ON_EXHAUSTED, READS, SELECTIONS
from bamasc.provider_registry import names as provider_names
from bamasc.records import record
from bamasc.syntax import ast
from bamasc.syntax.parser import TOP_KEYWORDS

DECLARATIONS = ("model", "role", "topology", "system", "tool", "key", "team")
# The words that start an item of a topology and the flow combinators (tests check each is a keyword of the grammar).
TOPOLOGY_ITEMS = ("slot", "require", "flow")
COMBINATORS = ("chain", "parallel", "vote", "refine", "plan", "converse", "route", "reference")
# What `reference` may precede (docs/language.md, "`reference` combinators").
REFERENCED = ("chain", "parallel", "vote", "refine", "plan")
BLOCKS = {"price": ("input", "output"), "reward": REWARD_ATTRIBUTES}
ATTRIBUTES = {"model": MODEL_ATTRIBUTES, "role": ROLE_ATTRIBUTES, "system": SYSTEM_ATTRIBUTES, "tool": TOOL_ATTRIBUTES,
              "key": KEY_ATTRIBUTES, "team": TEAM_ATTRIBUTES}
CHOICES = {
    "reads": READS, "answer": ANSWER_KINDS, "select": SELECTIONS, "on_exhausted": ON_EXHAUSTED,
    "budget_check": BUDGET_CHECKS, "objective": OBJECTIVES,
}
# Where one declaration's attribute of the same name takes other values than CHOICES lists.
OWN_CHOICES = {("key", "on_exhausted"): KEY_ON_EXHAUSTED}
LISTS = {"models": "model", "topologies": "topology", "tools": "tool"}
# Attributes whose value is read from the environment.
SECRETS = {"api_key": "the environment variable that holds the key", "secret": "the environment variable that holds the key's secret"}

_TOKEN = re.compile(
    r'(?P<comment>(?://|\#)[^\n]*)'
    r'|(?P<long>"""[\s\S]*?(?:"""|\Z))'
    r'|(?P<string>"[^"\\\n]*(?:\\.[^"\\\n]*)*(?:"|(?=\n)|\Z))'
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>-?[0-9][0-9_]*(?:\.[0-9_]+)?)"
    r"|(?P<punct>\.\.|[{}\[\]()=:,])"
    r"|(?P<other>\S)"
)


@record
class Item:
    label: str
    kind: str  # keyword | attribute | value | model | role | topology | system | slot | flow | placeholder
    detail: str = ""


class _Frame:
    def __init__(self, kind: str, name: str):
        self.kind = kind  # model | role | system | topology | flow | block
        self.name = name  # the declaration's name, or the block's
        self.tokens: list[tuple[str, str]] = []  # (type, text) since the frame opened
        self.opened: list[str] = []  # the word before each open '(' or '[' in this frame


def completions(text: str, offset: int, analysis=None) -> list[Item]:
    """Items for the cursor at `offset` of `text`; `analysis` (the last good one) gives the declared names."""
    prefix = text[:offset]
    frames = [_Frame("module", "")]
    last = None
    for match in _TOKEN.finditer(prefix):
        kind, value = match.lastgroup, match.group()
        last = (kind, value, match.end())
        frame = frames[-1]
        if value == "{" and kind == "punct":
            frames.append(_opened(frames, frame.tokens))
            continue
        if value == "}" and kind == "punct":
            if len(frames) > 1:
                frames.pop()
            frames[-1].tokens.append(("punct", "}"))
            continue
        if value in "([" and kind == "punct":
            # What the bracket belongs to: `count(`, `vote(`, a slot call, or `models = [`.
            words = [v for _, v in frame.tokens[-2:]]
            frame.opened.append(words[0] if words[-1:] == ["="] and len(words) == 2 else (words or [""])[-1])
        elif value in ")]" and kind == "punct" and frame.opened:
            frame.opened.pop()
        frame.tokens.append((kind, value))
    frame = frames[-1]
    if last and last[2] == len(prefix) and last[0] in ("comment", "long", "string"):
        closed = last[0] == "long" and len(last[1]) >= 6 and last[1].endswith('"""')
        closed = closed or (last[0] == "string" and len(last[1]) >= 2 and last[1].endswith('"'))
        if last[0] == "comment" or closed:
            return []
        return _placeholders(frame, last[1], analysis)
    tokens = list(frame.tokens)
    if tokens and tokens[-1][0] == "word" and last and last[2] == len(prefix):
        tokens.pop()  # the word being typed
    names = _Names(analysis)
    return _items(frame, tokens, names)


def _opened(frames: list[_Frame], tokens) -> _Frame:
    words = [value for kind, value in tokens[-2:]]
    outer = frames[-1]
    if len(words) == 2 and words[0] in DECLARATIONS and outer.kind == "module":
        return _Frame(words[0], words[1])
    if words and words[-1] == "flow" and outer.kind == "topology":
        return _Frame("flow", outer.name)
    return _Frame("block", words[-1] if words else "")


def _items(frame: _Frame, tokens, names) -> list[Item]:
    previous = tokens[-1][1] if tokens else ""
    before = tokens[-2][1] if len(tokens) > 1 else ""
    if frame.kind == "module":
        return [] if previous in DECLARATIONS else _keywords(TOP_KEYWORDS)
    if frame.kind in ATTRIBUTES:
        if frame.opened:
            attribute = frame.opened[-1]
            return names.of(LISTS[attribute]) if attribute in LISTS else []
        if previous == "=":
            return _values(frame.kind, before, names)
        return [Item(name, "attribute", f"{frame.kind} attribute") for name in ATTRIBUTES[frame.kind]]
    if frame.kind == "block":
        if previous == "=":
            return []
        if frame.name == "quality":
            return names.of("role")
        return [Item(name, "attribute", f"{frame.name} attribute") for name in BLOCKS.get(frame.name, ())]
    if frame.kind == "topology":
        if previous == ":" and len(tokens) > 2 and tokens[-3][1] == "slot":
            return names.of("role")
        if frame.opened and frame.opened[-1] == "count":
            return names.slots(frame.name)
        if previous == "slot":
            return []
        return _keywords(TOPOLOGY_ITEMS)
    if frame.kind == "flow":
        if frame.opened:
            if frame.opened[-1] == "vote":
                return names.flows(frame.name)
            return names.flows(frame.name) + [Item(n, "flow", "flow input") for n in FLOW_INPUTS]
        if previous in ("with", "using", "review"):
            return names.slots(frame.name)
        if previous in ("=", "answer"):
            return _keywords(COMBINATORS) + names.slots(frame.name) + names.flows(frame.name)
        if previous == "reference":
            return _keywords(REFERENCED)
        if previous in COMBINATORS:
            return names.slots(frame.name)
        return _keywords(("answer",))
    return []


def _keywords(words) -> list[Item]:
    return [Item(word, "keyword") for word in words]


def _values(declaration: str, attribute: str, names) -> list[Item]:
    own = OWN_CHOICES.get((declaration, attribute), CHOICES.get(attribute))
    choices = provider_names() if attribute == "provider" else own  # providers: as registered now
    if choices is not None:
        return [Item(value, "value", attribute) for value in choices]
    if attribute in LISTS:
        return [Item("[]", "value", f"a list of {attribute}")]
    if (declaration, attribute) == ("key", "team"):
        return names.of("team")
    if attribute in SECRETS:
        return [Item('env("")', "value", SECRETS[attribute])]
    return []


class _Names:
    """Declared names from the last analysis whose document parsed."""

    def __init__(self, analysis):
        self.index = analysis.index if analysis is not None else None
        self.modules = analysis.loaded.modules if analysis is not None else {}

    def of(self, kind: str) -> list[Item]:
        return [Item(name, kind) for name in self.index.declared(kind)] if self.index else []

    def slots(self, topology: str) -> list[Item]:
        return [Item(name, "slot", f"slot of {topology}") for name in self.index.declared("slot", topology)] if self.index else []

    def flows(self, topology: str) -> list[Item]:
        return [Item(name, "flow", f"flow value of {topology}") for name in self.index.declared("flow", topology)] if self.index else []


def _placeholders(frame: _Frame, literal: str, analysis) -> list[Item]:
    """Inside a role's prompt, after an unclosed `{{`: what the role's calls hand it."""
    if frame.kind != "role":
        return []
    opened = literal.rfind("{{")
    if opened < 0 or "}}" in literal[opened:]:
        return []
    attribute = [value for kind, value in frame.tokens[-3:]][:1]
    if attribute and attribute[0] not in ("prompt", "system"):
        return []
    found = [Item(name, "placeholder", "given by the combinator") for name in BUILTIN_PLACEHOLDERS]
    passed = _passed(analysis.loaded.modules if analysis else {}, frame.name)
    found += [Item(name, "placeholder", "passed by a call") for name in passed if name not in BUILTIN_PLACEHOLDERS]
    return found


def _passed(modules: dict, role: str) -> list[str]:
    """Names that calls of this role's slots pass as arguments, in source order."""
    names: list[str] = []
    for module in modules.values():
        for decl in module.declarations:
            if not isinstance(decl, ast.TopologyDecl):
                continue
            slots = {slot.name for slot in decl.slots if slot.role == role}
            for flow in decl.flows:
                for statement in flow.statements:
                    for call in combinator_of(statement.expr).calls(statement.expr):
                        if call.slot in slots:
                            names += [arg.name for arg in call.args if arg.name not in names]
    return names
