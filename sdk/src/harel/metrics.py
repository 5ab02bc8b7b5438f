"""Prometheus metrics of a worker process (one registry per process, shared by its workers).

Two kinds: what this process did (counters and histograms, updated as it works) and what the database holds
(gauges read from the deployment when `/metrics` is scraped, at most once per `STATS_TTL_SECONDS`, so an
unscraped worker sends no statistics queries). Dashboards and alerts (`helm/`, `compose/`) use these names;
a test fails when they name one that is not defined here.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# 1 KiB to 4 MiB by fours, then 8 and 16 MiB: the warning's 256 KiB and the refusal's 8 MiB are bucket
# edges (harel.executions.commits.STATE_WARN_BYTES, STATE_LIMIT_BYTES).
STATE_BUCKETS = (*(float(1024 * 4**n) for n in range(7)), 8.0 * 1024**2, 16.0 * 1024**2)
STATS_TTL_SECONDS = 15.0


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # --- what this process did -----------------------------------------------------------------
        self.events = Counter(
            "harel_events_processed", "Events that took effect, by event name kind", ["kind"], registry=r
        )
        self.ignored = Counter("harel_events_ignored", "Events no transition accepted (traced)", registry=r)
        self.conflicts = Counter(
            "harel_store_conflicts", "Commits that lost the version CAS and were retried", registry=r
        )
        self.redeliveries = Counter(
            "harel_redeliveries",
            "Repeated deliveries absorbed: sends of an event already in the target's mailbox or processed, "
            "and creations of a child that existed",
            registry=r,
        )
        self.relay_takeovers = Counter(
            "harel_relay_takeovers",
            "Outbox entries another worker delivered and had not acknowledged, sent again by a committer that "
            "took its relay work over (each a repeated delivery when the other had delivered it)",
            registry=r,
        )
        self.unknown_outcomes = Counter(
            "harel_unknown_commit_outcomes", "Commits whose reply was lost, resolved by reloading", registry=r
        )
        self.failures = Counter(
            "harel_event_failures", "Attempts that raised (action, guard, store)", registry=r
        )
        self.dead_letters = Counter(
            "harel_dead_letters",
            "Events dead-lettered by this process (their execution waits for an operator)",
            registry=r,
        )
        self.relayed = Counter("harel_relayed", "Outbox events and spawns relayed", ["kind"], registry=r)
        self.timers_fired = Counter(
            "harel_timers_fired",
            "Timer events that took effect (each fired by the claim that took its execution once due)",
            registry=r,
        )
        self.lease_steals = Counter(
            "harel_lease_steals",
            "Claims that took over an execution whose previous lease had expired",
            registry=r,
        )
        self.commands = Counter(
            "harel_db_commands",
            "Database commands this process sent, by the loop that sent them (consumer; idle: consumer polls "
            "that found nothing due; relay; heartbeat; watch: the mailbox change stream; scrape: "
            "statistics read for /metrics; other: start-up). Counted on mongodb:// deployments only: "
            "mongomock:// leaves it at zero",
            ["loop"],
            registry=r,
        )
        self.relay_lag = Histogram(
            "harel_relay_lag_seconds",
            "From commit to relay of an outbox event",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "harel_queue_wait_seconds",
            "From an event's arrival in its execution's mailbox to its step",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.timer_lateness = Histogram(
            "harel_timer_lateness_seconds",
            "From a timer's fire_at to its event taking effect (server clock)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.step_seconds = Histogram(
            "harel_step_seconds",
            "Time to apply one event: actions, guards and the interpreter",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.state_bytes = Histogram(
            "harel_execution_state_bytes",
            "Size of an execution's state (its context with it) as each commit of this process stored it: "
            "every commit rewrites it and every claim reads it",
            buckets=STATE_BUCKETS,
            registry=r,
        )
        self.oversized_states = Counter(
            "harel_oversized_states",
            "Commits that stored an execution's state over 256 KiB (refused over 8 MiB): keep references "
            "to large data in the context, not the data",
            registry=r,
        )
        self.leased = Gauge(
            "harel_leased_executions", "Executions this process holds a lease on now", registry=r
        )
        self.ready = Gauge("harel_worker_ready", "1 while /readyz answers ready, else 0", registry=r)
        # --- what the database holds (read on scrape) ------------------------------------------------
        self.mailbox_events = Gauge(
            "harel_mailbox_events", "Events waiting in executions' mailboxes (the queue depth)", registry=r
        )
        self.zone_mailbox_events = Gauge(
            "harel_zone_mailbox_events",
            "Events waiting in the mailboxes of each zone of a partitioned deployment (one zone per shard); "
            "absent on one replica set",
            ["zone", "shard"],
            registry=r,
        )
        self.oldest_due_age = Gauge(
            "harel_mailbox_oldest_due_age_seconds",
            "How long the oldest due mailbox has waited for a worker (0 when none is due)",
            registry=r,
        )
        self.executions = Gauge("harel_executions", "Executions by status", ["status"], registry=r)
        self.parked = Gauge(
            "harel_parked_executions",
            "Executions whose head event was dead-lettered: they wait for `harel dead retry|drop`",
            registry=r,
        )
        self.unserved = Gauge(
            "harel_unserved_executions",
            "Executions with due events whose chart version no live worker serves",
            registry=r,
        )
        self.pending_relays = Gauge(
            "harel_pending_relays", "Outbox events and spawns waiting to be relayed", ["kind"], registry=r
        )
        self.last_backup = Gauge(
            "harel_last_backup_timestamp_seconds",
            "When the last successful backup finished (epoch seconds; 0: none recorded)",
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
