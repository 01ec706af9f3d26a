"""`bamasc serve`: a compiled plan over HTTP (Starlette on uvicorn, the `serve` extra), on the Python API's Session."""
