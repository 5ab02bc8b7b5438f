"""`make chaos`: worker processes killed, stopped and stalled under fork/join load (see runner.py)."""
