"""Every error the SDK raises on purpose. Each carries what the caller needs to act on it."""

from __future__ import annotations


class HarelError(Exception):
    """Base of every harel error."""


# --- store -------------------------------------------------------------------------------------------


class StoreConflict(HarelError):
    """A commit lost the version CAS: someone else advanced the execution first. Nothing was written."""

    def __init__(self, execution_id: str, expected: int, found: int | None) -> None:
        self.execution_id = execution_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"execution {execution_id!r}: commit expected version {expected}, store has "
            f"{'no document' if found is None else f'version {found}'}; reload and step again"
        )


class LeaseLost(StoreConflict):
    """A claim's commit found the execution at the version it expected but leased to someone else: the lease
    expired while the steps ran, and the new holder will apply the events. Nothing was written."""

    def __init__(self, execution_id: str, version: int, holder: str | None) -> None:
        HarelError.__init__(
            self,
            f"execution {execution_id!r}: the lease expired before the commit "
            f"({'now held by ' + holder if holder else 'released'}); the events are left to the next holder",
        )
        self.execution_id = execution_id
        self.expected = version
        self.found = version
        self.holder = holder


class ExecutionTooLarge(HarelError):
    """A commit would push the execution's document past what MongoDB can store (16 MiB). `spawns` and
    `spawn_bytes`: how many of the commit's entries are a fork's spawns, and their bytes (0 without a fork),
    so the message can give the fork's arithmetic."""

    def __init__(
        self, execution_id: str, size: int, limit: int, *, spawns: int = 0, spawn_bytes: int = 0
    ) -> None:
        self.execution_id = execution_id
        self.size = size
        self.limit = limit
        self.spawns = spawns
        self.spawn_bytes = spawn_bytes
        fork = ""
        if spawns:
            fork = (
                f"; {spawn_bytes} bytes of it are the fork's {spawns} spawns, about {spawn_bytes // spawns} "
                "bytes each: every region's spawn carries a copy of the context and the ids of all the "
                "regions, so a fork fits only while regions x (context + regions' ids) stays under the limit"
                " (fewer regions, or a smaller context)"
            )
        super().__init__(
            f"execution {execution_id!r}: document would be about {size} bytes, over the {limit}-byte "
            f"limit{fork}; keep large payloads out of the execution context (store a reference instead)"
        )


class ContextTooLarge(ExecutionTooLarge):
    """An execution's state (`data`: its context, with the engine's bookkeeping) would pass the state limit,
    refused well before MongoDB's 16 MiB so the document keeps room for its mailbox and its rings. A kind of
    ExecutionTooLarge: the step is refused and the execution parked the same way."""

    def __init__(self, execution_id: str, size: int, limit: int) -> None:
        HarelError.__init__(
            self,
            f"execution {execution_id!r}: its state (the context with it) would be {size} bytes, over the "
            f"{limit}-byte limit; keep large data outside the context and store a reference to it",
        )
        self.execution_id = execution_id
        self.size = size
        self.limit = limit
        self.spawns = 0
        self.spawn_bytes = 0


class StepTooLarge(HarelError):
    """One step emitted and spawned more entries than an execution numbers per step."""

    def __init__(self, execution_id: str, count: int, limit: int) -> None:
        self.execution_id = execution_id
        self.count = count
        self.limit = limit
        super().__init__(
            f"execution {execution_id!r}: one step emitted and spawned {count} entries, more than the {limit} "
            "a step may; split the work over several steps"
        )


class MailboxFull(HarelError):
    """An execution's mailbox is at its size limit: the sender should send again later."""

    def __init__(self, execution_id: str, limit: int) -> None:
        self.execution_id = execution_id
        self.limit = limit
        super().__init__(
            f"execution {execution_id!r}: its mailbox holds {limit} bytes of pending events, its limit; "
            "send again once its workers have caught up"
        )


class EventTooLarge(HarelError):
    """An event larger than a whole mailbox may hold: no amount of waiting lets it in."""

    def __init__(self, execution_id: str, size: int, limit: int) -> None:
        self.execution_id = execution_id
        self.size = size
        self.limit = limit
        super().__init__(
            f"event for execution {execution_id!r} is {size} bytes, more than a mailbox holds ({limit} bytes); "
            "keep large data outside the engine and send a reference to it"
        )


