"""Runtime: the interpreter, the budget guard and its ledger, the trace writer and the model providers."""
