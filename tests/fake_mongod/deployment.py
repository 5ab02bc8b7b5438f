"""A fake cluster with its routers started: what the fixtures and `python -m tests.fake_mongod --shards N`
run. The URL lists every router (`mongodb://127.0.0.1:P1,127.0.0.1:P2/`), as a client of a real cluster
lists its mongos hosts."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import FakeCluster
from .router import Router


@dataclass
class ClusterDeployment:
    cluster: FakeCluster
    routers: list[Router]

    @property
    def url(self) -> str:
        return "mongodb://" + ",".join(router.host_port for router in self.routers) + "/"

    def reset(self) -> None:
        """Empty shards, no sharding state, zones or metrics, balancer on; each router's own state too."""
        self.cluster.reset()
        for router in self.routers:
            router.reset()

    def stop(self) -> None:
        for router in self.routers:
            router.stop()


def start_cluster(
    shards: int = 3,
    *,
    routers: int = 1,
    clock_offsets: list[float] | None = None,
    mode: str = "8.0",
    latency_ms: float = 0.0,
    port: int = 0,
) -> ClusterDeployment:
    """Start `routers` routers in front of `shards` shards; router i runs its clock `clock_offsets[i]`
    seconds ahead. The first listens on `port` (0: the OS chooses), the others on the ports after it."""
    offsets = clock_offsets if clock_offsets is not None else [0.0] * routers
    if len(offsets) != routers:
        raise ValueError(f"{routers} routers need {routers} clock offsets, got {len(offsets)}")
    cluster = FakeCluster(shards, mode=mode)
    started: list[Router] = []
    try:
        for index, offset in enumerate(offsets):
            router_port = port + index if port else 0
            started.append(
                Router(cluster, port=router_port, latency_ms=latency_ms, clock_offset=offset).start()
            )
    except BaseException:
        for router in started:
            router.stop()
        raise
    return ClusterDeployment(cluster, started)
