"""The table-driven parser against Lark itself, the shipped tables, and the AST records."""

from __future__ import annotations

import pickle

import pytest

from bamasc.records import FrozenRecordError
from bamasc.source import SourceFile
from bamasc.syntax import ast
from bamasc.syntax._tables import TABLES
from bamasc.syntax.lalr import Node, Token, parse
from bamasc.syntax.parser import parse_source
from bamasc.syntax.tables import build_lark, build_tables
from bamasc.syntax.transform import Transformer, dedent_block
from tests.conftest import EXAMPLES, STDLIB

EXTRA_SOURCES = {
    "every-value": '''
import "a.bam" "b.bam"
model m {
  provider = fake  name = "x"  price { input = 0.27 $/Mtok output = 1_000.5 }  tier = 2
  quality { Executor = 0.9 Critic = 1e-1 }  api_key = env("K")  l = [a, "b", 3, $0.5, [1,],]
}
system s { budget = 1625 µ$ budgets = [$0.001, 2000] select = policy("p.msgpack") models = [m] }
''',
    "every-combinator": """
topology t {
  slot p : P [1..1]  slot e : E [0..3]  slot c : C [0..2]
  require 2 * count(e) - (count(c, tier = 1) + 1) >= count(c) * 3
  require count(e) < 3
  flow {
    a = chain e(task)
    b = parallel e(task, a)
    v = vote(b)
    r = refine e(task, v) with c until approved
    s = plan p(task) using e max_steps 2
    z = plan p(task, r) using e review c max_steps 4
    answer z
  }
}
""",
    "keys-and-teams": """
team cx { budgets = [window($50, "1d"), window(1_000 µ$, "1mo"),] }
key support_bot {
  secret = env("SUPPORT_BOT_KEY")  team = cx  scope_budget = $0.05
  budgets = window($20, "1d")  models = [mini]  on_exhausted = answer
}
team team { }
key key { team = team }
""",
    "conversations": """
topology t {
  slot a : A [1..2]  slot b : B [0..1]
  flow {
    x = converse a(task), b(task, x0) until b approves max_rounds 3
    y = converse a(task, x) until "DONE" max_rounds 1
    z = converse b() max_rounds 2
    w = converse a(task), b(task) until b approves
    answer converse a(task, y), b(z) until "a \\"quoted\\" marker"
  }
}
""",
}


def _from_lark(item):
    """A Lark tree converted to the table-driven parser's node shape."""
    from lark import Tree

    if isinstance(item, Tree):
        meta = None if item.meta.empty else (item.meta.line, item.meta.column, item.meta.end_line, item.meta.end_column)
        return Node(item.data, [_from_lark(c) for c in item.children], meta)
    return Token(item.type, str(item), item.start_pos, item.line, item.column, item.end_line, item.end_column)


@pytest.fixture(scope="module")
def lark_parser():
    return build_lark()


def _sources():
    for path in EXAMPLES + STDLIB:
        with open(path, encoding="utf-8") as handle:
            yield path, handle.read()
    yield from EXTRA_SOURCES.items()


@pytest.mark.parametrize("name,text", list(_sources()), ids=lambda v: str(v).rsplit("/", 1)[-1][:30])
def test_table_parser_builds_the_same_ast_as_lark(lark_parser, name, text):
    ours = Transformer(name).module(parse(text))
    reference = Transformer(name).module(_from_lark(lark_parser.parse(text)))
    assert ours == reference
    assert ours.declarations or ours.imports


def test_shipped_tables_match_the_grammar():
    shipped = dict(TABLES)
    fresh = build_tables()
    fresh.pop("lark_version")
    shipped.pop("lark_version")
    assert shipped == fresh, "run `python -m bamasc.syntax.tables` after editing grammars/bam.lark"


def test_keywords_are_contextual_and_need_a_word_boundary():
    module, diagnostics = parse_source(SourceFile("k.bam", "system s { answer = number models = [model] }"))
    assert not diagnostics
    assert module.declarations[0].attrs[0].name == "answer"
    _, diagnostics = parse_source(SourceFile("k.bam", "modelx y { }"))
    assert [d.code for d in diagnostics] == ["BAM001"]


def test_spans_point_at_the_source():
    text = 'role R {\n  prompt = "hi {{task}}"\n  max_output = 384\n}\n'
    module, _ = parse_source(SourceFile("r.bam", text))
    role = module.declarations[0]
    assert (role.name_span.line, role.name_span.col, role.name_span.end_col) == (1, 6, 7)
    prompt, cap = role.attrs
    assert (prompt.value.span.line, prompt.value.span.col) == (2, 12)
    assert (cap.value.span.line, cap.value.span.col, cap.value.span.end_col) == (3, 16, 19)
    assert (role.span.line, role.span.end_line, role.span.end_col) == (1, 4, 2)


def test_strings_unescape_and_triple_strings_dedent():
    text = 'role R { system = "a\\"b\\\\c\\n" prompt = """\n    line one\n      indented\n\n    last\n    """ }'
    module, diagnostics = parse_source(SourceFile("s.bam", text))
    assert not diagnostics
    system, prompt = module.declarations[0].attrs
    assert system.value.value == 'a"b\\c\n'
    assert prompt.value.value == "line one\n  indented\n\nlast\n"
    assert dedent_block("\n  x\n  ") == "x\n"


def test_money_and_units():
    module, _ = parse_source(SourceFile("m.bam", "system s { a = $0.001625 b = 1625 µ$ c = 0.27 $/Mtok }"))
    a, b, c = module.declarations[0].attrs
    assert isinstance(a.value, ast.Money) and a.value.micro_usd == pytest.approx(1625)
    assert (b.value.value, b.value.unit) == (1625, "µ$")
    assert (c.value.value, c.value.unit) == (0.27, "$/Mtok")


def test_ast_records_are_frozen_comparable_and_picklable():
    module, _ = parse_source(SourceFile("e.bam", EXTRA_SOURCES["every-value"]))
    decl = module.declarations[0]
    with pytest.raises(FrozenRecordError):
        decl.name = "other"
    assert pickle.loads(pickle.dumps(module)) == module
    assert hash(decl.name_span) == hash(pickle.loads(pickle.dumps(decl.name_span)))
    assert decl != module.declarations[1]


def test_keys_and_teams_are_declarations_of_their_own_kind():
    module, diagnostics = parse_source(SourceFile("k.bam", EXTRA_SOURCES["keys-and-teams"]))
    assert not diagnostics
    assert [type(decl).__name__ for decl in module.declarations] == ["TeamDecl", "KeyDecl", "TeamDecl", "KeyDecl"]
    team, key, _, named_key = module.declarations
    assert [attr.name for attr in key.attrs] == ["secret", "team", "scope_budget", "budgets", "models", "on_exhausted"]
    window = team.attrs[0].value.items[0]
    assert (window.func, window.args[0].micro_usd, window.args[1].value) == ("window", 50_000_000, "1d")
    assert (key.name_span.line, key.name_span.col, key.name_span.end_col) == (3, 5, 16)
    # `key` and `team` are keywords only where a declaration starts: here they are names.
    assert (named_key.name, named_key.attrs[0].name, named_key.attrs[0].value.name) == ("key", "team", "team")
    # A key and a team with one name are still two different nodes.
    assert ast.KeyDecl("x", (), key.span, key.name_span) != ast.TeamDecl("x", (), key.span, key.name_span)
