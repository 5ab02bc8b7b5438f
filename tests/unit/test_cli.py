"""The `harel` command line in process: --help, --json everywhere, shell completion, where the deployment
comes from, and how long a worker waits for it. Failures as processes: tests/wire/test_cli_failures.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from pymongo.errors import DocumentTooLarge

from harel.app import App
from harel.backend import open_backend
from harel.chart import load_chart
from harel.cli import main, observe, settings, worker
from harel.cli.exits import MEANING
from harel.cli.main import harel
from harel.cli.options import load_application, worker_config
from harel.cli.settings import DEFAULT_DEADLINE, resolve, resolve_url
from harel.diagram import render_mermaid
from harel.errors import DeploymentUnavailable, InvalidArgument
from tests.documents import DOCS

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENT = (
    "HAREL_MONGO_URL",
    "HAREL_MONGO_URL_FILE",
    "HAREL_CONNECT_DEADLINE",
    "HAREL_DEV",
    "HAREL_LOG_LEVEL",
    "HAREL_LOG_FORMAT",
    "NO_COLOR",
)


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- help, --json, completion --------------------------------------------------------------------------------


def test_help_lists_the_exit_codes_and_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")

    assert code == 0
    for exit_code, meaning in MEANING.items():
        assert f"  {int(exit_code):<3} {meaning}" in out
    for name in ENVIRONMENT:
        assert name in out
    assert 'eval "$(harel --completion bash)"' in out


def test_the_docs_list_the_exit_codes_as_help_does() -> None:
    page = " ".join((DOCS / "cli.md").read_text(encoding="utf-8").split())
    found = re.search(r"Exit codes: (.*?)\. A failure is one line", page)
    assert found is not None, "the list of exit codes in docs/cli.md"
    listed = {}
    for item in found.group(1).replace("`", "").split(" · "):
        code, _, meaning = item.partition(" ")
        listed[int(code)] = meaning

    assert listed == {int(code): meaning.replace("`", "") for code, meaning in MEANING.items()}


COMMAND_LINES = sorted(
    [name] if not isinstance(command, click.Group) else [name, sub]
    for name, command in harel.commands.items()
    for sub in (command.commands if isinstance(command, click.Group) else [None])
)


@pytest.mark.parametrize("command", COMMAND_LINES, ids=" ".join)
def test_every_command_has_json_and_lists_its_exit_codes(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    code, out, _ = run(capsys, *command, "--help")

    assert code == 0
    assert "--json" in out
    assert "Exit codes:\n    0   ok\n" in out


def test_the_commands_that_exist_are_kept() -> None:
    assert set(harel.commands) == {
        "worker",
        "start",
        "send",
        "cancel",
        "status",
        "list",
        "trace",
        "smoke",
        "demo",
        "check",
        "dev",
        "dead",
        "chart",
        "partitions",
        "pause",
        "resume",
    }
    dead = harel.commands["dead"]
    assert isinstance(dead, click.Group) and set(dead.commands) == {"list", "retry", "drop"}
    chart = harel.commands["chart"]
    assert isinstance(chart, click.Group) and set(chart.commands) == {"show"}
    partitions = harel.commands["partitions"]
    assert isinstance(partitions, click.Group) and set(partitions.commands) == {"init", "show"}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(capsys: pytest.CaptureFixture[str], shell: str) -> None:
    code, out, _ = run(capsys, "--completion", shell)

    assert code == 0
    assert "_HAREL_COMPLETE" in out


def test_completion_completes_commands_and_choices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_HAREL_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "harel st")
    monkeypatch.setenv("COMP_CWORD", "1")
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().out.split() == ["plain,start", "plain,status"]

    monkeypatch.setenv("COMP_WORDS", "harel list --status c")
    monkeypatch.setenv("COMP_CWORD", "3")
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().out.split() == ["plain,completed", "plain,cancelled"]


# --- where the deployment is ---------------------------------------------------------------------------------


def test_the_url_comes_from_the_option_the_variable_the_file_then_the_default(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("mongodb://from-file/harel\n")
    both = {"HAREL_MONGO_URL": "mongodb://from-variable/", "HAREL_MONGO_URL_FILE": str(secret)}

    assert resolve_url("mongodb://from-option/", both, tmp_path) == ("mongodb://from-option/", "--url", None)
    assert resolve_url(None, both, tmp_path) == ("mongodb://from-variable/", "HAREL_MONGO_URL", None)
    assert resolve_url(None, {"HAREL_MONGO_URL_FILE": str(secret)}, tmp_path) == (
        "mongodb://from-file/harel",
        "HAREL_MONGO_URL_FILE",
        None,
    )
    assert resolve_url(None, {}, tmp_path) == ("mongomock://", "default", None)


def test_an_unreadable_or_empty_url_file_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")

    with pytest.raises(InvalidArgument, match=r"HAREL_MONGO_URL_FILE: cannot read .*/missing \(No such file"):
        resolve_url(None, {"HAREL_MONGO_URL_FILE": str(tmp_path / "missing")}, tmp_path)
    with pytest.raises(InvalidArgument, match="is empty"):
        resolve_url(None, {"HAREL_MONGO_URL_FILE": str(empty)}, tmp_path)
    with pytest.raises(InvalidArgument, match="cannot read"):
        resolve_url(None, {"HAREL_MONGO_URL_FILE": str(tmp_path)}, tmp_path)  # a folder


def test_deadline_zero_waits_indefinitely() -> None:
    assert resolve(None, False, None, {}, Path("/")).deadline == DEFAULT_DEADLINE
    assert resolve(None, False, 5.0, {}, Path("/")).deadline == 5.0
    assert resolve(None, False, 0.0, {}, Path("/")).deadline is None


@pytest.mark.parametrize(
    ("argv", "environment", "deadline"),
    [
        (["--deadline", "0"], {}, None),
        ([], {"HAREL_CONNECT_DEADLINE": "0"}, None),
        ([], {"HAREL_CONNECT_DEADLINE": "7.5"}, 7.5),
        (["--deadline", "3"], {"HAREL_CONNECT_DEADLINE": "0"}, 3.0),
        ([], {}, DEFAULT_DEADLINE),
    ],
    ids=["option-0", "variable-0", "variable", "option-wins", "default"],
)
def test_the_worker_hands_its_deadline_to_serve(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    environment: dict[str, str],
    deadline: float | None,
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    served: dict[str, Any] = {}

    def serve(url: str, app: App, config: Any, **options: Any) -> int:
        served.update(options, url=url)
        return 0

    monkeypatch.setattr(worker, "serve", serve)

    code, _, _ = run(capsys, "worker", "--url", "mongodb://db.example/harel", "--http-port", "0", *argv)

    assert code == 0
    assert served["deadline"] == deadline
    assert served["url"] == "mongodb://db.example/harel"


def test_a_worker_without_an_app_says_it_serves_only_the_smoke_chart(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(worker, "serve", lambda url, app, config, **options: 0)
    (tmp_path / "ticket.yaml").write_text(
        "id: ticket\nversion: 1\ninitial: open\nstates: {open: {on: {close: closed}}, closed: {final: true}}\n"
    )
    url = ("--url", "mongodb://db.example/harel", "--http-port", "0")

    with caplog.at_level("WARNING", logger="harel.cli"):
        assert run(capsys, "worker", *url)[0] == 0
    assert [r.getMessage() for r in caplog.records] == [
        "worker serves only the built-in smoke chart harel.smoke: give --app package.module:app or --charts DIR "
        "for your own charts"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="harel.cli"):
        assert run(capsys, "worker", *url, "--charts", str(tmp_path))[0] == 0
    assert caplog.records == []


# --- --app ---------------------------------------------------------------------------------------------------


def test_app_is_imported_from_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "app.py").write_text('from harel.app import App\n\napp = App("shop")\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "shop", raising=False)
    monkeypatch.delitem(sys.modules, "shop.app", raising=False)

    app = load_application("shop.app:app", None)

    assert isinstance(app, App)
    assert app.name == "shop"
    assert app.get_chart("harel.smoke").id == "harel.smoke", "the smoke chart comes with every App"


@pytest.mark.parametrize(
    ("command", "flag", "arguments"),
    [
        ("status", "--watch", ["t-1"]),
        ("trace", "--follow", ["t-1"]),
        ("start", "--wait", ["ticket"]),
        ("send", "--wait", ["t-1", "assign"]),
    ],
)
def test_watch_and_follow_take_a_timeout_as_wait_does(
    capsys: pytest.CaptureFixture[str], command: str, flag: str, arguments: list[str]
) -> None:
    code, out, _ = run(capsys, command, "--help")

    assert code == 0
    assert (
        f"--timeout SECONDS with {flag}: give up after this long (exit 6); the execution goes on "
        "[default: no limit]"
    ) in " ".join(out.split())
    assert "\n    6   gave up waiting after --timeout; what it waited for goes on\n" in out

    code, out, err = run(capsys, command, *arguments, "--timeout", "1")

    assert (code, out) == (2, "")
    assert err == (
        f"harel {command}: --timeout bounds {flag}: give {flag} too, or leave --timeout out "
        f"(see `harel {command} --help`)\n"
    )


def test_a_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "status")

    assert (code, out) == (2, "")
    assert err == "harel status: Missing argument 'ID'. (see `harel status --help`)\n"


# --- failures that happen mid-command ------------------------------------------------------------------------


@pytest.fixture
def in_process_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--url mongodb://...` answered by an in-process store, so a command runs without a server."""
    monkeypatch.setattr(settings, "open_backend", lambda *_, **__: open_backend("mongomock://"))


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        (
            DeploymentUnavailable(
                "AutoReconnect",
                "db.example:27017: connection reset by hunter2, Timeout: 30s, Topology Description: ...",
            ),
            3,
            "harel status: the deployment failed during the command: db.example:27017: connection reset by ***; run it again",
        ),
        (
            DocumentTooLarge("BSON document too large (17000000 bytes)"),
            2,
            "harel status: a value cannot be stored: BSON document too large (17000000 bytes); keep large payloads out of events and contexts",
        ),
        (KeyboardInterrupt(), 130, "harel status: interrupted"),
    ],
    ids=["deployment-gone", "too-large", "ctrl-c"],
)
def test_a_failure_mid_command_is_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    in_process_deployment: None,
    raised: BaseException,
    code: int,
    said: str,
) -> None:
    def fail(*_: Any) -> Any:
        raise raised

    monkeypatch.setattr(observe, "look", fail)

    result, out, err = run(capsys, "status", "order-1", "--url", "mongodb://app:hunter2@db.example/harel")

    assert (result, out) == (code, "")
    assert err.strip() == said
    assert "hunter2" not in err


