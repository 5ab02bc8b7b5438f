"""Prometheus metrics of a worker process (one registry per process, shared by its workers)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "harel_events_processed", "Events that took effect, by event name kind", ["kind"], registry=r
        )
        self.ignored = Counter("harel_events_ignored", "Events no transition accepted (traced)", registry=r)
        self.conflicts = Counter(
            "harel_store_conflicts", "Commits that lost the version CAS and were retried", registry=r
        )
        self.redeliveries = Counter(
            "harel_redeliveries", "Deliveries of events already processed (deduped)", registry=r
        )
        self.unknown_outcomes = Counter(
            "harel_unknown_commit_outcomes", "Commits whose reply was lost, resolved by reloading", registry=r
        )
        self.failures = Counter(
            "harel_event_failures", "Attempts that raised (action, guard, store)", registry=r
        )
        self.dead_letters = Counter("harel_dead_letters", "Messages moved to dead_letters", registry=r)
        self.relayed = Counter("harel_relayed", "Outbox events and spawns relayed", ["kind"], registry=r)
        self.timers_fired = Counter(
            "harel_timers_fired", "Due timers turned into events by the sweep", registry=r
        )
        self.relay_lag = Histogram(
            "harel_relay_lag_seconds",
            "From commit to relay of an outbox event",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "harel_queue_wait_seconds",
            "From enqueue to claim of a message",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.timer_lateness = Histogram(
            "harel_timer_lateness_seconds",
            "From a timer's fire_at to its event taking effect",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge("harel_inflight_messages", "Messages being processed now", registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
