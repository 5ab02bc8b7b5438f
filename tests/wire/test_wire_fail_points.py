"""The server's `failCommand` fail point against PyMongo's own retry logic, on the replica set under test.

Each test confines the fail point to its own client by appName, so the test's checking client and any other
client of the deployment are never caught.

Marked `fake_server`: these tests prove the test replica set (and, where HAREL_TEST_MONGO_URL is set, that a
real deployment agrees with it), not harel; harel's own behaviour over the same sockets is in the unmarked
wire tests and the conformance suite.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient, ReturnDocument
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError

from tests.accounting import CommandAccounting
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

RETRYABLE = ["RetryableWriteError"]
NOT_WRITABLE_PRIMARY = 10107
SHUTDOWN_IN_PROGRESS = 91
BAD_VALUE = 2


def not_writable_primary(
    admin: MongoClient[Any], app_name: str, command: str, times: int = 1
) -> AbstractContextManager[None]:
    """Fail `command` from `app_name` as a stepped-down primary does, labelled retryable."""
    return fail_command(
        admin,
        {"times": times},
        failCommands=[command],
        errorCode=NOT_WRITABLE_PRIMARY,
        errorLabels=RETRYABLE,
        appName=app_name,
    )


@pytest.fixture
def app_name() -> str:
    return f"wire-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def accounting() -> CommandAccounting:
    return CommandAccounting()


@pytest.fixture
def admin(mongo_rs: Deployment) -> Iterator[MongoClient[Any]]:
    """An uncaught client: arms fail points and checks the data."""
    with MongoClient(mongo_rs.url, appName="wire-admin", **CLIENT_OPTIONS) as client:
        yield client


@pytest.fixture
def client(mongo_rs: Deployment, app_name: str, accounting: CommandAccounting) -> Iterator[MongoClient[Any]]:
    """The client under test: the fail points catch its commands only."""
    with MongoClient(
        mongo_rs.url, appName=app_name, event_listeners=[accounting], **CLIENT_OPTIONS
    ) as client:
        yield client


def test_retryable_error_is_retried_once_and_succeeds(
    client: MongoClient[Any],
    admin: MongoClient[Any],
    mongo_rs: Deployment,
    app_name: str,
    accounting: CommandAccounting,
) -> None:
    with not_writable_primary(admin, app_name, "insert"):
        client[mongo_rs.db_name].events.insert_one({"_id": "e1"})

    assert admin[mongo_rs.db_name].events.count_documents({}) == 1
    assert accounting.tally(command="insert").commands == 2
    assert accounting.tally(command="insert").failures == 1


def test_server_labels_a_retryable_code_itself(
    client: MongoClient[Any],
    admin: MongoClient[Any],
    mongo_rs: Deployment,
    app_name: str,
    accounting: CommandAccounting,
) -> None:
    admin[mongo_rs.db_name].counters.insert_one({"_id": "c", "n": 0})
    with fail_command(
        admin, {"times": 1}, failCommands=["findAndModify"], errorCode=SHUTDOWN_IN_PROGRESS, appName=app_name
    ):
        after = client[mongo_rs.db_name].counters.find_one_and_update(
            {"_id": "c"}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
        )

    assert after == {"_id": "c", "n": 1}
    assert accounting.tally(command="findAndModify").commands == 2


def test_both_attempts_failing_surfaces_the_error_and_changes_nothing(
    client: MongoClient[Any],
    admin: MongoClient[Any],
    mongo_rs: Deployment,
    app_name: str,
    accounting: CommandAccounting,
) -> None:
    admin[mongo_rs.db_name].executions.insert_one({"_id": "x", "version": 3})
    with (
        not_writable_primary(admin, app_name, "update", times=2),
        pytest.raises(PyMongoError) as caught,
    ):
        client[mongo_rs.db_name].executions.update_one({"_id": "x", "version": 3}, {"$set": {"version": 4}})

    assert caught.value.has_error_label("RetryableWriteError")
    assert admin[mongo_rs.db_name].executions.find_one({"_id": "x"}) == {"_id": "x", "version": 3}
    assert accounting.tally(command="update").commands == 2
    # Both activations are spent: the same write now goes through.
    client[mongo_rs.db_name].executions.update_one({"_id": "x", "version": 3}, {"$set": {"version": 4}})
    assert admin[mongo_rs.db_name].executions.find_one({"_id": "x"}) == {"_id": "x", "version": 4}


def test_a_non_retryable_error_is_not_retried(
    client: MongoClient[Any],
    admin: MongoClient[Any],
    mongo_rs: Deployment,
    app_name: str,
    accounting: CommandAccounting,
) -> None:
    with (
        fail_command(admin, {"times": 1}, failCommands=["insert"], errorCode=BAD_VALUE, appName=app_name),
        pytest.raises(OperationFailure) as caught,
    ):
        client[mongo_rs.db_name].events.insert_one({"_id": "e1"})

    assert caught.value.code == BAD_VALUE
    assert accounting.tally(command="insert").commands == 1
    assert admin[mongo_rs.db_name].events.count_documents({}) == 0


def test_closed_connection_is_retried_and_applied_once(
    client: MongoClient[Any], admin: MongoClient[Any], mongo_rs: Deployment, app_name: str
) -> None:
    admin[mongo_rs.db_name].counters.insert_one({"_id": "c", "n": 0})
    with fail_command(admin, {"times": 1}, failCommands=["update"], closeConnection=True, appName=app_name):
        client[mongo_rs.db_name].counters.update_one({"_id": "c"}, {"$inc": {"n": 1}})

    assert admin[mongo_rs.db_name].counters.find_one({"_id": "c"}) == {"_id": "c", "n": 1}


def test_closed_connection_without_retryable_writes_surfaces(
    admin: MongoClient[Any], mongo_rs: Deployment, app_name: str
) -> None:
    admin[mongo_rs.db_name].counters.insert_one({"_id": "c", "n": 0})
    options = {**CLIENT_OPTIONS, "retryWrites": False}
    with (
        MongoClient(mongo_rs.url, appName=app_name, **options) as client,
        fail_command(admin, {"times": 1}, failCommands=["update"], closeConnection=True, appName=app_name),
        pytest.raises(AutoReconnect),
    ):
        client[mongo_rs.db_name].counters.update_one({"_id": "c"}, {"$inc": {"n": 1}})

    # The server closes the connection before executing the command.
    assert admin[mongo_rs.db_name].counters.find_one({"_id": "c"}) == {"_id": "c", "n": 0}


def test_blocked_connection_times_out_the_client(
    admin: MongoClient[Any], mongo_rs: Deployment, app_name: str
) -> None:
    admin[mongo_rs.db_name].events.insert_one({"_id": "e1"})
    with (
        MongoClient(mongo_rs.url, appName=app_name, timeoutMS=300, **CLIENT_OPTIONS) as client,
        fail_command(
            admin,
            {"times": 1},
            failCommands=["find"],
            blockConnection=True,
            blockTimeMS=2000,
            appName=app_name,
        ),
        pytest.raises(PyMongoError) as caught,
    ):
        client[mongo_rs.db_name].events.find_one({"_id": "e1"})

    assert caught.value.timeout
    assert admin[mongo_rs.db_name].events.find_one({"_id": "e1"}) == {"_id": "e1"}


def test_write_concern_error_retry_is_answered_from_the_recorded_outcome(
    client: MongoClient[Any],
    admin: MongoClient[Any],
    mongo_rs: Deployment,
    app_name: str,
    accounting: CommandAccounting,
) -> None:
    admin[mongo_rs.db_name].counters.insert_one({"_id": "c", "n": 0})
    with fail_command(
        admin,
        {"times": 1},
        failCommands=["update"],
        writeConcernError={"code": SHUTDOWN_IN_PROGRESS, "errmsg": "Replication is being shut down"},
        errorLabels=RETRYABLE,
        appName=app_name,
    ):
        result = client[mongo_rs.db_name].counters.update_one({"_id": "c"}, {"$inc": {"n": 1}})

    # The first attempt was applied and its reply lost to the write-concern error; the retry is not re-run.
    assert result.modified_count == 1
    assert admin[mongo_rs.db_name].counters.find_one({"_id": "c"}) == {"_id": "c", "n": 1}
    assert accounting.tally(command="update").commands == 2


def test_app_name_filter_spares_other_clients(
    client: MongoClient[Any], admin: MongoClient[Any], mongo_rs: Deployment, app_name: str
) -> None:
    admin[mongo_rs.db_name].events.insert_one({"_id": "e1"})
    with fail_command(admin, "alwaysOn", failCommands=["find"], errorCode=BAD_VALUE, appName=app_name):
        assert admin[mongo_rs.db_name].events.find_one() == {"_id": "e1"}
        for _ in range(2):
            with pytest.raises(OperationFailure):
                client[mongo_rs.db_name].events.find_one()
    assert client[mongo_rs.db_name].events.find_one() == {"_id": "e1"}


def test_async_client_retries_a_retryable_error(
    admin: MongoClient[Any], mongo_rs: Deployment, app_name: str, accounting: CommandAccounting
) -> None:
    async def insert() -> None:
        async with AsyncMongoClient(
            mongo_rs.url, appName=app_name, event_listeners=[accounting], **CLIENT_OPTIONS
        ) as client:
            await client[mongo_rs.db_name].events.insert_one({"_id": "e1"})

    with not_writable_primary(admin, app_name, "insert"):
        asyncio.run(insert())

    assert admin[mongo_rs.db_name].events.count_documents({}) == 1
    assert accounting.tally(command="insert").commands == 2


def test_write_applied_then_connection_lost_is_answered_from_the_record(
    client: MongoClient[Any],
    admin: MongoClient[Any],
    mongo_rs: Deployment,
    app_name: str,
    accounting: CommandAccounting,
) -> None:
    server = mongo_rs.require_fake("no server fail point applies a write and then drops the connection")
    admin[mongo_rs.db_name].counters.insert_one({"_id": "c", "n": 0})
    server.fail_after_apply("findAndModify", app_name=app_name)

    after = client[mongo_rs.db_name].counters.find_one_and_update(
        {"_id": "c"}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER
    )

    assert after == {"_id": "c", "n": 1}  # the retry's reply is the first attempt's recorded outcome
    assert admin[mongo_rs.db_name].counters.find_one({"_id": "c"}) == {"_id": "c", "n": 1}
    assert accounting.tally(command="findAndModify").commands == 2
    assert accounting.tally(command="findAndModify").failures == 1


def test_write_applied_then_connection_lost_without_retry_is_an_unknown_outcome(
    admin: MongoClient[Any], mongo_rs: Deployment, app_name: str
) -> None:
    server = mongo_rs.require_fake("no server fail point applies a write and then drops the connection")
    admin[mongo_rs.db_name].counters.insert_one({"_id": "c", "n": 0})
    server.fail_after_apply("update", app_name=app_name)
    options = {**CLIENT_OPTIONS, "retryWrites": False}

    with MongoClient(mongo_rs.url, appName=app_name, **options) as client, pytest.raises(AutoReconnect):
        client[mongo_rs.db_name].counters.update_one({"_id": "c"}, {"$inc": {"n": 1}})

    assert admin[mongo_rs.db_name].counters.find_one({"_id": "c"}) == {"_id": "c", "n": 1}
