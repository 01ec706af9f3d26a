"""IR: unrolls a template's flow into its call DAG and bounds the tokens and cost of every call.

`unroll` and `bounds` are plain Python so that `bamasc lint` can use them;
`graph` builds the NetworkX view for the compiler.
"""
