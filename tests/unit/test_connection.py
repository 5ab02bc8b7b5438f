"""harel.connection: safe defaults, waiting for the deployment, redaction, and every start-up rule on recorded
replies. A deployment that rejects the client (authentication, TLS) is in test_connection_rejected.py."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import threading
import time
from typing import Any

import pymongo
import pytest

from harel.cli.deployment import report_view
from harel.cli.output import Output
from harel.connection import (
    SOCKET_TIMEOUT_MS,
    STORE_COLLECTIONS,
    WRITE_CONCERN_TIMEOUT_MS,
    CheckReport,
    Status,
    attempts,
    check,
    check_async,
    client_arguments,
    client_settings,
    connect,
    connect_async,
    connecting,
    embedded_backend,
    embedded_report,
    evaluate,
    redact,
)
from harel.errors import (
    CollationError,
    ConnectionFailed,
    DeploymentRefused,
    FeatureCompatibilityError,
    InvalidArgument,
    InvalidURL,
    NotPrimaryError,
    ReadPreferenceError,
    RetryableWritesDisabledError,
    StandaloneDeploymentError,
    UnsupportedServerError,
    WeakReadConcernError,
    WeakWriteConcernError,
)
from tests.loopback import mongod
from tests.unit.recorded_replies import (
    RecordedAsyncClient,
    RecordedClient,
    deployment_replies,
    safe_client,
    scenario,
)

PASSWORD = "pw-" + secrets.token_hex(8)
SET_URL = (
    f"mongodb://harel:{PASSWORD}@mongo1:27017,mongo2:27017,mongo3:27017/harel?replicaSet=rs0&authSource=admin"
)
ONE_MEMBER_URL = f"mongodb://harel:{PASSWORD}@mongo1:27017/harel?replicaSet=rs0&authSource=admin"
STANDALONE_URL = f"mongodb://harel:{PASSWORD}@localhost:27017/harel?authSource=admin"
MONGOS_URL = f"mongodb://harel:{PASSWORD}@router1:27017,router2:27017/harel?authSource=admin"
SECONDARY_URL = f"mongodb://harel:{PASSWORD}@mongo2:27017/harel?authSource=admin&directConnection=true"
WEAK_URL = (
    f"mongodb://u:{PASSWORD}@h1,h2/?replicaSet=rs0&w=1&readPreference=secondaryPreferred"
    "&retryWrites=false&readConcernLevel=local"
)

OK, WARNING, ERROR, RELAXED = Status.OK, Status.WARNING, Status.ERROR, Status.RELAXED
# What every scenario shares with a safe client: the client's own settings pass, auth is on, TLS is off.
CLIENT_ROWS = {
    "server version": OK,
    "feature compatibility": OK,
    "write concern": OK,
    "read concern": OK,
    "read preference": OK,
    "write concern timeout": OK,
    "collation": OK,
    "authentication": OK,
    "TLS": WARNING,
}


def report_for(name: str, url: str, *, allow_standalone: bool = False, **replace: str) -> CheckReport:
    replies = deployment_replies(scenario(name, **replace))
    return evaluate(replies, client_settings(safe_client(url)), allow_standalone=allow_standalone)


def statuses(report: CheckReport) -> dict[str, Status]:
    return {f.check: f.status for f in report.findings}


def finding(report: CheckReport, check_name: str) -> Any:
    (match,) = [f for f in report.findings if f.check == check_name]
    return match


def render_report(report: CheckReport, url: str) -> str:
    """What `harel check` prints off a terminal."""
    return "\n".join(line.plain for line in report_view(report, url, Output(as_json=False)))


def everything_said(report: CheckReport) -> str:
    return "\n".join(
        [
            render_report(report, redact(WEAK_URL)),
            json.dumps(report.document()),
            *(str(e) for e in report.errors),
        ]
    )


# --- the six recorded deployments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "url", "rows", "errors"),
    [
        pytest.param(
            "standalone",
            STANDALONE_URL,
            {"deployment": ERROR, "retryable writes": ERROR, "partitions": OK},
            [StandaloneDeploymentError, RetryableWritesDisabledError],
            id="standalone",
        ),
        pytest.param(
            "rs1",
            ONE_MEMBER_URL,
            {
                "deployment": OK,
                "primary": OK,
                "retryable writes": OK,
                "cluster default": OK,
                "fault tolerance": WARNING,
                "partitions": OK,
            },
            [],
            id="one-member-set",
        ),
        pytest.param(
            "rs3",
            SET_URL,
            {
                "deployment": OK,
                "primary": OK,
                "retryable writes": OK,
                "cluster default": OK,
                "fault tolerance": OK,
                "partitions": OK,
            },
            [],
            id="three-member-set",
        ),
        pytest.param(
            "psa",
            SET_URL,
            {
                "deployment": OK,
                "primary": OK,
                "retryable writes": OK,
                "cluster default": OK,
                "fault tolerance": WARNING,
                "partitions": OK,
            },
            [],
            id="two-data-one-arbiter",
        ),
        pytest.param(
            "mongos",
            MONGOS_URL,
            {
                "feature compatibility": WARNING,
                "deployment": OK,
                "retryable writes": OK,
                "cluster default": OK,
                "sharding": OK,
                "shards": OK,
            },
            [],
            id="mongos",
        ),
        pytest.param(
            "secondary",
            SECONDARY_URL,
            {
                "deployment": OK,
                "primary": ERROR,
                "retryable writes": OK,
                "cluster default": OK,
                "fault tolerance": OK,
                "partitions": OK,
            },
            [NotPrimaryError],
            id="direct-to-secondary",
        ),
    ],
)
def test_each_recorded_deployment_gives_its_findings(
    name: str, url: str, rows: dict[str, Status], errors: list[type]
) -> None:
    report = report_for(name, url)

    assert statuses(report) == {**CLIENT_ROWS, **rows}
    assert [type(e) for e in report.errors] == errors
    assert report.passed is not errors
    for f in report.findings:
        assert (f.error is not None) == (f.status is ERROR)
        assert (f.fix is not None) == (f.status is not OK)
    assert PASSWORD not in everything_said(report)


def test_standalone_says_what_it_is_and_how_to_fix_it() -> None:
    report = report_for("standalone", STANDALONE_URL)

    shape = finding(report, "deployment")
    assert "standalone" in shape.found
    assert "--replSet" in shape.fix and "HAREL_DEV=1" in shape.fix
    assert "standalone cannot retry writes" in finding(report, "retryable writes").found


def test_psa_set_reports_the_implicit_w1_default_and_flags_the_stall() -> None:
    report = report_for("psa", SET_URL)

    assert report.deployment.startswith("replica set rs0: 2 data-bearing members + 1 arbiter")
    assert finding(report, "cluster default").found == (
        "w=1 (implicit), unused: the client sets w=majority, j=true"
    )
    tolerance = finding(report, "fault tolerance")
    assert "2 data-bearing members + 1 arbiter" in tolerance.found and "stall" in tolerance.found
    assert "replace arbiters" in tolerance.fix


def test_psa_set_with_a_client_that_sets_no_write_concern_is_refused() -> None:
    # A client built without connect()'s defaults inherits the set's implicit w:1.
    bare = pymongo.MongoClient(SET_URL, connect=False)
    report = evaluate(deployment_replies(scenario("psa")), client_settings(bare))

    weak = finding(report, "write concern")
    assert weak.status is ERROR
    assert weak.found == "w=1, j=unset (w and j from the cluster default)"
    assert isinstance(weak.error, WeakWriteConcernError)
    assert finding(report, "read concern").found == "local (the cluster default)"
    default = finding(report, "cluster default")
    assert (default.status, default.found) == (WARNING, "w=1 (implicit)")
    assert "setDefaultRWConcern" in default.fix


def test_one_member_set_is_fine_for_development_only() -> None:
    report = report_for("rs1", ONE_MEMBER_URL)

    assert finding(report, "fault tolerance").found == "1 member: no failover"
    assert finding(report, "fault tolerance").fix.startswith("fine for development")
    assert report.passed


def test_connection_to_a_secondary_names_the_primary() -> None:
    report = report_for("secondary", SECONDARY_URL)

    wrong_member = finding(report, "primary")
    assert wrong_member.found == "secondary mongo2:27017, direct connection (primary: mongo1:27017)"
    assert "replicaSet=rs0" in wrong_member.fix and "directConnection=true" in wrong_member.fix


def test_direct_connection_to_the_primary_is_a_warning() -> None:
    url = f"mongodb://harel:{PASSWORD}@mongo1:27017/harel?authSource=admin&directConnection=true"
    report = report_for("rs3", url)

    assert finding(report, "primary").status is WARNING
    assert "not followed after a failover" in finding(report, "primary").fix


# --- client settings -----------------------------------------------------------------------------------------


def test_a_weak_url_reports_all_four_violations_in_one_run() -> None:
    report = report_for("rs3", WEAK_URL)

    assert [type(e) for e in report.errors] == [
        WeakWriteConcernError,
        WeakReadConcernError,
        ReadPreferenceError,
        RetryableWritesDisabledError,
    ]
    fixes = {f.check: f.fix for f in report.findings if f.status is ERROR}
    assert "change w=1 to w=majority" in fixes["write concern"]
    assert "change readConcernLevel=local to readConcernLevel=majority" in fixes["read concern"]
    assert "readPreference=secondaryPreferred" in fixes["read preference"]
    assert "retryWrites=false" in fixes["retryable writes"]

    with pytest.raises(DeploymentRefused) as refused:
        report.raise_for_errors()
    assert refused.value.errors == report.errors
    assert all(e.fix in str(refused.value) for e in report.errors)
    assert PASSWORD not in everything_said(report) + str(refused.value)


@pytest.mark.parametrize("spelling", ["journal=false", "JOURNAL=false"])
def test_a_majority_write_concern_without_the_journal_is_refused_as_weak(spelling: str) -> None:
    """w=majority is not enough: a write acknowledged before it reached the majority's journals can be lost
    when those members restart, so j=false is refused like w=1."""
    url = f"{SET_URL}&w=majority&{spelling}"
    report = report_for("rs3", url)

    weak = finding(report, "write concern")
    assert (weak.status, weak.found) == (ERROR, "w=majority, j=false")
    assert [type(e) for e in report.errors] == [WeakWriteConcernError]
    assert "change journal=false to journal=true" in weak.fix
    with pytest.raises(DeploymentRefused) as refused:
        report.raise_for_errors()
    assert [type(e) for e in refused.value.errors] == [WeakWriteConcernError]


def test_j_is_no_option_pymongo_knows_so_j_false_leaves_the_journal_on() -> None:
    """PyMongo spells the URL option `journal`; it ignores `j=false` with a warning, so the default
    journal=true still applies and the check passes the client."""
    url = f"{SET_URL}&w=majority&j=false"
    with pytest.warns(UserWarning, match="Unknown option"):
        report = report_for("rs3", url)

    assert finding(report, "write concern").status is OK
    assert report.passed


def test_safe_defaults_fill_what_the_url_leaves_unset() -> None:
    options = safe_client("mongodb://h1/").options

    assert options.write_concern.document == {
        "w": "majority",
        "j": True,
        "wtimeout": WRITE_CONCERN_TIMEOUT_MS,
    }
    assert options.read_concern.level == "majority"
    assert options.read_preference.mongos_mode == "primary"
    assert options.retry_writes is True
    assert options.timeout is None  # PyMongo would retry a retryable write as often as a timeoutMS allows
    assert options.pool_options.socket_timeout == SOCKET_TIMEOUT_MS / 1000  # PyMongo's own: no bound
    assert options.pool_options.appname == "harel"


def test_the_url_and_the_options_override_the_defaults_case_insensitively() -> None:
    url = "mongodb://h1/?W=1&READPREFERENCE=nearest&appName=mine&WTIMEOUTMS=5000"
    client = pymongo.MongoClient(url, **client_arguments(url, "harel", {"readConcernLevel": "local"}))

    assert client.options.write_concern.document == {"w": 1, "j": True, "wtimeout": 5000}
    assert client.options.read_preference.mongos_mode == "nearest"
    assert client.options.read_concern.level == "local"
    assert client.options.pool_options.appname == "mine"


@pytest.mark.parametrize(
    ("url", "socket_timeout"),
    [
        ("mongodb://h1/?SOCKETTIMEOUTMS=5000", 5.0),
        ("mongodb://h1/?socketTimeoutMS=0", None),  # the caller's choice: no bound
        # timeoutMS bounds every operation; PyMongo derives each reply's bound from what is left of it.
        ("mongodb://h1/?timeoutMS=2000", None),
    ],
)
def test_the_reply_bound_is_the_callers_when_the_url_sets_one(url: str, socket_timeout: float | None) -> None:
    client = pymongo.MongoClient(url, **client_arguments(url, "harel", {}))
    assert client.options.pool_options.socket_timeout == socket_timeout


# --- write concern timeout ---------------------------------------------------------------------------------


def write_concern_timeout(url: str, client: pymongo.MongoClient[Any] | None = None) -> Any:
    return finding(
        evaluate(deployment_replies(scenario("rs3")), client_settings(client or safe_client(url))),
        "write concern timeout",
    )


def test_waiting_for_a_majority_is_bounded_by_default() -> None:
    bound = write_concern_timeout(SET_URL)

    assert (bound.status, bound.found) == (OK, "wtimeoutMS=10000")


def test_a_wtimeout_in_the_url_is_kept_and_does_not_weaken_the_write_concern() -> None:
    url = SET_URL + "&wtimeoutMS=5000"
    report = evaluate(deployment_replies(scenario("rs3")), client_settings(safe_client(url)))

    assert finding(report, "write concern").found == "w=majority, j=true"
    assert finding(report, "write concern").status is OK
    assert finding(report, "write concern timeout").found == "wtimeoutMS=5000"
    assert report.passed


def test_a_timeout_of_the_callers_replaces_the_default_wtimeout() -> None:
    # With timeoutMS set PyMongo leaves wtimeout out of every command: adding one would only mislead.
    url = SET_URL + "&timeoutMS=20000"
    client = safe_client(url)

    assert client.options.write_concern.document == {"w": "majority", "j": True}
    assert client.options.timeout == 20.0
    bound = write_concern_timeout(url)
    assert (bound.status, bound.found) == (OK, "timeoutMS=20000 (every operation)")


@pytest.mark.parametrize(
    ("url", "found", "fix"),
    [
        (SET_URL + "&wtimeoutMS=0", "wtimeoutMS=0: no bound", "remove wtimeoutMS=0"),
        (SET_URL + "&timeoutMS=0", "timeoutMS=0: no bound", "remove timeoutMS=0"),
        (SET_URL + "&timeoutMS=0&wtimeoutMS=5000", "timeoutMS=0: no bound", "remove timeoutMS=0"),
    ],
    ids=["wtimeout-0", "timeout-0", "timeout-0-hides-wtimeout"],
)
def test_an_unbounded_client_is_a_warning(url: str, found: str, fix: str) -> None:
    bound = write_concern_timeout(url)

    assert (bound.status, bound.found) == (WARNING, found)
    assert fix in bound.fix and "wtimeoutMS=10000" in bound.fix


def test_a_client_built_without_connect_has_no_bound() -> None:
    bound = write_concern_timeout(SET_URL, pymongo.MongoClient(SET_URL, connect=False))

    assert (bound.status, bound.found) == (WARNING, "none")
    assert "set wtimeoutMS" in bound.fix


# --- collations and versions ---------------------------------------------------------------------------------


def test_a_store_collection_with_a_locale_collation_is_refused() -> None:
    report = report_for("rs3", SET_URL, listCollections="collated_listCollections")

    wrong = finding(report, "collation")
    assert isinstance(wrong.error, CollationError)
    assert wrong.found == "executions: locale en, strength 2; workers: locale fr, strength 1"
    assert "re-create executions, workers" in wrong.fix


def test_unlisted_collections_are_a_warning() -> None:
    report = report_for("rs3", SET_URL, listCollections="unauthorized_listCollections")

    assert finding(report, "collation").status is WARNING
    assert "not authorized" in finding(report, "collation").found


def test_collections_not_created_yet_pass() -> None:
    found = finding(report_for("rs1", ONE_MEMBER_URL), "collation").found
    assert found == "simple (no store collection in harel yet)"


def test_a_server_older_than_the_minimum_is_refused_with_the_reason() -> None:
    report = report_for("rs3", SET_URL, buildInfo="buildInfo_4_4")

    old = finding(report, "server version")
    assert isinstance(old.error, UnsupportedServerError)
    assert (old.found, old.required) == ("4.4.29", "5.0 or newer")
    assert "majority read concern cannot be disabled" in old.fix


# --- feature compatibility version ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "status", "found"),
    [
        ("fcv_4_4_getParameter", ERROR, "4.4"),
        ("fcv_upgrading_getParameter", ERROR, "4.4 (upgrading to 5.0)"),
        ("fcv_downgrading_getParameter", OK, "7.0 (downgrading from 8.0)"),
    ],
)
def test_the_feature_compatibility_version_decides_below_5_0(
    variant: str, status: Status, found: str
) -> None:
    report = report_for("rs3", SET_URL, getParameter=variant)

    fcv = finding(report, "feature compatibility")
    assert (fcv.status, fcv.found, fcv.required) == (status, found, "5.0 or newer")
    assert finding(report, "server version").status is OK  # an 8.0 binary: the version alone does not tell
    if status is ERROR:
        assert isinstance(fcv.error, FeatureCompatibilityError)
        assert "setFeatureCompatibilityVersion: '5.0'" in fcv.fix
        assert not report.passed


def test_a_user_not_allowed_to_read_the_feature_compatibility_version_gets_a_warning() -> None:
    report = report_for("rs3", SET_URL, getParameter="unauthorized_getParameter")

    fcv = finding(report, "feature compatibility")
    assert (fcv.status, fcv.found) == (WARNING, "unknown (not authorized)")
    assert "getParameter: 1, featureCompatibilityVersion: 1" in fcv.fix
    assert report.passed


def test_through_mongos_the_feature_compatibility_version_is_not_trusted() -> None:
    # A mongos before 8.3 answers getParameter with its own binary's version, not the cluster's.
    report = report_for("mongos", MONGOS_URL, getParameter="fcv_4_4_getParameter")

    fcv = finding(report, "feature compatibility")
    assert fcv.status is WARNING
    assert "mongos" in fcv.found and "each shard's primary" in fcv.fix


@pytest.mark.parametrize(("wire", "status"), [(25, OK), (12, ERROR)])
def test_without_build_info_the_wire_version_decides(wire: int, status: Status) -> None:
    replies = scenario("rs3", buildInfo="unauthorized_getDefaultRWConcern")
    replies["hello"] = {**replies["hello"], "maxWireVersion": wire}
    report = evaluate(deployment_replies(replies), client_settings(safe_client(SET_URL)))

    assert finding(report, "server version").status is status
    assert finding(report, "server version").found.startswith(f"wire version {wire}")


# --- the development override --------------------------------------------------------------------------------


def test_dev_override_relaxes_only_the_standalone_shape() -> None:
    report = report_for("standalone", STANDALONE_URL, allow_standalone=True)

    assert statuses(report)["deployment"] is RELAXED
    assert statuses(report)["retryable writes"] is RELAXED
    assert report.passed and report.dev_override
    report.raise_for_errors()
    assert "relaxed" in render_report(report, "url") and "development only" in render_report(report, "url")


def test_dev_override_does_not_relax_an_uninitiated_member() -> None:
    report = report_for("standalone", STANDALONE_URL, allow_standalone=True, hello="hello_uninitiated")

    assert finding(report, "deployment").status is ERROR
    assert "rs.initiate" in finding(report, "deployment").fix


def test_dev_override_logs_a_loud_warning_on_every_check(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = RecordedClient.for_url(STANDALONE_URL, scenario("standalone"))

    for _ in range(2):
        assert check(client, allow_standalone=True).passed
    loud = [r for r in caplog.records if r.name == "harel.connection" and r.levelno == logging.WARNING]
    assert len(loud) == 2
    assert all("DEVELOPMENT OVERRIDE" in r.getMessage() and "standalone" in r.getMessage() for r in loud)
    assert PASSWORD not in caplog.text


def test_dev_override_on_a_replica_set_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="harel.connection")
    check(RecordedClient.for_url(SET_URL, scenario("rs3")), allow_standalone=True)

    assert "relaxes nothing" in caplog.text


def test_without_the_override_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="harel.connection")
    assert not check(RecordedClient.for_url(STANDALONE_URL, scenario("standalone"))).passed
    assert caplog.records == []


# --- check / check_async gather the same replies -------------------------------------------------------------


def test_check_asks_eight_commands_and_evaluates_their_replies() -> None:
    url = f"mongodb://harel:{PASSWORD}@mongo1,mongo2,mongo3/appdb?replicaSet=rs0&authSource=admin"
    client = RecordedClient.for_url(
        url, scenario("rs3", getDefaultRWConcern="unauthorized_getDefaultRWConcern")
    )

    report = check(client)

    assert [(db, next(iter(command))) for db, command in client.commands] == [
        ("admin", "hello"),
        ("admin", "buildInfo"),
        ("admin", "getParameter"),
        ("admin", "getDefaultRWConcern"),
        ("appdb", "find"),
        ("config", "find"),
        ("admin", "listShards"),
        ("appdb", "listCollections"),
    ]
    assert client.commands[2][1] == {"getParameter": 1, "featureCompatibilityVersion": 1}
    assert client.commands[4][1] == {"find": "harel_meta", "filter": {"_id": "partitions"}, "limit": 1}
    assert client.commands[5][1]["filter"] == {"_id": "appdb.executions"}
    assert client.commands[-1][1]["filter"] == {"name": {"$in": list(STORE_COLLECTIONS)}}
    expected = evaluate(deployment_replies(client.replies, "appdb"), client_settings(client._client))
    assert report.document() == expected.document()
    assert finding(report, "cluster default").found.startswith("unknown (not authorized)")


def test_check_async_gives_the_same_report_as_check() -> None:
    replies = scenario("psa", listCollections="collated_listCollections")
    sync_report = check(RecordedClient.for_url(SET_URL, replies), db_name="other")
    async_client = RecordedAsyncClient.for_url(SET_URL, replies)

    async_report = asyncio.run(check_async(async_client, db_name="other"))  # type: ignore[arg-type]

    # Exceptions compare by identity, so the reports are compared as documents (error class names included).
    assert async_report.document() == sync_report.document()
    assert [type(e) for e in async_report.errors] == [CollationError]
    assert async_client.commands[-1][0] == "other"


# --- URLs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("mongodb://u:secretpw@h1,h2/db?replicaSet=rs0", "mongodb://u:***@h1,h2/db?replicaSet=rs0"),
        ("mongodb://u:se%40cret@h1/", "mongodb://u:***@h1/"),
        ("mongodb://u:se@cr/et@h1/db", "mongodb://u:***@h1/db"),
        ("mongodb+srv://u:secretpw@cluster0.example.net/", "mongodb+srv://u:***@cluster0.example.net/"),
        ("mongodb://u@h1/?authMechanism=MONGODB-X509", "mongodb://u@h1/?authMechanism=MONGODB-X509"),
        ("mongodb://h1/?appName=a@b", "mongodb://h1/?appName=a@b"),
        ("mongodb://u:pw@h1/?appName=a@b", "mongodb://u:***@b"),
        (
            "mongodb://h1/?tls=true&tlsCertificateKeyFilePassword=secretpw",
            "mongodb://h1/?tls=true&tlsCertificateKeyFilePassword=***",
        ),
        ("u:secretpw@h1", "u:***@h1"),
        ("http://u:secretpw@example.com/x", "http://u:***@example.com/x"),
    ],
)
def test_redact_hides_passwords_in_any_url(url: str, redacted: str) -> None:
    assert redact(url) == redacted


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://u:secretpw@example.com/", "expected a mongodb:// or mongodb+srv:// URL"),
        ("mongomock://", "embedded, in-process backend"),
        ("mongodb://u:secret@pw@h1/", "escaped"),
        ("mongodb://u:secretpw@h1:port/", "port"),
    ],
)
def test_a_url_that_is_not_a_mongodb_url_is_invalid_and_redacted(url: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as invalid:
        connect(url, deadline=0.1)

    assert reason in str(invalid.value)
    assert "secret" not in str(invalid.value) and "pw@" not in str(invalid.value)
    assert invalid.value.url == redact(url)


def test_embedded_urls_are_told_apart() -> None:
    assert [embedded_backend(u) for u in ("mongomock://", "MongoMock://", "mongodb://h1/")] == [
        "mongomock",
        "mongomock",
        None,
    ]
    report = embedded_report("mongomock://")
    assert report.embedded and report.passed and report.findings == ()
    with pytest.raises(InvalidURL):
        embedded_report("mongodb://h1/")


# --- waiting for the deployment ------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def quick_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Short attempts and pauses, so a deadline of about a second sees several attempts (PyMongo's server
    # selection gives up no sooner than half a second).
    monkeypatch.setattr(attempts, "FIRST_ATTEMPT", 0.1)
    monkeypatch.setattr(attempts, "MAX_ATTEMPT", 0.1)
    monkeypatch.setattr(connecting, "FIRST_PAUSE", 0.02)


def assert_gave_up(error: ConnectionFailed, port: int, deadline: float, log: str) -> None:
    assert error.url == f"mongodb://harel:***@127.0.0.1:{port}/harel"
    assert error.url in str(error)
    assert "[Errno 111]" in error.last_error  # connection refused
    assert error.waited >= deadline
    assert "attempt 1," in log and "attempt 2," in log
    assert PASSWORD not in str(error) + log


def test_connect_backs_off_until_the_deadline_then_fails_redacted(
    quick_attempts: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = closed_port()

    with pytest.raises(ConnectionFailed) as failed:
        connect(f"mongodb://harel:{PASSWORD}@127.0.0.1:{port}/harel", deadline=1.2)

    assert_gave_up(failed.value, port, 1.2, caplog.text)


def test_connect_async_backs_off_until_the_deadline_then_fails_redacted(
    quick_attempts: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = closed_port()

    with pytest.raises(ConnectionFailed) as failed:
        asyncio.run(connect_async(f"mongodb://harel:{PASSWORD}@127.0.0.1:{port}/harel", deadline=1.2))

    assert_gave_up(failed.value, port, 1.2, caplog.text)


def connect_in_a_thread(
    use_async: bool, url: str, deadline: float | None
) -> tuple[threading.Thread, list[Any]]:
    """Start connecting in a thread; the returned list receives the client (or the error)."""
    outcome: list[Any] = []

    async def connect_and_close() -> None:
        client = await connect_async(url, deadline=deadline)
        outcome.append(client)
        await client.close()

    def run() -> None:
        try:
            if use_async:
                asyncio.run(connect_and_close())
            else:
                client = connect(url, deadline=deadline)
                outcome.append(client)
                client.close()
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=run, name="connecting", daemon=True)
    thread.start()
    return thread, outcome


def not_ready_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not ready (attempt" in r.getMessage()]


@pytest.mark.parametrize(
    ("use_async", "deadline"), [(False, None), (True, 0)], ids=["sync-none", "async-zero"]
)
def test_without_a_deadline_connect_waits_until_the_deployment_answers(
    quick_attempts: None, caplog: pytest.LogCaptureFixture, use_async: bool, deadline: float | None
) -> None:
    caplog.set_level(logging.WARNING, logger="harel.connection")
    port = closed_port()
    thread, outcome = connect_in_a_thread(
        use_async, f"mongodb://127.0.0.1:{port}/?directConnection=true", deadline
    )

    # Longer than a short deadline would have allowed: it keeps trying, and says so on every attempt.
    waited = threading.Event()
    while len(not_ready_lines(caplog)) < 3:
        assert thread.is_alive(), outcome
        waited.wait(0.05)
    with mongod(port):
        thread.join(timeout=10)

    assert not thread.is_alive()
    assert [type(o) for o in outcome] == [pymongo.AsyncMongoClient if use_async else pymongo.MongoClient]
    lines = not_ready_lines(caplog)
    assert all("no deadline" in line for line in lines)
    for attempt, line in enumerate(lines[:3], start=1):
        assert f"attempt {attempt}," in line and "[Errno 111]" in line


def test_a_negative_deadline_is_refused() -> None:
    with pytest.raises(InvalidArgument) as refused:
        connect("mongodb://127.0.0.1:1/", deadline=-1)

    assert "0 to wait indefinitely" in str(refused.value)


def test_pauses_grow_exponentially_with_jitter_up_to_the_cap() -> None:
    patience = connecting.Patience("mongodb://h1/", deadline=3600.0)

    pauses = [patience.pause_after("refused") for _ in range(12)]

    for attempt, pause in enumerate(pauses, start=1):
        ceiling = min(connecting.MAX_PAUSE, connecting.FIRST_PAUSE * 2 ** (attempt - 1))
        assert pause is not None and ceiling / 2 <= pause <= ceiling
    assert max(p for p in pauses if p is not None) <= connecting.MAX_PAUSE


def test_no_pause_once_the_deadline_has_passed() -> None:
    patience = connecting.Patience("mongodb://h1/", deadline=1.0, started=time.monotonic() - 2.0)

    assert patience.pause_after("connection refused") is None
    assert patience.gave_up().last_error == "connection refused"