class UnknownExecution(HarelError):
    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        super().__init__(f"no execution with id {execution_id!r}")


class UnreadableExecution(HarelError):
    """A stored execution document this version cannot read: its `data` nested past what the parser takes
    (stored by an older version, or by hand), a field of the wrong type or shape, a malformed mailbox entry.
    `what` names the field and why, bounded. A worker that claims it parks it with this error, once, rather
    than try it again at every lease; `harel status` shows it and `harel dead list` lists it.

    Raised by the claim that read it, it carries that claim's lease `owner` (which fences the park) and the
    head event's id and name as stored ("-" where they are not readable either); elsewhere they are None."""

    def __init__(
        self,
        execution_id: str,
        what: str,
        *,
        owner: str | None = None,
        event_id: str | None = None,
        event: str | None = None,
    ) -> None:
        self.execution_id = execution_id
        self.what = what
        self.owner = owner
        self.event_id = event_id
        self.event = event
        super().__init__(f"execution {execution_id!r} cannot be read: {what}")


class ExecutionFinished(HarelError):
    """An event or a cancel for an execution that has already finished: nothing would handle it."""

    def __init__(self, execution_id: str, status: str) -> None:
        self.execution_id = execution_id
        self.status = status
        super().__init__(f"execution {execution_id!r} has finished ({status}): it takes no more events")


# --- charts and events -------------------------------------------------------------------------------


class ChartError(HarelError):
    """A chart definition is malformed. `problems` lists every `path: problem` found."""

    def __init__(self, chart_id: str | None, problems: list[str]) -> None:
        self.chart_id = chart_id
        self.problems = problems
        head = f"chart {chart_id!r}" if chart_id else "chart"
        super().__init__(f"{head} is invalid:\n  " + "\n  ".join(problems))


class UnknownChart(HarelError):
    def __init__(self, chart_id: str, version: int | None = None) -> None:
        self.chart_id = chart_id
        self.version = version
        at = f" version {version}" if version is not None else ""
        super().__init__(f"no chart {chart_id!r}{at} is registered")


class UnknownEvent(HarelError):
    """An event name no state of the chart handles (raised where an event enters: `harel send`, the API)."""

    def __init__(self, chart_id: str, event: str, known: list[str], instead: str = "") -> None:
        self.chart_id = chart_id
        self.event = event
        self.known = known
        said = f"chart {chart_id!r} has no transition on event {event!r}; known: {', '.join(known)}"
        super().__init__(f"{said}; {instead}" if instead else said)


class UnknownAction(HarelError):
    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"no {kind} named {name!r} is registered")


class InvalidDuration(HarelError, ValueError):
    """A duration that is not a number of seconds or a number with `ms`, `s`, `m`, `h` or `d`."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(
            f"invalid duration {text!r}: use a number with ms, s, m, h or d (250ms, 2s, 1.5s, 5m, 1h, 3d) "
            "or a plain number of seconds"
        )


class InvalidSend(HarelError):
    """An action addressed an event to a recipient this execution does not have (no parent, no such sibling)."""

    def __init__(self, execution_id: str, to: str, reason: str) -> None:
        self.execution_id = execution_id
        self.to = to
        self.reason = reason
        super().__init__(f"execution {execution_id!r} cannot send to {to!r}: {reason}")


class InvalidExecutionId(HarelError, ValueError):
    """An execution id a client may not use: empty, or shaped like the id of a region's child execution."""

    def __init__(self, execution_id: str, reason: str) -> None:
        self.execution_id = execution_id
        self.reason = reason
        super().__init__(f"execution id {execution_id!r} cannot be used: {reason}")


class ExecutionIdTaken(HarelError):
    """A start under an id that an execution started with another chart or another context already has."""

    def __init__(self, execution_id: str, chart_id: str) -> None:
        self.execution_id = execution_id
        self.chart_id = chart_id
        super().__init__(
            f"execution {execution_id!r} already exists, started on chart {chart_id!r} with another request; "
            "a start under a taken id must repeat its chart and context, or choose another id"
        )


