"""Property test: random valid programs, with comments and whitespace anywhere, format to a fixed point that means the same.

A program is drawn as a list of tokens (every construct of the grammar: imports,
models and roles with nested blocks and triple-quoted prompts, topologies with
slots, rows and flows in any order, systems), and joined with random runs of
spaces, tabs, newlines and blank lines, each gap possibly holding `//` or `#`
comments. The formatted text must parse to the same AST (spans aside), keep
every comment in order, and format to itself.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bamasc.fmt import format_source
from tests.fmt.roundtrip import check_round_trip

NAMES = st.sampled_from(["a", "b", "executor", "critic", "x1", "_y", "price", "Tier2"])
NUMBERS = st.sampled_from(["0", "1", "384", "0.27", "16_384", "4e2", "1.5E-3", "-1", "2_000.000_1"])
TEXT = st.text(st.sampled_from(list("ab #/\"{}\\ µ$*")), max_size=12)


@st.composite
def strings(draw) -> str:
    if draw(st.booleans()):
        body = draw(TEXT).replace("\\", "\\\\").replace('"', '\\"')
        return f'"{body}"'
    # A prompt: lines at any indentation, placeholders, comment-like text and trailing blanks.
    lines = draw(st.lists(st.tuples(st.sampled_from(["", " ", "    ", "\t", "      "]), TEXT,
                                    st.sampled_from(["", "{{task}}", "{{previous?}}", " // no", " # no", "  "])),
                          max_size=4))
    body = "\n".join(indent + text.replace('"', "'") + tail for indent, text, tail in lines)
    first = draw(st.sampled_from(["", "\n", " "]))
    last = draw(st.sampled_from(["", "\n", "\n    ", "\n  \t"]))
    return f'"""{first}{body}{last}"""'


@st.composite
def values(draw, depth: int = 0) -> list[str]:
    kind = draw(st.sampled_from(["number", "money", "string", "ident", "call"] + (["list"] * 2 if depth < 2 else [])))
    if kind == "number":
        return [draw(NUMBERS)] + draw(st.sampled_from([[], ["µ$"], ["$/Mtok"]]))
    if kind == "money":
        return ["$", draw(NUMBERS).lstrip("-")]
    if kind == "string":
        return [draw(strings())]
    if kind == "ident":
        return [draw(NAMES)]
    if kind == "call":
        args = draw(st.lists(st.sampled_from(['"KEY"', '"p.msgpack"', "1"]), max_size=2))
        return [draw(st.sampled_from(["env", "policy"])), "(", *_commas([[arg] for arg in args]), ")"]
    items = draw(st.lists(values(depth + 1), max_size=3))
    trailing = [","] if items and draw(st.booleans()) else []
    return ["[", *_commas(items), *trailing, "]"]


def _commas(items: list[list[str]]) -> list[str]:
    out: list[str] = []
    for index, item in enumerate(items):
        out += ([","] if index else []) + item
    return out


@st.composite
def attrs(draw, depth: int = 0) -> list[str]:
    out: list[str] = []
    for _ in range(draw(st.integers(0, 4))):
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            out += [draw(NAMES), "{", *draw(attrs(depth + 1)), "}"]
        else:
            out += [draw(NAMES), "=", *draw(values())]
    return out


@st.composite
def count_exprs(draw, depth: int = 0) -> tuple[list[str], int]:
    """Tokens and precedence (0 sum, 1 product, 2 atom); parentheses where needed, and some that are not."""
    kind = draw(st.sampled_from(["const", "count", "count"] + (["add", "mul"] if depth < 3 else [])))
    if kind == "const":
        tokens, level = [draw(st.sampled_from(["1", "2", "3_0"]))], 2
    elif kind == "count":
        tier = [",", "tier", "=", draw(st.sampled_from(["1", "2"]))] if draw(st.booleans()) else []
        tokens, level = ["count", "(", draw(NAMES), *tier, ")"], 2
    else:
        op = draw(st.sampled_from(["+", "-"] if kind == "add" else ["*"]))
        level = 0 if kind == "add" else 1
        left, left_level = draw(count_exprs(depth + 1))
        right, right_level = draw(count_exprs(depth + 1))
        if left_level < level:
            left = ["(", *left, ")"]
        if right_level <= level:  # left-associative: an equal level on the right needs them
            right = ["(", *right, ")"]
        tokens = [*left, op, *right]
    if draw(st.integers(0, 5)) == 0:
        tokens, level = ["(", *tokens, ")"], 2
    return tokens, level


@st.composite
def flow_exprs(draw) -> list[str]:
    call = [draw(NAMES), "(", *_commas([[name] for name in draw(st.lists(NAMES, max_size=3))]), ")"]
    kind = draw(st.sampled_from(["call", "ref", "chain", "parallel", "vote", "refine", "plan"]))
    if kind == "call":
        return call
    if kind == "ref":
        return [draw(NAMES)]
    if kind in ("chain", "parallel"):
        return [kind, *call]
    if kind == "vote":
        return ["vote", "(", draw(NAMES), ")"]
    if kind == "refine":
        return ["refine", *call, "with", draw(NAMES), "until", "approved"]
    review = ["review", draw(NAMES)] if draw(st.booleans()) else []
    return ["plan", *call, "using", draw(NAMES), *review, "max_steps", draw(st.sampled_from(["1", "4"]))]


@st.composite
def topology_items(draw) -> list[str]:
    out: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["slot", "slot", "require", "flow"]))
        if kind == "slot":
            out += ["slot", draw(NAMES), ":", draw(NAMES), "[", draw(NUMBERS.filter(lambda n: n.isdigit())), "..",
                    draw(st.sampled_from(["1", "5"])), "]"]
        elif kind == "require":
            left, _ = draw(count_exprs())
            right, _ = draw(count_exprs())
            out += ["require", *left, draw(st.sampled_from(["<=", ">=", "==", "<", ">"])), *right]
        else:
            out += ["flow", "{"]
            for _ in range(draw(st.integers(0, 3))):
                if draw(st.booleans()):
                    out += ["answer", *draw(flow_exprs())]
                else:
                    out += [draw(NAMES), "=", *draw(flow_exprs())]
            out += ["}"]
    return out


@st.composite
def programs(draw) -> list[str]:
    out: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["import", "model", "role", "topology", "system"]))
        if kind == "import":
            out += ["import", *draw(st.lists(st.sampled_from(['"std/linear"', '"pool.bam"', '"../a b.bam"']),
                                              min_size=1, max_size=3))]
        elif kind == "topology":
            out += ["topology", draw(NAMES), "{", *draw(topology_items()), "}"]
        else:
            body = draw(attrs())
            if kind == "role" and draw(st.booleans()):
                body += ["prompt", "=", draw(strings())]
            out += [kind, draw(NAMES), "{", *body, "}"]
    return out


COMMENT = st.builds(lambda mark, text: mark + text, st.sampled_from(["//", "#", "// ", "#  "]),
                    st.text(st.sampled_from(list('ab "#/{}*µ$\t ')), max_size=10))
GAP = st.sampled_from([" ", "  ", "\t", "\n", "\n\n", "\n\n\n", " \n  ", "\r\n"])


@st.composite
def sources(draw) -> str:
    tokens = draw(programs())
    pieces = [draw(st.sampled_from(["", "\n", "  "]))]
    for token in tokens:
        pieces.append(token)
        gap = draw(GAP)
        if draw(st.integers(0, 4)) == 0:
            for comment in draw(st.lists(COMMENT, min_size=1, max_size=2)):
                gap += comment + draw(st.sampled_from(["\n", "\n\n", "\n  "]))
        pieces.append(gap)
    if draw(st.booleans()):
        pieces.append(draw(COMMENT))
    return "".join(pieces)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sources())
def test_random_programs_format_to_a_fixed_point_that_means_the_same(text):
    check_round_trip(text, format_source(text))
