"""`python -m tests.fake_mongod --port N [--standalone|--secondary|--mongos] [--set-name rs0] [--latency-ms MS]
[--clock-offset SECONDS] [--uninitialized] [--auth]`, or a fake sharded cluster:
`python -m tests.fake_mongod --port N --shards K [--routers R] [--clock-offsets 0,30] [--mode 7.0|8.0]
[--latency-ms MS]`.

Serves on 127.0.0.1 until SIGTERM or SIGINT. `--port 0` lets the OS choose; either way the first line on
stdout is `listening 127.0.0.1:PORT`, printed once the server accepts connections; a cluster's further
routers follow, one `listening 127.0.0.1:PORT` line each (on the ports after N when N is not 0). SIGUSR1
withholds write-concern acknowledgement (a set without its majority), SIGUSR2 releases it (not for a
cluster).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from harel_dev.server import serve_until_signalled

from .cluster import MODES
from .deployment import start_cluster
from .server import FakeMongod
from .topology import Role


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fake_mongod", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1; 0 lets the OS choose")
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--standalone", dest="role", action="store_const", const=Role.STANDALONE)
    role.add_argument("--secondary", dest="role", action="store_const", const=Role.SECONDARY)
    role.add_argument("--mongos", dest="role", action="store_const", const=Role.MONGOS)
    role.add_argument(
        "--shards",
        type=int,
        metavar="K",
        help="a fake sharded cluster of K shards behind --routers mongos routers (tests/fake_mongod/README.md)",
    )
    parser.set_defaults(role=Role.PRIMARY)
    parser.add_argument("--routers", type=int, default=1, help="with --shards: how many routers (default: 1)")
    parser.add_argument(
        "--clock-offsets",
        metavar="SECONDS,...",
        help="with --shards: each router's clock offset, comma-separated (default: --clock-offset for each)",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="8.0",
        help="with --shards: whose rules single-document writes without the shard key follow (default: 8.0)",
    )
    parser.add_argument("--set-name", default="rs0", help="replica set name (default: rs0)")
    parser.add_argument(
        "--uninitialized",
        action="store_true",
        help="start as a member awaiting replSetInitiate (NotYetInitialized until then)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="network latency added to every command, outside the execution lock (default: 0)",
    )
    parser.add_argument(
        "--clock-offset",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run the server's clock ($$NOW, hello.localTime) this far ahead of real time; negative: behind",
    )
    parser.add_argument(
        "--auth",
        action="store_true",
        help="require SCRAM authentication (the localhost exception lets the first user be created)",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level on stderr (default: WARNING)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.shards is not None:
        return _serve_cluster(args)
    if args.routers != 1 or args.clock_offsets is not None or args.mode != "8.0":
        print("--routers, --clock-offsets and --mode apply to a cluster (--shards) only", file=sys.stderr)
        return 2
    if args.uninitialized and args.role not in (Role.PRIMARY, Role.SECONDARY):
        print("--uninitialized applies to replica-set members only", file=sys.stderr)
        return 2
    if args.latency_ms < 0:
        print("--latency-ms must not be negative", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    server = FakeMongod(
        args.role,
        set_name=args.set_name,
        port=args.port,
        latency_ms=args.latency_ms,
        clock_offset=args.clock_offset,
        auth=args.auth,
    ).start()
    signal.signal(signal.SIGUSR1, lambda *_: server.withhold_write_concern())
    signal.signal(signal.SIGUSR2, lambda *_: server.release_write_concern())

    def announce() -> None:
        if args.uninitialized:
            server.set_initialized(False)
        print(f"listening {server.host_port}", flush=True)

    return serve_until_signalled(server, announce)


def _serve_cluster(args: argparse.Namespace) -> int:
    if args.uninitialized or args.auth or args.set_name != "rs0":
        print("--uninitialized, --auth and --set-name do not apply to a cluster (--shards)", file=sys.stderr)
        return 2
    if args.shards < 1 or args.routers < 1 or args.latency_ms < 0:
        print("--shards and --routers must be at least 1, --latency-ms not negative", file=sys.stderr)
        return 2
    try:
        offsets = (
            [float(offset) for offset in args.clock_offsets.split(",")]
            if args.clock_offsets is not None
            else [args.clock_offset] * args.routers
        )
    except ValueError:
        print(f"--clock-offsets {args.clock_offsets!r}: comma-separated seconds expected", file=sys.stderr)
        return 2
    if len(offsets) != args.routers:
        print(f"--clock-offsets gives {len(offsets)} offsets for {args.routers} routers", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    deployment = start_cluster(
        args.shards,
        routers=args.routers,
        clock_offsets=offsets,
        mode=args.mode,
        latency_ms=args.latency_ms,
        port=args.port,
    )

    def announce() -> None:
        for router in deployment.routers:
            print(f"listening {router.host_port}", flush=True)

    return serve_until_signalled(deployment, announce)


if __name__ == "__main__":
    sys.exit(main())
