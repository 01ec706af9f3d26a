"""`bamasc proxy`: budgets per scope for any framework's OpenAI and Anthropic calls (docs/proxy.md)."""
