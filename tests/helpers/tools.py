"""The hostile tool loop's program: one tool, one model, an agent allowed three rounds of two calls."""

from __future__ import annotations

SOURCE = """
tool lookup {
  python = "hostile_tools:lookup"
  description = "Look an order up"
  parameters = \"\"\"{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}\"\"\"
  max_result = 120 tokens
  timeout = 0.5 s
  price = 10
}
model m0 {
  provider = fake
  name = "m0"
  price { input = 1  output = 2 }
  tier = 1
}
role Agent {
  tools = [lookup]
  max_tool_rounds = 3
  max_tool_calls = 2
  max_output = 64
  prompt = "Answer it: {{task}}"
}
topology t {
  slot agent : Agent [1..1]
  flow {
    answer agent(task)
  }
}
system s {
  models = [m0]
  topologies = [t]
  budget = 100000000
  task_tokens = 40
  on_exhausted = best_so_far
}
"""
