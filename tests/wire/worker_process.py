"""`python -m tests.wire.worker_process --url URL --lease-seconds S`: a worker process with a short lease.

It runs what `harel worker` runs — `harel.serve.serve` with the built-in smoke chart, JSON logs, SIGTERM
drain — and differs only in the lease a claim takes. The fault suite kills such a process with SIGKILL while
it holds a claimed message; with the production lease (30 s) the survivors would wait that long before the
message is claimable again, with a short one they take it over within the test's time.
"""

from __future__ import annotations

import argparse
import sys

from harel.logs import configure_logging
from harel.serve import build_app, serve
from harel.worker import WorkerConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.wire.worker_process", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--lease-seconds", type=float, required=True)
    args = parser.parse_args(argv)
    configure_logging()
    config = WorkerConfig(lease_seconds=args.lease_seconds, drain_seconds=2.0)
    return serve(args.url, build_app(), config, http_port=None)


if __name__ == "__main__":
    sys.exit(main())
