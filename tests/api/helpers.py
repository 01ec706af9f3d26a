"""Sources the API tests compile: small systems on the offline fake provider."""

from __future__ import annotations

SOLVER = """\
import "std/linear"

model steady {
  provider = fake
  name     = "steady"
  price    { input = 1.0  output = 4.0 }
  tier     = 1
}

role Executor {
  max_output = 64
  reads      = answer
  prompt     = "Solve: {{task}}\\n{{previous?}}\\nEnd with \\"#### <number>\\"."
}

system solver {
  models      = [steady]
  topologies  = [linear]
  budget      = 2000
  task_tokens = 100
  answer      = number
}
"""

# The same system with a budget no template fits: lint reports BAM404.
UNREACHABLE = SOLVER.replace("budget      = 2000", "budget      = 100")

SYNTAX_ERROR = SOLVER.replace("system solver {", "system solver {{")
