"""A system too dear for small budgets, its `budget` and `budgets` list left to fill (`SWEPT % {...}`)."""

from __future__ import annotations

# One call: (7 bytes of "Solve: " + 8 overhead + 100 task tokens) x 15 + 100 x 75 = 9225 µ$ at the least.
SWEPT = """\
model pricey {
  provider = fake
  name     = "pricey"
  price    { input = 15  output = 75 }
  tier     = 1
}

role Solver {
  max_output = 100
  prompt     = "Solve: {{task}}"
}

topology single {
  slot solver : Solver [1..1]
  flow { answer solver(task) }
}

system swept {
  models      = [pricey]
  topologies  = [single]
  budget      = %(budget)s
  budgets     = %(budgets)s
  task_tokens = 100
}
"""
