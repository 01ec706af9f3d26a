"""Builds the LALR(1) tables for `grammars/bam.lark` with Lark and caches them as JSON.

This is the only module that imports Lark. `python -m bamasc.syntax.tables`
rewrites the shipped cache after a grammar change; a test checks that the
shipped cache matches the grammar.
"""

from __future__ import annotations

import json
import sys

from bamasc.syntax.resources import GRAMMAR_PATH, TABLES_PATH, grammar_checksum


def build_lark():
    """The reference Lark parser for the grammar (positions on, contextual lexer)."""
    from lark import Lark

    with open(GRAMMAR_PATH, encoding="utf-8") as handle:
        grammar = handle.read()
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=False,
    )


def build_tables() -> dict:
    """Extract what the table-driven parser needs from Lark's compiled grammar."""
    import lark

    parser = build_lark()
    table = parser.parser.parser.parser.parse_table
    terminals = sorted(
        parser.terminals,
        # Lark's lexer tries terminals in this order; ours must too.
        key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name),
    )
    rule_index = {rule: i for i, rule in enumerate(parser.rules)}
    rules = []
    for rule in parser.rules:
        rules.append(
            {
                "origin": rule.origin.name,
                "alias": rule.alias,
                "expand1": bool(rule.options.expand1),
                "symbols": [
                    {
                        "name": symbol.name,
                        "term": symbol.is_term,
                        "keep": not (symbol.is_term and symbol.filter_out) or bool(rule.options.keep_all_tokens),
                        "inline": (not symbol.is_term) and symbol.name.startswith("_"),
                    }
                    for symbol in rule.expansion
                ],
            }
        )
    # Lark numbers states in a different order on every run; renumber them in
    # breadth-first order from the start state so the cached file is stable.
    start = table.start_states["start"]
    number = {start: 0}
    queue = [start]
    for state in queue:
        for symbol, (action, arg) in sorted(table.states[state].items()):
            if action.name == "Shift" and arg not in number:
                number[arg] = len(number)
                queue.append(arg)
    states = {}
    for state in queue:
        states[str(number[state])] = {
            symbol: (["s", number[arg]] if action.name == "Shift" else ["r", rule_index[arg]])
            for symbol, (action, arg) in sorted(table.states[state].items())
        }
    return {
        "grammar_crc32": grammar_checksum(),
        "lark_version": lark.__version__,
        "terminals": [
            {
                "name": t.name,
                "regex": t.pattern.to_regexp(),
                "literal": t.pattern.value if t.pattern.type == "str" else None,
                "priority": t.priority,
            }
            for t in terminals
        ],
        "ignore": sorted(parser.ignore_tokens),
        "rules": rules,
        "states": states,
        "start_state": number[start],
        "end_state": number[table.end_states["start"]],
    }


def write_tables(path: str = TABLES_PATH) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(build_tables(), separators=(",", ":"), sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write_tables(sys.argv[1] if len(sys.argv) > 1 else TABLES_PATH)}")
