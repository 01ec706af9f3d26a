"""IR: the flow walker, the unrolled calls of a template, their token and cost bounds, the static
budget check, and the bound template's call graph.

`walk`, `unroll`, `bounds` and `budget` are plain Python, so that `bamasc lint` can use them;
`graph` builds the NetworkX DiGraph the compiler, plan loading, `explain` and `graph` read.
"""
