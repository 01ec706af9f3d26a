"""bamasc: a compiler for budget-aware multi-agent LLM systems."""

__version__ = "0.1.0"
