"""Diagnostics: stable codes, severities, spans, and the text/json/sarif/github renderers."""

from __future__ import annotations

from bamasc.version import __version__
from bamasc.codes import CODES
from bamasc.records import record
from bamasc.secrets import mask_keys, mask_span
from bamasc.source import SourceFile, Span, excerpt_window

TYPE_CHECKING = False  # without importing typing, which lint does not otherwise need
if TYPE_CHECKING:
    from collections.abc import Iterable

ERROR = "error"
WARNING = "warning"
# CODES (bamasc/codes.py): every code the tool can emit, its stable kebab-case name and its description.


@record
class Note:
    """Extra context for a diagnostic, optionally pointing at another place."""

    message: str
    span: Span | None = None


@record
class Diagnostic:
    """One problem found in a source file."""

    code: str
    severity: str
    message: str
    span: Span | None
    notes: tuple[Note, ...] = ()
    hint: str | None = None
    # Places that hold a secret: every source excerpt masks them, whichever diagnostic shows the line.
    redact: tuple[Span, ...] = ()

    @property
    def name(self) -> str:
        return CODES[self.code][0]

    def sort_key(self) -> tuple:
        span = self.span
        return (span.file, span.line, span.col, self.code) if span else ("", 0, 0, self.code)


def error(
    code: str, message: str, span: Span | None, *notes: Note, hint: str | None = None, redact: tuple[Span, ...] = ()
) -> Diagnostic:
    return _made(code, ERROR, message, span, notes, hint, redact)


def warning(code: str, message: str, span: Span | None, *notes: Note, hint: str | None = None) -> Diagnostic:
    return _made(code, WARNING, message, span, notes, hint, ())


def _made(code, severity, message, span, notes, hint, redact) -> Diagnostic:
    # Keys are masked once, where a diagnostic is made, so no output format can
    # print one; source excerpts are masked where they are cut (`_masked_line`).
    notes = tuple(Note(mask_keys(note.message), note.span) for note in notes)
    return Diagnostic(code, severity, mask_keys(message), span, notes, mask_keys(hint) if hint else hint, redact)


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity == ERROR for d in diagnostics)


class Sources:
    """The source files diagnostics point into, for printing excerpts."""

    def __init__(self) -> None:
        self.files: dict[str, SourceFile] = {}
        self._lines: dict[str, list[str]] = {}

    def add(self, source: SourceFile) -> None:
        self.files[source.path] = source
        self._lines.pop(source.path, None)

    def line(self, span: Span) -> str:
        source = self.files.get(span.file)
        if source is None:
            return ""
        # Lines end at '\n' alone, as the lexer counts them (str.splitlines also breaks at '\f' or '\u2028').
        lines = self._lines.get(span.file) or self._lines.setdefault(span.file, source.text.split("\n"))
        return lines[span.line - 1].rstrip("\r") if 0 < span.line <= len(lines) else ""


# ---------------------------------------------------------------- text


def render_text(diagnostics: Iterable[Diagnostic], sources: Sources, limit: int | None = None) -> str:
    """Human-readable diagnostics: location, message, source line with a caret, notes."""
    items = list(diagnostics)
    shown = items if limit is None else items[:limit]
    # Gathered from all of them: a line with a key may be shown by another diagnostic than the one about the key.
    secrets = tuple(span for d in items for span in d.redact)
    blocks = [_text_block(d, sources, secrets) for d in shown]
    if len(items) > len(shown):
        blocks.append(f"... and {len(items) - len(shown)} more")
    return "\n".join(blocks)


def _text_block(diagnostic: Diagnostic, sources: Sources, secrets: tuple[Span, ...] = ()) -> str:
    where = f"{diagnostic.span}: " if diagnostic.span else ""
    lines = [f"{where}{diagnostic.severity}[{diagnostic.code}]: {diagnostic.message}"]
    if diagnostic.span:
        lines.extend(_excerpt(diagnostic.span, sources, secrets))
    for note in diagnostic.notes:
        lines.append(f"  note: {note.message}" + (f" ({note.span})" if note.span else ""))
    if diagnostic.hint:
        lines.append(f"  help: {diagnostic.hint}")
    return "\n".join(lines)


def _masked_line(span: Span, sources: Sources, secrets: tuple[Span, ...]) -> str:
    """The source line of `span` with secrets masked: the spans given, and anything shaped like a key."""
    text = sources.line(span)
    for secret in secrets:
        if secret.file == span.file and secret.line <= span.line <= secret.end_line:
            start = secret.col - 1 if secret.line == span.line else 0
            end = secret.end_col - 1 if secret.end_line == span.line else len(text)
            text = mask_span(text, start, end)
    return mask_keys(text)


def _excerpt(span: Span, sources: Sources, secrets: tuple[Span, ...] = ()) -> list[str]:
    if span.file not in sources.files:
        return []
    # An empty line still gets its caret: a missing '}' at the end of the file points there.
    line = _masked_line(span, sources, secrets)
    gutter = str(span.line)
    end = span.end_col - 1 if span.end_line == span.line else len(line)
    # A long line is cut around the column, so a diagnostic stays a few lines long.
    text, start, end = excerpt_window(line, span.col - 1, end)
    width = end - start
    # Tabs keep their width in the caret line so the caret sits under the token.
    prefix = "".join(ch if ch == "\t" else " " for ch in text[:start])
    return [
        f" {gutter} | {text}",
        f" {' ' * len(gutter)} | {prefix}{'^' * max(1, width)}",
    ]


