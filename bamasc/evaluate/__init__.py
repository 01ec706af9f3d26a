"""Evaluation: benchmark datasets as published, scorers, the code sandbox, and `bamasc bench` and `bamasc score`."""
