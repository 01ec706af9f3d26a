"""Evaluation: benchmark datasets as published, scorers, the code sandbox (parent and jail), and the bench runs behind `bamasc bench` and `bamasc score`."""
