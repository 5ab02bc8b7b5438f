"""Sharded-cluster init: the compose stack's `sharded-init` one-shot and the Helm chart's init Job (topology
sharded) run it on every `up` / install / upgrade. Every run, the first or the hundredth, ends in the same state.

1. The config-server replica set, then each shard's replica set, formed as rs_init.py forms the one set of a
   replica-set deployment (initiated once with its first member, a primary, members reconciled one vote at a time;
   a root password rotation on each). Skipped with --router-url-file: the sets are then yours to form.
2. Through the routers (mongos): every wanted shard that `listShards` does not list is added with `addShard`; a
   shard listed but no longer wanted is named and left alone (removing one drains its chunks: a decision for a
   person, docs/sharded-clusters.md).
3. Cluster-wide default write concern majority, and the app user (readWrite on the app database only), both on
   the routers: a sharded cluster keeps its users on the config servers.
4. `harel partitions init --partitions P --database DB`, the SDK's own command: the shard-key index, `executions`
   sharded on {p: 1, _id: 1}, one zone per shard over a contiguous range of p, p backfilled, the metadata
   document. It changes nothing when P and the zones already match, and refuses a different P.
5. Optionally the app user's URL, to the routers, written to a file (mode 0400) for the workers.

Exit 0 when all are done; exit 1 with one line saying what is wrong otherwise. Secrets are read from files
(<NAME>_FILE), never from the command line or a plain environment value.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pymongo import MongoClient
from pymongo.errors import OperationFailure
from replica_set_plan import Wanted
from rs_init import (
    CLIENT_TLS_MODES,
    TLS_MODES,
    Database,
    Deadline,
    InitError,
    MongoServers,
    Settings,
    app_user_step,
    default_write_concern_step,
    form_set,
    require_ok,
    secret,
    send,
    write_url_file,
)


@dataclass(frozen=True)
class ReplicaSet:
    name: str
    members: tuple[str, ...]

    @property
    def connection_string(self) -> str:
        """addShard's form: <set>/<host>,<host>..."""
        return f"{self.name}/{','.join(self.members)}"


@dataclass(frozen=True)
class Cluster:
    """What the deployment wants: the config-server set, the shards, the routers, P and the app's names."""

    config_server: ReplicaSet
    shards: tuple[ReplicaSet, ...]
    routers: tuple[str, ...]
    partitions: int
    database: str = "harel"
    root_user: str = "root"
    app_user: str = "harel"
    tls_ca_file: str | None = None

    def set_settings(self, replica_set: ReplicaSet) -> Settings:
        return Settings(
            replica_set.name,
            tuple(Wanted(host) for host in replica_set.members),
            database=self.database,
            root_user=self.root_user,
            app_user=self.app_user,
            tls_ca_file=self.tls_ca_file,
        )

    def router_url(self, user: str, password: str, database: str = "") -> str:
        """A URL to the routers: no replicaSet option, every mongos host given."""
        query = "authSource=admin"
        if self.tls_ca_file:
            query += f"&tls=true&tlsCAFile={quote(self.tls_ca_file)}"
        credentials = f"{quote(user, safe='')}:{quote(password, safe='')}"
        return f"mongodb://{credentials}@{','.join(self.routers)}/{database}?{query}"


def cluster_settings(
    config: Mapping[str, Any], tls_ca_file: str | None = None, root_user: str | None = None
) -> Cluster:
    """init-config.json (Helm) or compose/mongo-init/sharded-compose.json: configServer, shards, routers, partitions,
    database, rootUsername, appUsername and tlsCAFile (Helm; compose passes --tls-mode and --root-user instead)."""

    def replica_set(entry: Mapping[str, Any]) -> ReplicaSet:
        return ReplicaSet(str(entry["replicaSetName"]), tuple(str(host) for host in entry["dataMembers"]))

    return Cluster(
        config_server=replica_set(config["configServer"]),
        shards=tuple(replica_set(entry) for entry in config["shards"]),
        routers=tuple(str(host) for host in config["routers"]),
        partitions=int(config["partitions"]),
        database=str(config.get("database", "harel")),
        root_user=root_user or str(config.get("rootUsername", "root")),
        app_user=str(config.get("appUsername", "harel")),
        tls_ca_file=config.get("tlsCAFile") or tls_ca_file,
    )


@dataclass(frozen=True)
class ShardPlan:
    add: tuple[ReplicaSet, ...]
    present: tuple[str, ...]
    unwanted: tuple[str, ...]


def shard_plan(list_shards_reply: Mapping[str, Any], wanted: Sequence[ReplicaSet]) -> ShardPlan:
    """Which wanted shards `addShard` must add: those `listShards` does not list by name. A shard is never re-added
    (its name is its identity in the config servers), nor removed here."""
    listed = [str(shard["_id"]) for shard in list_shards_reply.get("shards", [])]
    wanted_names = {shard.name for shard in wanted}
    return ShardPlan(
        add=tuple(shard for shard in wanted if shard.name not in listed),
        present=tuple(name for name in listed if name in wanted_names),
        unwanted=tuple(name for name in listed if name not in wanted_names),
    )


def shards_step(router: Database, cluster: Cluster, log: Callable[[str], None]) -> None:
    plan = shard_plan(require_ok(send(router, {"listShards": 1}), "listShards"), cluster.shards)
    for name in plan.present:
        log(f"sharded-init: shard {name} already added")
    for shard in plan.add:
        require_ok(
            send(router, {"addShard": shard.connection_string, "name": shard.name}), f"addShard {shard.name}"
        )
        log(f"sharded-init: shard {shard.name} added ({shard.connection_string})")
    for name in plan.unwanted:
        log(
            f"sharded-init: shard {name} is in the cluster but no longer wanted: left alone (removing a shard "
            "drains its chunks first: docs/sharded-clusters.md)"
        )