class InvalidEventId(HarelError, ValueError):
    """An event id a client may not choose: empty, or of a form the engine gives its own events, so that
    deduplication would silently take one for the other."""

    def __init__(self, event_id: str, reason: str) -> None:
        self.event_id = event_id
        self.reason = reason
        super().__init__(f"event id {event_id!r} cannot be used: {reason}")


class InvalidContext(HarelError, ValueError):
    """A context value (or event data) that is not strict JSON. `origin` says who supplied it, `key_path` where
    in the value the problem is (`order.items.2.price`; empty for the value itself)."""

    def __init__(self, origin: str, key_path: str, reason: str) -> None:
        self.origin = origin
        self.key_path = key_path
        self.reason = reason
        where = f" at {key_path!r}" if key_path else ""
        super().__init__(f"{origin}{where}: {reason}")


class StepLimitExceeded(HarelError):
    """One step kept going: eventless (`always`) transitions kept firing, or events sent to `self` kept coming.
    `recent` lists the last transitions or events, which show the loop."""

    def __init__(self, execution_id: str, what: str, limit: int, recent: list[str]) -> None:
        self.execution_id = execution_id
        self.what = what
        self.limit = limit
        self.recent = recent
        super().__init__(
            f"execution {execution_id!r}: more than {limit} {what} in one step, last: {', '.join(recent)}"
        )


# --- partitions ---------------------------------------------------------------------------------------------


class PartitionsUnreadable(HarelError):
    """The deployment's partition map (`harel_meta`, `_id: "partitions"`) cannot be used as stored."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"the partition map in harel_meta cannot be used: {problem}")


class UnknownZone(HarelError):
    """A worker asked to look for work in a zone the deployment's partition map does not have."""

    def __init__(self, missing: list[str], known: list[str]) -> None:
        self.missing = missing
        self.known = known
        super().__init__(
            f"no zone {', '.join(missing)} in this deployment's partition map; its zones: {', '.join(known)} "
            "(`harel partitions show` lists them)"
        )


class PartitionCountChanged(HarelError):
    """`harel partitions init` with another P than the deployment was partitioned with: every execution's `p`
    would change, and the stored ones could no longer be found by their shard key."""

    def __init__(self, stored: int, requested: int) -> None:
        self.stored = stored
        self.requested = requested
        super().__init__(
            f"this deployment is partitioned with P = {stored}, not {requested}: P is fixed once executions "
            f"carry it (changing it means resharding every document); run with --partitions {stored}"
        )


# --- deployment (start-up checks) --------------------------------------------------------------------


class DeploymentCheckError(HarelError):
    """A deployment setting that can lose acknowledged writes. Carries what was found, what is required, the fix."""

    check = "deployment"

    def __init__(self, found: str, required: str, fix: str) -> None:
        self.found = found
        self.required = required
        self.fix = fix
        super().__init__(f"{self.check}: found {found}, required {required}. Fix: {fix}")


class StandaloneDeploymentError(DeploymentCheckError):
    check = "deployment"


class WeakWriteConcernError(DeploymentCheckError):
    check = "write concern"


class WeakReadConcernError(DeploymentCheckError):
    check = "read concern"


class ReadPreferenceError(DeploymentCheckError):
    check = "read preference"


class NotPrimaryError(DeploymentCheckError):
    """A direct connection to a replica-set member that is not the primary: its reads are stale, writes fail."""

    check = "primary"


class RetryableWritesDisabledError(DeploymentCheckError):
    check = "retryable writes"


class CollationError(DeploymentCheckError):
    check = "collation"


class UnsupportedServerError(DeploymentCheckError):
    check = "server version"


class FeatureCompatibilityError(DeploymentCheckError):
    """The binary is new enough, but its feature compatibility version keeps an older release's rules."""

    check = "feature compatibility"


class ShardingError(DeploymentCheckError):
    """A sharded cluster whose `executions` collection is not partitioned as the engine needs: claims and
    single-execution commands would reach every shard, or be refused by the routers."""

    check = "sharding"


