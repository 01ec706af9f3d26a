"""Counts in messages: "1 seat", "2 seats"."""


def counted(count: int, word: str) -> str:
    """`count` and `word`, the word in the plural unless the count is one (regular English plurals only)."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
