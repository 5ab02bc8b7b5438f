"""The `executions` document: every field, what it holds, and who writes it.

One execution is one document in the `executions` collection. Its engine state, the work it owes others
(outbox, spawns), its bookkeeping (dedupe window, timers, trace) and its mailbox live together, so that one
commit — the steps, everything they enqueue, and the removal of the events they applied — is one atomic
single-document update on any MongoDB deployment.

The writers: *create* (MongoStore.create, commit at version 0, create_children: an upsert that seeds every
field), *commit* (MongoStore.commit and commit_claim: one CAS update), *send*, *claim*, *extend*, *release*
and *fail* (MongoTransport; `park_unreadable` is a fail of a claim that could not read its execution), the *sweep* (MongoStore.fire_timer), the *relays* (take_relay_work,
ack_relay), the *pass park* (MongoStore.park_unreadable: the relay or the sweep could not read what it came
for), the *operator* (`harel dead retry|drop`: MongoTransport.retry, drop) and *append_trace*.

The seed's fields:

    _id             the execution id.                                                   create
    definition_id   the chart id.                                                       create, commit
    version         the optimistic-concurrency counter: the number of steps taken. A   create, commit
                    commit's CAS filter is {_id, version}; a commit of k steps
                    advances it by k.
    data            the whole Execution as JSON (Execution.model_dump_json).            create, commit
    outbox          [{seq, target_id, event: Event JSON, at}]: events awaiting          commit appends,
                    delivery.                                                           relays remove
    spawns          [{seq, parent_id, child_id, root_path, context, at}]: children      commit appends,
                    awaiting creation.                                                  relays remove
    processed       [event id, ...]: the dedupe window, the last `dedupe_window`        commit appends,
                    applied event ids.                                                  operator (drop)
    timers          {enc(key): fire_at}: durable timers keyed by node path, or          commit
                    `<path>#<duration>` for one of a state's several, or `send:<id>`
                    for a delayed send (dots stored as U+FF0E); opaque here: the
                    interpreter owns the keys, the claim fires whichever is due.
    trace           [{...step, index}]: the ring of the last `trace_max` steps; a      commit, append_trace
                    step's index is the version it started from.
    next_fire_at    the earliest timer not yet turned into an event, or null.          commit, claim,
                                                                                        sweep, pass park,
                                                                                        operator

Beyond the seed, for listings and relays:

    status, parent_id, created_at, updated_at                                           create, commit
                    promoted from `data`, so listings filter and sort on the server and
                    statistics count by status (`data` stays the whole truth).
    relay_at        null, or when relay work on the outbox and spawns may be taken by   commit (when null,
                    a background relay (server clock). The worker that commits entries  or taking over),
                    relays them itself at once and holds them for its lease's length    relays, pass park,
                    (RELAY_GRACE_SECONDS for a commit outside a claim); a commit that   operator
                    takes over another's outbox replaces that hold with its own, one
                    that leaves pending children to their holder makes its entries due
                    now; a relay that takes the work holds it for its own lease, and
                    clears the field once nothing is left. Indexed, so relays never
                    scan.
    p               the partition, on a partitioned deployment only (P > 1, recorded   create (from the
                    in `harel_meta`): a fixed hash of the root execution id mod P, so   shard key of its
                    a root and its regions share it. With `_id` the shard key           upsert's filter)
                    {p: 1, _id: 1}; never changes (`executions.partitions`); absent
                    with P = 1, and backfilled by `harel partitions init`.

The mailbox:

    chart           "<definition_id>@<definition_version>": the routing key. A worker   create
                    claims only executions of the chart versions it serves, so two
                    applications on one database never touch each other's executions,
                    and an event for a chart nobody serves waits without being tried.
    inbox           [{id, event: Event JSON, source, at, size}]: pending events in      send, claim and
                    arrival order. `at` is the sender's estimate of the server's time   sweep append;
                    (for the queue-wait metric only); `size` is the entry's share of    commit and operator
                    the mailbox budget. A fired timer's entry holds                     (drop) remove
                    `timer: {key: enc(path), fire_at}` instead of `event`: the claim
                    builds it on the server, the reader builds the event.
    inbox_bytes     the sum of the entries' sizes; a send that would pass               whoever changes
                    INBOX_LIMIT_BYTES is refused (the document must stay under          `inbox`
                    MongoDB's 16 MiB).
    inbox_at        when a worker may claim the execution next (server clock), or null: every mailbox
                      null     nothing pending, or parked (waiting for an operator)    writer
                      <= now   due: the first pending event's arrival, or a retry time
                               that has passed
                      > now    leased until then, or backing off before a retry
    wake_at         when a claim may take the execution (server clock), or null:      every writer of
                    `inbox_at` while that is set, else `next_fire_at`; null while       inbox_at,
                    parked. The claim's index range: a due mailbox and a due timer      next_fire_at or
                    are found alike, and the claim appends the due timers' events to   parked (its last
                    the mailbox in the same command.                                   stage)
    lease           {owner, until, at, previous} while a worker holds the execution,   claim, extend;
                    else null. `at` is the server's time of the claim; `previous` the   commit, release
                    owner of an expired lease it took over.                             and fail end it
    attempts        failed attempts at the head event (0 once it is applied); a claim   commit, fail,
                    taking over an expired lease counts one.                            claim, operator
    last_error      the last attempt's error.                                           the same
    last_traceback  the traceback of the last attempt's exception (its last             commit, fail,
                    TRACEBACK_LIMIT characters, the innermost frames).                  operator
    parked          {event_id, name, error, traceback, attempts, at} once the head      commit, fail,
                    event failed `max_attempts` times, or failed in a way no retry can  operator
                    change (the document itself unreadable among them: the head event
                    as stored, "-" where not readable): later events wait behind it
                    (they never overtake it) until an operator retries or drops it.
                    A pass park (event "-") also holds `relay_at` and `next_fire_at`,   pass park,
                    cleared meanwhile so neither pass takes it again; the operator      operator
                    gives them back (relay work due at once).

`wake_at` is the one field for "claimable from": a leased execution's is its lease's end, an idle one's its
earliest timer, so one index range over (`chart`, `wake_at`) finds what is due — events or timers — and
never what is leased, with no `$or`. The index is partial (`wake_at >= 0`), so it holds only executions
with something to do or to wait for. Executions stored before `wake_at` existed get it at the transport's
start-up (`writes.stamp_wake_write`).

Seqs need no counter: an entry's seq is `SEQ_STRIDE * v + n` for the n-th entry of the step that started at
version v, unique and increasing within the execution, which is all delivery order needs (events from one
sender to one target are delivered in seq order). A step may emit and spawn at most SEQ_STRIDE entries.
Only `append_trace` of a step without an index draws from the `counters` collection (`trace:<id>`).

Commits are update pipelines: one `update_one` under the CAS filter, sending only what the steps added
(the new entries, appended with `$concatArrays`; the rings trimmed with `$slice`), never the document. A
pipeline rather than `$set`/`$push` because releasing the mailbox depends on what is left in it
(`inbox_at` is due if events arrived during the lease, null otherwise) — one condition no classic update
can express. Every command that decides on time compares with the server's `$$NOW`
(`harel.servertime.NOW`), and every value a client supplies enters a pipeline as `$literal`: a user string
that starts with `$` (an event id) is data, never a field path. Classic query filters compare values,
never evaluate them.
"""

