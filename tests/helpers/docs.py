"""The ```bam blocks of a Markdown document, and the files each block holds."""

from __future__ import annotations

import re

FILE_MARKER = re.compile(r"^// file: (\S+)\s*$")


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line of the opening fence, info string after the language, body) for every ```bam block."""
    blocks = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        match = re.match(r"^```(\S*)(.*)$", lines[index])
        if not match:
            index += 1
            continue
        start = index
        index += 1
        body = []
        while index < len(lines) and not re.match(r"^```\s*$", lines[index]):
            body.append(lines[index])
            index += 1
        index += 1  # the closing fence
        if match.group(1) == "bam":
            blocks.append((start + 1, match.group(2).strip(), "\n".join(body) + "\n"))
    return blocks


def split_files(body: str) -> list[tuple[str, str]]:
    """The files of a block: [(name, text)], the checked file first."""
    lines = body.split("\n")
    if not FILE_MARKER.match(lines[0]):
        return [("example.bam", body)]
    files: list[tuple[str, list[str]]] = []
    for line in lines:
        marker = FILE_MARKER.match(line)
        if marker:
            files.append((marker.group(1), []))
        files[-1][1].append(line)
    return [(name, "\n".join(text).rstrip("\n") + "\n") for name, text in files]
