"""The release of bamasc: rank 0, so that any stage may name it without importing the package's front door."""

__version__ = "0.1.0"
