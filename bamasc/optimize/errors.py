"""The errors of binding: the solver failed, or the paper's weights stop being exact."""

from __future__ import annotations


class SolverError(RuntimeError):
    """HiGHS failed, or answered something that breaks the problem's own rows."""


class InexactWeights(SolverError, ValueError):
    """The paper's tier weights would pass 2**53, where floats stop being exact."""
