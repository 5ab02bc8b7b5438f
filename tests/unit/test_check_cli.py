"""`harel check`: the table, --json, the dev override, exit codes, and no password in any output.

The deployment is played by recorded replies (tests/unit/replies) behind the CLI's `connect`; the same command
over sockets belongs to the wire tier.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harel import __version__
from harel.cli import deployment as check_command
from harel.cli import main, settings
from harel.cli.exits import exit_code_for
from harel.errors import (
    AuthenticationFailed,
    ChartError,
    ConnectionFailed,
    DeploymentRefused,
    InvalidURL,
    StoreConflict,
    TLSFailed,
    UnknownEvent,
    UnknownExecution,
    WeakWriteConcernError,
)
from tests.loopback import mongod, untrusted_tls
from tests.unit.recorded_replies import RecordedClient, scenario

PASSWORD = "pw-" + secrets.token_hex(8)
SET_URL = (
    f"mongodb://harel:{PASSWORD}@mongo1:27017,mongo2:27017,mongo3:27017/harel?replicaSet=rs0&authSource=admin"
)
STANDALONE_URL = f"mongodb://harel:{PASSWORD}@localhost:27017/harel?authSource=admin"
WEAK_URL = (
    f"mongodb://u:{PASSWORD}@h1,h2/?replicaSet=rs0&w=1&readPreference=secondaryPreferred"
    "&retryWrites=false&readConcernLevel=local"
)


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAREL_MONGO_URL", raising=False)
    monkeypatch.delenv("HAREL_DEV", raising=False)


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[RecordedClient]]:
    """Make the CLI's `connect` hand out a client answering from one recorded scenario; returns the clients
    it built so a test can see they were closed."""

    def serve(name: str, **replace: str) -> list[RecordedClient]:
        built: list[RecordedClient] = []

        def fake_connect(url: str, **_: Any) -> RecordedClient:
            built.append(RecordedClient.for_url(url, scenario(name, **replace)))
            return built[-1]

        monkeypatch.setattr(check_command, "connect", fake_connect)
        return built

    return serve


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- embedded backends ---------------------------------------------------------------------------------------


def test_the_embedded_backend_has_no_deployment_to_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "mongomock://")

    assert code == 0
    assert (
        out.strip() == "mongomock:// is an embedded, in-process backend (mongomock): no deployment to check."
    )


def test_without_a_url_the_embedded_default_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--json")

    assert code == 0
    document = json.loads(out)
    assert (document["embedded"], document["target"], document["findings"]) == (True, "mongomock://", [])


def test_the_url_comes_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAREL_MONGO_URL", "memory://")

    assert "memory://" in run(capsys, "check")[1]


# --- deployments ---------------------------------------------------------------------------------------------


def test_a_sound_deployment_passes_with_a_table(
    capsys: pytest.CaptureFixture[str], deployment: Callable[..., list[RecordedClient]]
) -> None:
    clients = deployment("rs3")

    code, out, err = run(capsys, "check", SET_URL)

    assert code == 0
    lines = out.splitlines()
    assert (
        lines[0]
        == "harel check mongodb://harel:***@mongo1:27017,mongo2:27017,mongo3:27017/harel?replicaSet=rs0&authSource=admin"
    )
    assert lines[1].startswith("deployment: replica set rs0: 3 data-bearing members")
    header = next(line for line in lines if line.startswith("check "))
    assert header.split() == ["check", "found", "required", "status"]
    for check_name in ("server version", "deployment", "write concern", "read concern", "read preference"):
        assert any(line.startswith(check_name) and line.endswith("ok") for line in lines), check_name
    assert lines[-1] == "14 ok, 1 warning: passed."
    assert "    fix: credentials and documents cross the network unencrypted" in out  # the warning's fix
    assert err == ""
    assert clients[0].closed


def test_a_weak_url_fails_listing_every_error_with_its_fix(
    capsys: pytest.CaptureFixture[str],
    deployment: Callable[..., list[RecordedClient]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    deployment("rs3")

    code, out, err = run(capsys, "check", WEAK_URL)

    assert code == 1
    lines = out.splitlines()
    for check_name in ("write concern", "read concern", "read preference", "retryable writes"):
        row = next(i for i, line in enumerate(lines) if line.startswith(check_name))
        assert lines[row].endswith("ERROR")
        assert lines[row + 1].startswith("    fix: ")
    assert lines[-1].startswith("10 ok, 1 warning, 4 errors: refused.")
    assert PASSWORD not in out + err + caplog.text


def test_json_is_one_machine_document(
    capsys: pytest.CaptureFixture[str], deployment: Callable[..., list[RecordedClient]]
) -> None:
    deployment("rs3")

    code, out, _ = run(capsys, "check", WEAK_URL, "--json")

    document = json.loads(out)
    assert code == 1
    assert set(document) == {
        "target",
        "deployment",
        "embedded",
        "dev_override",
        "passed",
        "counts",
        "findings",
    }
    assert document["passed"] is False
    assert document["counts"] == {"ok": 10, "warning": 1, "error": 4, "relaxed": 0}
    write = next(f for f in document["findings"] if f["check"] == "write concern")
    assert write == {
        "check": "write concern",
        "found": "w=1, j=true",
        "required": "w=majority, j=true",
        "status": "error",
        "fix": write["fix"],
        "error": WeakWriteConcernError.__name__,
    }
    assert "w=1 to w=majority" in write["fix"]
    assert PASSWORD not in out


@pytest.mark.parametrize(
    ("argv", "environment"),
    [
        (["check", STANDALONE_URL, "--dev"], {}),
        (["--dev", "check", STANDALONE_URL], {}),
        (["check", STANDALONE_URL], {"HAREL_DEV": "1"}),
    ],
    ids=["flag-after", "flag-before", "environment"],
)
def test_dev_override_accepts_a_standalone_loudly(
    capsys: pytest.CaptureFixture[str],
    deployment: Callable[..., list[RecordedClient]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    environment: dict[str, str],
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.WARNING, logger="harel.connection")
    deployment("standalone")

    code, out, _ = run(capsys, *argv)

    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("deployment ")).endswith("relaxed")
    assert "accepted for development only" in out.splitlines()[-1]
    assert "DEVELOPMENT OVERRIDE" in caplog.text
    assert PASSWORD not in out + caplog.text


def test_a_standalone_without_the_override_fails(
    capsys: pytest.CaptureFixture[str], deployment: Callable[..., list[RecordedClient]]
) -> None:
    deployment("standalone")

    code, out, _ = run(capsys, "check", STANDALONE_URL)

    assert code == 1
    assert next(line for line in out.splitlines() if line.startswith("deployment ")).endswith("ERROR")


def test_the_url_option_works_before_and_after_the_command(
    capsys: pytest.CaptureFixture[str], deployment: Callable[..., list[RecordedClient]]
) -> None:
    deployment("rs3")

    for argv in (
        ["--url", SET_URL, "check"],
        ["check", "--url", SET_URL],
        ["--url", "mongomock://", "check", SET_URL],
    ):
        code, out, _ = run(capsys, *argv)
        assert (code, out.splitlines()[0]) == (0, f"harel check mongodb://harel:***@{SET_URL.split('@')[1]}")


# --- failures: one line on stderr, the documented exit code --------------------------------------------------


def test_a_bad_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", f"postgres://harel:{PASSWORD}@db/harel")

    assert code == 2
    assert out == ""
    assert (
        err
        == "harel check: invalid store URL postgres://harel:***@db/harel: expected a mongodb:// or mongodb+srv:// URL\n"
    )


def test_an_unreachable_deployment_exits_3_naming_the_redacted_url(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = closed_port()

    code, out, err = run(
        capsys, "check", f"mongodb://harel:{PASSWORD}@127.0.0.1:{port}/harel", "--deadline", "0.3"
    )

    assert code == 3
    assert out == ""
    assert err.startswith(f"harel check: could not reach mongodb://harel:***@127.0.0.1:{port}/harel within ")
    assert err.count("\n") == 1
    assert PASSWORD not in err + caplog.text


def test_a_wrong_password_exits_4_naming_the_user_and_never_the_password(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with mongod(refuse_credentials=True) as server:
        url = f"mongodb://harel:{PASSWORD}@{server.host_port}/harel?authSource=admin&directConnection=true"

        code, out, err = run(capsys, "check", url, "--deadline", "0")

    assert code == 4
    assert out == ""
    assert err.startswith(
        "harel check: authentication failed for user harel on DB admin at mongodb://harel:***@"
    )
    assert err.count("\n") == 1
    assert "not ready" not in caplog.text
    assert PASSWORD not in err + caplog.text


def test_an_untrusted_certificate_exits_4_naming_the_member(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with untrusted_tls(tmp_path) as listener:
        code, _, err = run(capsys, "check", f"mongodb://{listener.address}/?tls=true&directConnection=true")

    assert code == 4
    assert err.startswith(f"harel check: TLS handshake with {listener.address} failed at mongodb://")
    assert "certificate verify failed: self-signed certificate" in err


def test_a_negative_deadline_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "check", "mongodb://127.0.0.1:1/", "--deadline", "-1")

    assert code == 2
    assert err.startswith("harel check: Invalid value for '--deadline'")
    assert "give a number of seconds >= 0" in err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["check", "--deadline", "soon"]])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert run(capsys, *argv)[0] == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")

    assert (code, out.strip()) == (0, f"harel {__version__}")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidURL("x", "bad"), 2),
        (ChartError("order", ["states: empty"]), 2),
        (UnknownEvent("order", "ship", ["approve"]), 2),
        (ConnectionFailed("x", 1.0, "refused"), 3),
        (DeploymentRefused([WeakWriteConcernError("w=1", "w=majority", "set w=majority")]), 4),
        (AuthenticationFailed("harel", "admin", "x", "Authentication failed."), 4),
        (TLSFailed(["mongo1:27017"], "certificate verify failed", "x"), 4),
        (UnknownExecution("order-1"), 5),
        (StoreConflict("order-1", 3, 4), 1),
    ],
)
def test_each_error_maps_to_its_exit_code(error: Exception, code: int) -> None:
    assert exit_code_for(error) == code  # type: ignore[arg-type]


def test_a_refusal_is_printed_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = DeploymentRefused([WeakWriteConcernError("w=1", "w=majority", "set w=majority")])

    def refuse(*_: Any, **__: Any) -> Any:
        raise refused

    monkeypatch.setattr(settings, "open_backend", refuse)

    code, _, err = run(capsys, "status", "order-1", "--url", SET_URL)

    assert code == 4
    assert err.count("\n") == 1 and "write concern: found w=1" in err
    assert err.startswith("harel status: refusing to start on this deployment:")
