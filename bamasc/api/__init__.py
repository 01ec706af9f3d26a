"""The public Python API: `bamasc.load`, `Program.compile`, `Plan.run` and friends (docs/python.md).

Import the names from `bamasc` itself; the modules of this package may move.
"""
