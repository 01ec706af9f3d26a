"""Parses one `.bam` source into a Module, turning parse failures into named diagnostics."""

from __future__ import annotations

from bamasc.diagnostics import Diagnostic, Note, error
from bamasc.source import SourceFile, Span
from bamasc.syntax import ast
from bamasc.syntax.lalr import END, ParseFailure, Token, load_tables, parse
from bamasc.syntax.transform import Transformer

TOP_KEYWORDS = ("import", "model", "role", "topology", "system")
_CLOSERS = {"{": "}", "[": "]", "(": ")"}

# How the expected-token list reads to a user.
_DESCRIPTIONS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "LONG_STRING": "a string",
    "UNIT": "a unit",
    "COMPARE": "a comparison",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*'",
    END: "end of file",
}


def parse_source(source: SourceFile) -> tuple[ast.Module | None, list[Diagnostic]]:
    """The module, or None and one syntax diagnostic."""
    try:
        tree = parse(source.text)
    except ParseFailure as failure:
        return None, [_diagnose(source, failure)]
    return Transformer(source.path).module(tree), []


def _diagnose(source: SourceFile, failure: ParseFailure) -> Diagnostic:
    opener = _innermost_open(failure.stack)
    token = failure.token
    if failure.kind == "char":
        token = _token_elsewhere(source, failure.offset)
        if token is None:
            return _bad_character(source, failure)
    span = _token_span(source, token)
    if token.type == END and opener is not None:
        return _unclosed(source, opener, failure.stack, span)
    if opener is not None and opener.value == "{" and _starts_declaration(source, failure.stack, token):
        keyword = token if token.value in TOP_KEYWORDS else failure.stack[-1]
        return _unclosed(source, opener, failure.stack, _token_span(source, keyword))
    return error(
        "BAM001",
        f"unexpected {_describe_token(token)}{_context(opener, failure.stack)}",
        span,
        hint=f"expected {_expected_text(failure.expected)}",
    )


def _token_elsewhere(source: SourceFile, offset: int) -> Token | None:
    """The token some other parser state would lex at `offset` (it is just misplaced here)."""
    text = source.text
    # An unterminated string matches no terminal, so it falls through to None.
    for term in load_tables().terminals:
        end = term.match_end(text, offset)
        if end > offset:
            line, col = _line_col(text, offset)
            value = text[offset:end]
            return Token(term.name, value, offset, line, col, line, col + len(value))
    return None


def _line_col(text: str, offset: int) -> tuple[int, int]:
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _bad_character(source: SourceFile, failure: ParseFailure) -> Diagnostic:
    offset = failure.offset
    text = source.text
    line, col = _line_col(text, offset)
    char = text[offset]
    if char == '"':
        closing = '"""' if text.startswith('"""', offset) else '"'
        where = "file" if closing == '"""' else "line"
        return error(
            "BAM003",
            "unterminated string",
            Span(source.path, line, col, line, col + len(closing)),
            hint=f"close the string with {closing} before the end of the {where}",
        )
    span = Span(source.path, line, col, line, col + 1)
    if char == "\ufffd":
        return error("BAM005", "invalid UTF-8 byte", span, hint="save the file as UTF-8")
    return error("BAM004", f"unexpected character {char!r}", span, hint=f"expected {_expected_text(failure.expected)}")


def _unclosed(source: SourceFile, opener: Token, stack: list, at: Span) -> Diagnostic:
    closer = _CLOSERS[opener.value]
    what = _construct(opener, stack)
    return error(
        "BAM002",
        f"missing '{closer}' to close {what}",
        at,
        Note(f"'{opener.value}' opened here", _token_span(source, opener)),
        hint=f"add '{closer}' before this point",
    )


def _starts_declaration(source: SourceFile, stack: list, token: Token) -> bool:
    """Does the failing token (or the one just before it) begin a top-level declaration?"""
    candidates = [token]
    if stack and isinstance(stack[-1], Token):
        candidates.append(stack[-1])
    for candidate in candidates:
        if candidate.type != END and candidate.value in TOP_KEYWORDS:
            before = source.text[source.text.rfind("\n", 0, candidate.offset) + 1 : candidate.offset]
            if not before.strip():
                return True
    return False


def _innermost_open(stack: list) -> Token | None:
    """The last bracket on the parse stack that no reduction has closed yet."""
    closed = 0
    for item in reversed(stack):
        if not isinstance(item, Token) or item.type in ("STRING", "LONG_STRING"):
            continue
        if item.value in _CLOSERS.values():
            closed += 1
        elif item.value in _CLOSERS:
            if not closed:
                return item
            closed -= 1
    return None


def _construct(opener: Token, stack: list) -> str:
    """'model block 'x'', 'price block', 'flow block', 'list', ... for the bracket `opener`."""
    index = next(i for i, item in enumerate(stack) if item is opener)
    before = [item for item in stack[:index] if isinstance(item, Token)][-2:]
    if opener.value == "{":
        if len(before) == 2 and before[0].value in ("model", "role", "topology", "system") and before[0].type != "NAME":
            return f"{before[0].value} block '{before[1].value}'"
        if before and before[-1].type in ("FLOW", "NAME"):
            return f"{before[-1].value} block"
        return "block"
    if opener.value == "[":
        return "slot range" if before and before[-1].type == "NAME" and len(before) == 2 and before[0].type == "COLON" else "list"
    return "argument list"


def _context(opener: Token | None, stack: list) -> str:
    if opener is None:
        return ""
    return f" in {_construct(opener, stack)}"


def _describe_token(token: Token) -> str:
    if token.type == END:
        return "end of file"
    if token.type in ("STRING", "LONG_STRING"):
        return "string"
    if token.type == "NUMBER":
        return f"number {token.value}"
    if token.type == "NAME":
        return f"name '{token.value}'"
    return f"'{token.value}'"


def _expected_text(expected: list[str]) -> str:
    literals = load_tables().literals
    words = []
    for name in expected:
        word = _DESCRIPTIONS.get(name) or (f"'{literals[name]}'" if literals.get(name) else name)
        if word not in words:
            words.append(word)
    if len(words) > 6:
        words = words[:6] + ["..."]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _token_span(source: SourceFile, token: Token) -> Span:
    end_col = token.end_col if token.end_col > token.col or token.end_line > token.line else token.col + 1
    return Span(source.path, token.line, token.col, token.end_line, end_col)
