"""Benchmarks behind `make bench`: round trips, bytes per commit, claims among idle executions, interpreter speed, end to end.

Every figure is measured next to its baseline in the same run; bench/README.md says what each one means.
"""
