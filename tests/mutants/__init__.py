"""The mutation run: planted bugs the suite must catch (`make mutate`, `python -m tests.mutants --help`)."""
