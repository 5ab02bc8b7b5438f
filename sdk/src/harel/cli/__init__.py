"""The `harel` command line, one module per command group:

main.py         the command group, exit codes in --help, what a failure prints
executions.py   start, send, cancel, status, list, trace
worker.py       worker
deployment.py   check
demo.py         smoke, demo
options.py      options several commands share; settings.py where the deployment is; output.py printing
"""

from harel.cli.main import main

__all__ = ["main"]