# ---------------------------------------------------------------- json


def to_dict(diagnostic: Diagnostic) -> dict:
    span = diagnostic.span
    return {
        "code": diagnostic.code,
        "name": diagnostic.name,
        "severity": diagnostic.severity,
        "message": diagnostic.message,
        "file": span.file if span else None,
        "line": span.line if span else None,
        "column": span.col if span else None,
        "end_line": span.end_line if span else None,
        "end_column": span.end_col if span else None,
        "notes": [
            {"message": n.message, **({"file": n.span.file, "line": n.span.line, "column": n.span.col} if n.span else {})}
            for n in diagnostic.notes
        ],
        "hint": diagnostic.hint,
    }


def render_json(diagnostics: Iterable[Diagnostic], files: Iterable[str]) -> str:
    import json

    items = list(diagnostics)
    return json.dumps(
        {
            "files": list(files),
            "errors": sum(d.severity == ERROR for d in items),
            "warnings": sum(d.severity == WARNING for d in items),
            "diagnostics": [to_dict(d) for d in items],
        },
        indent=2,
    )


# ---------------------------------------------------------------- sarif

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def render_sarif(diagnostics: Iterable[Diagnostic], root: str | None = None) -> str:
    """SARIF 2.1.0 with what GitHub code scanning reads: rules, levels, physical locations.

    Files under `root` (the repository; default the current directory) get URIs
    relative to the `%SRCROOT%` base, which the log states as a file URI; files
    outside it (an import from elsewhere) get absolute file URIs, never `../`.
    """
    import json
    import os

    root = os.path.abspath(root or os.getcwd())
    codes = sorted(CODES)
    rules = [
        {
            "id": code,
            "name": CODES[code][0],
            "shortDescription": {"text": CODES[code][1]},
            "helpUri": f"https://github.com/bamasc/bamasc/blob/main/docs/diagnostics.md#{code.lower()}",
        }
        for code in codes
    ]
    results = []
    for d in diagnostics:
        text = _sentence(d.message) + (f" Help: {_sentence(d.hint)}" if d.hint else "")
        result = {
            "ruleId": d.code,
            "ruleIndex": codes.index(d.code),
            "level": "error" if d.severity == ERROR else "warning",
            "message": {"text": text},
        }
        if d.span:
            result["locations"] = [_sarif_location(d.span, root)]
        if any(n.span for n in d.notes):
            result["relatedLocations"] = [
                {**_sarif_location(n.span, root), "id": i, "message": {"text": _sentence(n.message)}}
                for i, n in enumerate(d.notes)
                if n.span
            ]
        results.append(result)
    log = {
        "version": "2.1.0",
        "$schema": SARIF_SCHEMA,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "bamasc",
                        "version": __version__,
                        "informationUri": "https://github.com/bamasc/bamasc",
                        "rules": rules,
                    }
                },
                # A base URI must end in '/' (SARIF 3.14.14), also when the root is '/'.
                "originalUriBaseIds": {SARIF_ROOT: {"uri": _file_uri(root).rstrip("/") + "/"}},
                # Spans count characters (code points), not UTF-16 units: say so, or viewers
                # place columns wrongly after an astral character.
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)


SARIF_ROOT = "%SRCROOT%"


def _sentence(text: str) -> str:
    """Text that ends as a sentence, so a following "Help:" does not run into it."""
    text = text.rstrip()
    return text if not text or text[-1] in ".!?" else text + "."


def _file_uri(path: str) -> str:
    """An absolute path as a file URI, percent-encoded (spaces, '%', '#', non-ASCII)."""
    from pathlib import Path

    return Path(path).as_uri()


def _artifact_location(file: str, root: str) -> dict:
    import os
    from urllib.parse import quote

    path = os.path.abspath(file)
    try:
        relative = os.path.relpath(path, root)
    except ValueError:  # another drive than the root's (Windows)
        relative = os.pardir
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return {"uri": _file_uri(path)}
    # quote() also encodes ':', so a file named `a:b.bam` does not read as a URI scheme.
    return {"uri": quote(relative.replace(os.sep, "/"), safe="/"), "uriBaseId": SARIF_ROOT}


def _sarif_location(span: Span, root: str) -> dict:
    return {
        "physicalLocation": {
            "artifactLocation": _artifact_location(span.file, root),
            "region": {
                "startLine": span.line,
                "startColumn": span.col,
                "endLine": span.end_line,
                "endColumn": max(span.end_col, span.col + 1) if span.end_line == span.line else span.end_col,
            },
        }
    }


# ---------------------------------------------------------------- github


def render_github(diagnostics: Iterable[Diagnostic]) -> str:
    """GitHub Actions workflow commands, one annotation line per diagnostic."""
    lines = []
    for d in diagnostics:
        properties = [f"title={_escape_property(f'{d.code} {d.name}')}"]
        if d.span:
            properties = [
                f"file={_escape_property(d.span.file)}",
                f"line={d.span.line}",
                f"col={d.span.col}",
                f"endLine={d.span.end_line}",
                f"endColumn={d.span.end_col}",
            ] + properties
        message = d.message + (f"\n{d.hint}" if d.hint else "")
        lines.append(f"::{d.severity} {','.join(properties)}::{_escape_data(message)}")
    return "\n".join(lines)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