from __future__ import annotations

import math

from harel.model import Execution

EXECUTIONS = "executions"
COUNTERS = "counters"

DEFAULT_TRACE_MAX = 200
# How many processed event ids each execution remembers. A redelivery that arrives after this many newer
# events of the same execution were processed is no longer recognised by its id and is stepped again
# (harel.store.mongo explains the window and how long a redelivery may lag).
DEFAULT_DEDUPE_WINDOW = 1000

SEQ_STRIDE = 1000
RELAY_GRACE_SECONDS = 10.0
INBOX_LIMIT_BYTES = 4 * 1024 * 1024
TIMER_ENTRY_SIZE = 256  # a fired timer's share of the mailbox budget (its entry is built on the server)
ERROR_LIMIT = 4000  # characters of an attempt's error kept in `last_error` and `parked.error`
TRACEBACK_LIMIT = 8000  # characters of its traceback kept, from the end: where it was raised

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
# A commit whose own payload reaches this is refused before it is sent: the document also holds the
# embedded arrays, and a write the server rejects mid-flight is harder to explain than one never sent.
SAFE_COMMIT_BYTES = 15 * 1024 * 1024

# MongoDB reads a "." in a field name as a path step, so node paths are stored with the dot replaced by
# FULLWIDTH FULL STOP, a character charts may not use in state names.
DOT_STANDIN = "\uff0e"


def enc(path: str) -> str:
    return path.replace(".", DOT_STANDIN)


def dec(key: str) -> str:
    return key.replace(DOT_STANDIN, ".")


def due_from(fire_at: float) -> float:
    """The server time from which a timer is due: `fire_at` rounded up to the millisecond, the resolution of
    the server's clock (`$$NOW` is a millisecond date), so a timer is never taken for due early."""
    return math.ceil(fire_at * 1000) / 1000


def chart_key(definition_id: str, version: int) -> str:
    return f"{definition_id}@{version}"


def trace_counter(execution_id: str) -> str:
    return f"trace:{execution_id}"


def require_positive(name: str, value: int) -> int:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def promoted(exe: Execution) -> dict[str, object]:
    """The fields of `data` a listing filters and sorts on, kept at the top level."""
    return {
        "definition_id": exe.definition_id,
        "status": exe.status.value,
        "parent_id": exe.parent_id,
        "created_at": exe.created_at,
        "updated_at": exe.updated_at,
    }