def partitions_step(url_file: Path, cluster: Cluster, log: Callable[[str], None]) -> None:
    """The SDK's `harel partitions init`, reading the routers' URL from `url_file` (never a command-line value)."""
    harel = shutil.which("harel")
    if harel is None:
        raise InitError("the harel command is not on PATH: run this from the worker image")
    done = subprocess.run(
        [
            harel,
            "partitions",
            "init",
            "--partitions",
            str(cluster.partitions),
            "--database",
            cluster.database,
        ],
        # The file alone: a HAREL_MONGO_URL in this environment would win over it.
        env={
            **{k: v for k, v in os.environ.items() if k != "HAREL_MONGO_URL"},
            "HAREL_MONGO_URL_FILE": str(url_file),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        log(f"sharded-init: partitions: {line}")
    if done.returncode != 0:
        raise InitError(f"harel partitions init exited {done.returncode}: {done.stderr.strip()[-500:]}")


def form_sets(cluster: Cluster, root_password: str, previous: str | None, deadline: Deadline) -> None:
    for replica_set in (cluster.config_server, *cluster.shards):
        form_one(cluster.set_settings(replica_set), root_password, previous, deadline)


def form_one(settings: Settings, root_password: str, previous: str | None, deadline: Deadline) -> None:
    servers = MongoServers(settings, root_password, previous)
    try:
        deadline.until(
            f"log in to {settings.replica_set} as root", lambda: servers.first_admin().command("ping")
        )
        form_set(servers, settings, deadline, print)
        servers.rotate_root(print)
    finally:
        servers.close()


def router_steps(router_url_file: Path, cluster: Cluster, app_password: str, deadline: Deadline) -> None:
    url = router_url_file.read_text(encoding="utf-8").strip()
    client: MongoClient[dict[str, Any]]
    with MongoClient(url, serverSelectionTimeoutMS=3000, connectTimeoutMS=3000) as client:
        admin: Database = client.admin
        deadline.until("reach the routers", lambda: require_ok(send(admin, {"ping": 1}), "ping"))
        deadline.until("add the shards", lambda: shards_step(admin, cluster, print))
        default_write_concern_step(admin, print)
        settings = cluster.set_settings(cluster.config_server)
        outcome = deadline.until("ensure the app user", lambda: app_user_step(admin, settings, app_password))
        print(
            f"sharded-init: app user {cluster.app_user!r} {outcome} (readWrite on {cluster.database!r} only)"
        )
    partitions_step(router_url_file, cluster, print)


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, as the Helm Job, the compose one-shot and the Ansible role give it."""
    parser = argparse.ArgumentParser(prog="sharded_init", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", type=Path, required=True, help="the wanted sets, routers and partitions (JSON)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for every step together")
    parser.add_argument(
        "--router-url-file",
        type=Path,
        help="a file holding your own administrator's URL to the routers: the sets are yours to form, only the "
        "router steps run (an external cluster, the Ansible path, moving an install)",
    )
    parser.add_argument(
        "--url-file",
        type=Path,
        help="write the app user's URL to the routers here (mode 0400) for the workers",
    )
    parser.add_argument(
        "--tls-mode",
        choices=TLS_MODES,
        default="disabled",
        help="compose: the members' --tlsMode; clients (this script, the URL file) use TLS from preferTLS on",
    )
    parser.add_argument(
        "--tls-ca-file", default="/tls/ca.crt", help="compose: the CA of the members' certificates"
    )
    parser.add_argument("--root-user", help="compose: the root user's name (HAREL_MONGO_ROOT_USER)")
    return parser.parse_args(argv)


def cluster_from_arguments(args: argparse.Namespace) -> Cluster:
    """The wanted cluster: the --config file's, with the CA clients name from preferTLS on (--tls-mode)."""
    client_ca = args.tls_ca_file if args.tls_mode in CLIENT_TLS_MODES else None
    return cluster_settings(json.loads(args.config.read_text(encoding="utf-8")), client_ca, args.root_user)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        cluster = cluster_from_arguments(args)
        app_password = secret("HAREL_APP_PASSWORD")
        assert app_password is not None
        deadline = Deadline(args.timeout)
        if args.router_url_file:
            router_steps(args.router_url_file, cluster, app_password, deadline)
        else:
            root_password = secret("HAREL_MONGO_ROOT_PASSWORD")
            assert root_password is not None
            form_sets(
                cluster, root_password, secret("HAREL_MONGO_PREVIOUS_ROOT_PASSWORD", required=False), deadline
            )
            with tempfile.TemporaryDirectory() as scratch:
                root_url_file = Path(scratch) / "router-url"
                write_url_file(root_url_file, cluster.router_url(cluster.root_user, root_password))
                router_steps(root_url_file, cluster, app_password, deadline)
        if args.url_file:
            write_url_file(
                args.url_file, cluster.router_url(cluster.app_user, app_password, cluster.database)
            )
            print(f"sharded-init: wrote the app user's URL to {args.url_file}")
    except OperationFailure as exc:
        print(f"sharded-init: {exc.code}: {str(exc)[:300]}", file=sys.stderr)
        return 1
    except InitError as exc:
        print(f"sharded-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
