"""Syntax: the grammar tables, the table-driven LALR parser, AST dataclasses and the transformer."""
