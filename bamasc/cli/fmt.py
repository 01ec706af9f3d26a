"""`bamasc fmt`: rewrite .bam files in the canonical layout, or (`--check`, `--diff`) say what would change.

A file is replaced only whole: the new text goes to a temporary file beside
it, which is then renamed over it, so an error or a kill mid-way leaves the
old file as it was.
"""

from __future__ import annotations

import os
import sys

from bamasc.cli.report import Report


def add_parser(commands) -> None:
    fmt = commands.add_parser("fmt", help="rewrite .bam files in the canonical layout (or --check it, for CI and pre-commit)")
    fmt.add_argument("files", nargs="+", metavar="FILE", help="files to format; '-' formats standard input to standard output")
    fmt.add_argument("--check", action="store_true", help="write nothing; exit 1 listing the files that would change")
    fmt.add_argument("--diff", action="store_true", help="write nothing; print a unified diff of each change")
    fmt.set_defaults(run=run)


def run(args) -> int:
    from bamasc import diagnostics as render

    report = Report()
    sources = render.Sources()
    problems = []
    changed = unchanged = 0
    for path in args.files:
        old, new, diagnostic = _formatted(path)
        if diagnostic is not None:
            problems.append(diagnostic)
            if old is not None:
                sources.add(_source(path, old))
            continue
        if path == "-":
            if not args.check and not args.diff:
                sys.stdout.write(new)
        if new == old:
            unchanged += 1
            continue
        changed += 1
        if args.diff:
            sys.stdout.write(_diff(path, old, new))
        if args.check:
            print(f"would reformat {path}")
            report.failed()
        elif not args.diff and path != "-":
            problem = _replace(path, new)
            if problem is not None:
                print(f"bamasc: error: {problem}", file=sys.stderr)
                report.failed()
                changed -= 1
    report.add(problems)
    if problems:
        print(render.render_text(problems, sources), file=sys.stderr)
    verb = "would be reformatted" if args.check or args.diff else "reformatted"
    print(f"{_plural(len(args.files), 'file')}: {changed} {verb}, {unchanged} unchanged, "
          f"{_plural(len(problems), 'error')}", file=sys.stderr)
    return report.return_code


def _formatted(path: str):
    """(old text, new text, None), or (old text or None, None, the diagnostic) when it cannot be formatted."""
    from bamasc.diagnostics import error
    from bamasc.fmt import FormatError, format_source
    from bamasc.loader import MAX_FILE_BYTES
    from bamasc.source import Span, decode_source

    where = Span(path, 1, 1, 1, 1)
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None, None, error("BAM006", f"file '{path}' not found", where)
    except IsADirectoryError:
        return None, None, error("BAM006", f"file '{path}' is a directory", where, hint=f"pass its .bam files, e.g. {path.rstrip('/')}/*.bam")
    except OSError as problem:
        return None, None, error("BAM006", f"cannot read file '{path}': {problem.strerror}", where)
    if len(data) > MAX_FILE_BYTES:
        return None, None, error("BAM008", f"file '{path}' is larger than the limit of {MAX_FILE_BYTES} bytes", where)
    text, bad_offset = decode_source(path, data)
    if bad_offset is not None:
        before = data[:bad_offset].decode("utf-8")
        line, col = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        return text, None, error("BAM005", "file is not valid UTF-8", Span(path, line, col, line, col + 1), hint="save the file as UTF-8")
    # Compared as written: a byte-order mark, which the layout drops, is a change too.
    old = data.decode("utf-8")
    try:
        return old, format_source(text, path), None
    except FormatError as failure:
        return text, None, failure.diagnostic


def _source(path: str, text: str):
    from bamasc.source import SourceFile

    return SourceFile(path, text)


def _diff(path: str, old: str, new: str) -> str:
    import difflib

    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"{path}", f"{path} (formatted)")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _replace(path: str, text: str) -> str | None:
    """Write `text` over `path` atomically, keeping its permissions; what went wrong, if anything."""
    import contextlib
    import tempfile

    target = os.path.realpath(path)  # a link stays a link, to the rewritten file
    temporary = None
    try:
        mode = os.stat(target).st_mode & 0o7777
        handle, temporary = tempfile.mkstemp(prefix=".", suffix=".bam.tmp", dir=os.path.dirname(target))
        with os.fdopen(handle, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
        temporary = None
    except OSError as problem:
        return f"cannot write {path}: {problem.strerror or problem}"
    finally:
        if temporary is not None:  # never leave the half-done copy behind
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
