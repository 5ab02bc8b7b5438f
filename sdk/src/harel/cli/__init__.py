"""The `harel` command line, one module per command group:

main.py         the command group, exit codes in --help, what a failure prints
executions.py   start, send, cancel, list (start --wait, send --wait)
observe.py      status, trace (status --watch, trace --follow)
dead.py         dead list | retry | drop
worker.py       worker
dev.py          dev (devstate.py: where it says its store is)
deployment.py   check
partitions.py   partitions init | show
pause.py        pause, resume
demo.py         smoke, demo
options.py      options several commands share; settings.py where the deployment is; output.py printing;
views.py        how executions, mailboxes, traces and an event's fate are shown
"""

from harel.cli.main import main

__all__ = ["main"]
