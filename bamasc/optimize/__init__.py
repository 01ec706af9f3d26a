"""Binding models to slots: the seat problem, its ILP, the HiGHS solve and the relaxation that explains no binding.

`problem` holds the problem and how seats score; `formulation` its solver-neutral
rows and objectives; `highs` the only module that touches highspy (and only when
solving); `relax` the infeasibility explanation; `bind` binds one template of a
program through them (`strategy` holds the thresholds that pick its path and the
record of the path taken, `binding` the records it returns); `brute` and
`pulp_model` are the oracle and the baseline the tests and the solver benchmark
measure against.
"""