class DeploymentRefused(HarelError):
    """Start-up refused: one or more deployment checks failed. `errors` holds every one of them."""

    def __init__(self, errors: list[DeploymentCheckError]) -> None:
        self.errors = errors
        super().__init__("refusing to start on this deployment:\n  " + "\n  ".join(str(e) for e in errors))


class ConnectionFailed(HarelError):
    """The deployment did not answer before the deadline. The URL is shown with its password redacted."""

    def __init__(self, redacted_url: str, waited: float, last_error: str) -> None:
        self.url = redacted_url
        self.waited = waited
        self.last_error = last_error
        super().__init__(f"could not reach {redacted_url} within {waited:.1f}s: {last_error}")


class ConnectionRejected(HarelError):
    """The deployment answered and rejected this client. Waiting cannot change that, so it is never retried."""

    def __init__(self, message: str, fix: str) -> None:
        self.fix = fix
        super().__init__(f"{message}. Fix: {fix}")


class AuthenticationFailed(ConnectionRejected):
    """The server refused the credentials. Names the user and the database that holds it, never the password."""

    def __init__(self, user: str | None, database: str, redacted_url: str, reason: str) -> None:
        self.user = user
        self.database = database
        self.url = redacted_url
        self.reason = reason
        who = f"user {user}" if user else "the client certificate's subject"
        super().__init__(
            f"authentication failed for {who} on DB {database} at {redacted_url}: {reason}",
            "check the user name, the password and authSource in the URL (an @, :, / or % in the password "
            "must be percent-encoded)",
        )


class TLSFailed(ConnectionRejected):
    """The TLS handshake with a member failed for a reason a retry cannot change (its certificate, ours, the
    protocol)."""

    def __init__(self, hosts: list[str], reason: str, redacted_url: str) -> None:
        self.hosts = hosts
        self.reason = reason
        self.url = redacted_url
        super().__init__(
            f"TLS handshake with {', '.join(hosts)} failed at {redacted_url}: {reason}",
            "give the CA that signed the server's certificate with tlsCAFile=, connect by a host name the "
            "certificate lists, and check the client certificate (tlsCertificateKeyFile=) if the server "
            "requires one",
        )


# --- the deployment, during a command ----------------------------------------------------------------


class DeploymentError(HarelError):
    """A command failed on the deployment, or the deployment refused it. `kind` and `message` are the
    driver's (NetworkTimeout, WTimeoutError, ...); the driver's error is the `__cause__`."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")


class DeploymentUnavailable(DeploymentError):
    """The deployment did not answer in time: unreachable, no primary, a timeout, or a write a majority did
    not acknowledge within its bound. Trying again later can succeed."""


class CommitOutcomeUnknown(DeploymentUnavailable):
    """A commit was sent and the deployment became unavailable before it answered: the commit may or may not
    have been applied. The stored version (and the dedupe mark of its last event) says which."""

    def __init__(self, execution_id: str, kind: str, message: str) -> None:
        self.execution_id = execution_id
        super().__init__(kind, message)


class InvalidURL(HarelError):
    def __init__(self, redacted_url: str, reason: str) -> None:
        self.url = redacted_url
        self.reason = reason
        super().__init__(f"invalid store URL {redacted_url}: {reason}")


class EndpointUnavailable(HarelError):
    """The worker's HTTP endpoints (/healthz, /readyz, /metrics) cannot listen where they were told to."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(
            f"cannot listen on {host}:{port} for /healthz, /readyz and /metrics ({reason}); stop what holds "
            "the port or choose another with --http-port / HAREL_HTTP_PORT (0 turns the endpoints off)"
        )


class InvalidArgument(HarelError):
    """A command-line or API argument that cannot be used as given (bad JSON, a bad option value)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"{name}: {reason}")


class InvalidBackupWindow(InvalidArgument):
    """HAREL_BACKUP_WINDOW (how recent a successful backup must be for `harel check`) is not a duration."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(
            "HAREL_BACKUP_WINDOW",
            f"{text!r} is not a duration: give hours as 26h, or 90m, 2d, 3600s, or seconds alone",
        )


# --- local server ------------------------------------------------------------------------------------