def test_chart_show_prefers_a_published_chart_to_the_built_in_of_that_short_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = load_chart(
        {
            "id": "smoke",
            "version": 1,
            "initial": "a",
            "states": {"a": {"on": {"go": "b"}}, "b": {"final": True}},
        }
    )
    deployment = open_backend("mongomock://")
    deployment.catalog.publish([mine])
    monkeypatch.setattr(settings, "open_backend", lambda *_, **__: deployment)

    code, out, err = run(capsys, "chart", "show", "smoke", "--url", "mongodb://db.example/harel")

    assert (code, err) == (0, "")
    assert out == render_mermaid(mine), "a chart a worker published under that name, not harel.smoke"


def test_demo_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--timer", "0.1", "--json")

    document = json.loads(out)
    assert code == 0
    assert document["report"]["passed"] is True
    assert document["workers"] == 3 and document["processed"] >= 14, "14 events, each processed at least once"
    assert document["document"]["_id"] == document["report"]["root_id"]


def test_the_async_timeout_fits_the_lease() -> None:
    assert worker_config(async_timeout=None).async_timeout_seconds == 10.0
    assert worker_config(async_timeout=None, lease_seconds=3.0).async_timeout_seconds == 1.0, "a third of it"
    assert worker_config(async_timeout=14.0).async_timeout_seconds == 14.0
    with pytest.raises(
        click.UsageError, match=r"--async-timeout 15 must be under half of --lease-seconds \(30\)"
    ):
        worker_config(async_timeout=15.0)


def test_the_commands_deadline_fits_the_lease() -> None:
    assert worker_config(async_timeout=None).op_timeout_seconds == 5.0
    assert worker_config(async_timeout=None, lease_seconds=3.0).op_timeout_seconds == 1.0, "a third of it"
    assert worker_config(async_timeout=None, op_timeout=14.0).op_timeout_seconds == 14.0
    with pytest.raises(
        click.UsageError, match=r"--op-timeout 15 must be under half of --lease-seconds \(30\)"
    ):
        worker_config(async_timeout=None, op_timeout=15.0)


def test_status_says_why_an_execution_failed() -> None:
    from rich.console import Console

    from harel.cli.views import status_view
    from harel.model import Execution, ExecutionStatus

    failed = Execution(
        id="order-9",
        definition_id="order",
        definition_version=1,
        status=ExecutionStatus.FAILED,
        reason="its event 'ping' (e-1) to 'nobody' could not be delivered: no such execution after 300s",
    )
    console = Console(width=200, record=True)
    console.print(status_view(failed, None, None, now=0.0))
    lines = console.export_text().splitlines()
    assert any(line.split()[:1] == ["reason"] and "could not be delivered" in line for line in lines), lines