class DevServerNotInstalled(HarelError):
    """What was asked for lives in harel-dev, the development distribution (sdk/dev: the embedded
    `mongomock://` backend and the local server of `harel dev`), and this environment has only the production
    `harel`."""

    def __init__(self, needed_by: str) -> None:
        self.needed_by = needed_by
        super().__init__(
            f"{needed_by} is in harel-dev, the development distribution, which is not installed here; install "
            "it with `pip install ./sdk ./sdk/dev` from the root of a harel-stack checkout"
        )


class LocalDataError(HarelError):
    """The local server's data file cannot be used: unreadable, not a harel.local snapshot, or in use by
    another server. The file is left exactly as it was."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"data file {path}: {reason}")


class LocalServerError(HarelError):
    """The local server cannot listen where it was asked to (the address is in use or not available)."""

    def __init__(self, address: str, reason: str) -> None:
        self.address = address
        self.reason = reason
        super().__init__(f"cannot listen on {address}: {reason}")


# --- async actions and guards ------------------------------------------------------------------------


class PermanentError(HarelError):
    """Raise it (or an exception of a class deriving from it) from an action or guard for a failure no
    retry can change: the execution is parked at once, with the error and its traceback, instead of being
    tried `max_attempts` times."""


class StepTimedOut(HarelError):
    """A step's actions ran longer than the worker's maximum step time: its lease was no longer extended, so
    another worker may have taken the execution over; the attempt failed (it is retried like any action that
    raises)."""

    def __init__(self, execution_id: str, event: str, seconds: float, limit: float) -> None:
        self.execution_id = execution_id
        self.event = event
        self.seconds = seconds
        self.limit = limit
        super().__init__(
            f"the step of {event!r} took {seconds:.1f}s, past the maximum step time of {limit:g}s; bound the "
            "action's calls with timeouts, or give the worker a longer --max-step-seconds (HAREL_MAX_STEP_SECONDS)"
        )


class LeaseExpired(HarelError):
    """The leases on an execution ran out `attempts` times before any step of its head event was committed:
    each holder stopped or outlived its lease. Parked, so the event's actions are not run again without end."""

    def __init__(self, event: str, attempts: int, previous_owner: str, lease: float, max_step: float) -> None:
        self.event = event
        self.attempts = attempts
        self.previous_owner = previous_owner
        super().__init__(
            f"the lease ran out {attempts} times before a step of {event!r} was committed (last held by "
            f"{previous_owner}); a step may run {max_step:g}s with its lease of {lease:g}s extended, so its "
            "actions outlived that or their workers stopped"
        )


class AsyncCallTimeout(HarelError):
    """An `async def` action or guard did not finish within the worker's async timeout: it was cancelled and
    the attempt failed (it is retried like any action that raises)."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(
            f"async {what} did not finish within {timeout:g}s and was cancelled; make it faster, or give the "
            "worker a longer --async-timeout (HAREL_ASYNC_TIMEOUT)"
        )


class AsyncUnavailable(HarelError):
    """An `async def` action or guard was called where no worker's event loop runs (a bare
    `interpreter.step`, a worker that was not started)."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(
            f"async {what} needs a running worker's event loop (Worker.start(), harel worker, harel dev); "
            "none runs in this process"
        )


class WaitTimedOut(HarelError):
    """A client waited as long as it was told to (`--timeout`); what it waited for goes on without it."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"{what} after {timeout:g}s; it goes on without this wait")


class PauseNotAcknowledged(WaitTimedOut):
    """`harel pause --wait` gave up: live workers (`waiting`, their ids) did not acknowledge the pause within
    `timeout` seconds. The pause stands: they stop once they hear of it, and `harel resume` lifts it."""

    def __init__(self, waiting: list[str], timeout: float) -> None:
        HarelError.__init__(
            self,
            f"{len(waiting)} live worker(s) did not acknowledge the pause within {timeout:g}s: "
            f"{', '.join(waiting)}; the pause stands (`harel resume` lifts it)",
        )
        self.what = "the pause's acknowledgements"
        self.timeout = timeout
        self.waiting = waiting


class NotParked(HarelError):
    """`harel dead retry|drop` of an execution that has no dead letter."""

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        super().__init__(
            f"execution {execution_id!r} has no dead letter: nothing of it waits for an operator"
        )
