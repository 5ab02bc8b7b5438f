"""Options several commands share, and the value types that check them where they enter.

`connection_options` gives a command `--url`, `--dev` and `--deadline` and hands it one `Connection`;
`--url` and `--dev` are also accepted before the command name (`harel --url URL status ID`).
`json_option` gives it `--json` and hands it an `Output`. `app_options` gives `--app` and `--charts`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

import click
from rich.text import Text

from harel.app import App
from harel.cli.output import Output, make_console
from harel.cli.settings import (
    DEADLINE_VARIABLE,
    DEV_VARIABLE,
    URL_FILE_VARIABLE,
    URL_VARIABLE,
    resolve,
)
from harel.serve import build_app
from harel.worker import WorkerConfig

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Invocation:
    """One run of `harel`: the command and its URL (for the error line) and the options given before the
    command's name."""

    command: str = ""
    url: str = ""
    root_url: str | None = None
    root_dev: bool = False
    as_json: bool = False


def invocation() -> Invocation:
    found = click.get_current_context().find_object(Invocation)
    assert found is not None, "main() passes an Invocation to every command"
    return found


# --- value types ---------------------------------------------------------------------------------------------


class Seconds(click.ParamType[float, Any]):
    """A finite number of seconds, >= 0 (or > 0 with `positive`)."""

    name = "seconds"

    def __init__(self, *, positive: bool = False) -> None:
        self.positive = positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            seconds = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds < 0 or (self.positive and seconds == 0):
            self.fail(f"{value!r}: give a number of seconds {'> 0' if self.positive else '>= 0'}", param, ctx)
        return seconds


SECONDS = Seconds()
POSITIVE_SECONDS = Seconds(positive=True)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (JSON has no NaN or Infinity: use null, a number or a string)")


class JsonObject(click.ParamType[dict[str, Any], Any]):
    """A JSON object given inline, as `@path/to/file.json`, or as `-` for standard input (large values go
    through a file or stdin: the OS limits one argument to about 128 KB)."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        text, origin = self._read(value, param, ctx)
        try:
            parsed = json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as error:
            self.fail(f"{origin}not valid JSON ({error.msg} at position {error.pos})", param, ctx)
        except ValueError as error:
            self.fail(f"{origin}{error}", param, ctx)
        if not isinstance(parsed, dict):
            self.fail(f"{origin}must be a JSON object ({{...}}), got {type(parsed).__name__}", param, ctx)
        return parsed

    def _read(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, str]:
        if value == "-":
            return sys.stdin.read(), "standard input: "
        if not value.startswith("@"):
            return value, ""
        path = Path(value[1:])
        try:
            return path.read_text(encoding="utf-8"), f"{path}: "
        except OSError as error:
            self.fail(
                f"cannot read {path} ({error.strerror or error}); give @FILE of a readable file", param, ctx
            )
        except UnicodeDecodeError:
            self.fail(f"{path} is not UTF-8 text", param, ctx)


JSON_OBJECT = JsonObject()


class NonEmpty(click.ParamType[str, Any]):
    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if not str(value).strip():
            self.fail("must not be empty", param, ctx)
        return str(value)


NON_EMPTY = NonEmpty()


# --- option groups -------------------------------------------------------------------------------------------

url_option = click.option(
    "--url",
    metavar="URL",
    help=f"mongodb://, mongodb+srv:// or mongomock:// (memory:// is a deprecated alias) [env var: "
    f"{URL_VARIABLE}, else the file {URL_FILE_VARIABLE} names, else the store of a running `harel dev` "
    "(.harel/dev.json here or above); default: mongomock://]",
)
dev_option = click.option(
    "--dev",
    is_flag=True,
    envvar=DEV_VARIABLE,
    show_envvar=True,
    help="development only: accept a standalone server, loudly",
)


concurrency_option = click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    metavar="N",
    default=2,
    show_default=True,
    envvar="HAREL_CONCURRENCY",
    show_envvar=True,
    help="events handled at once",
)


def timeout_option(flag: str) -> Callable[[F], F]:
    """`--timeout SECONDS`, handed to the command as `timeout: float | None`, for a command that waits when
    given `flag`: it gives up after that long with WaitTimedOut (exit 6)."""
    return click.option(
        "--timeout",
        type=POSITIVE_SECONDS,
        metavar="SECONDS",
        help=f"with {flag}: give up after this long (exit 6); the execution goes on [default: no limit]",
    )


def refuse_lone_timeout(timeout: float | None, flag: str) -> None:
    """--timeout given without the option that waits: it would bound nothing, so it is a mistake to say."""
    if timeout is not None:
        raise click.UsageError(f"--timeout bounds {flag}: give {flag} too, or leave --timeout out")


def async_timeout_option(function: F) -> F:
    return click.option(
        "--async-timeout",
        type=POSITIVE_SECONDS,
        envvar="HAREL_ASYNC_TIMEOUT",
        show_envvar=True,
        help="seconds an `async def` action or guard may run; one that runs longer is cancelled and the "
        f"attempt fails (it is retried); under half of the lease [default: "
        f"{WorkerConfig.async_timeout_seconds:g}, or a third of the lease when that is less]",
    )(function)


def op_timeout_option(function: F) -> F:
    return click.option(
        "--op-timeout",
        type=POSITIVE_SECONDS,
        envvar="HAREL_OP_TIMEOUT",
        show_envvar=True,
        help="seconds one command of the worker (a claim, a commit, a relay, a lease extension, a heartbeat) "
        "may take, retries included; a deployment that stops answering then costs about this long; under half "
        f"of the lease [default: {WorkerConfig.op_timeout_seconds:g}, or a third of the lease when that is less]",
    )(function)


def worker_config(
    *, async_timeout: float | None, op_timeout: float | None = None, **settings: Any
) -> WorkerConfig:
    """The worker's settings, refused where they contradict each other: the async timeout and the commands'
    deadline each default to a third of the lease when that is less, and are refused from half of it (a step
    or a command that outlives its lease lets another worker apply the events again)."""
    config = WorkerConfig(**settings)
    return dataclasses.replace(
        config,
        async_timeout_seconds=_under_half_lease(
            config, "--async-timeout", async_timeout, config.async_timeout_seconds
        ),
        op_timeout_seconds=_under_half_lease(config, "--op-timeout", op_timeout, config.op_timeout_seconds),
    )


def _under_half_lease(config: WorkerConfig, flag: str, given: float | None, default: float) -> float:
    if given is None:
        return min(default, config.lease_seconds / 3)
    if given >= config.lease_seconds / 2:
        raise click.UsageError(
            f"{flag} {given:g} must be under half of --lease-seconds "
            f"({config.lease_seconds:g}): the events of a step or a command that outlives its lease are applied "
            "again by another worker; shorten the one or lengthen the other"
        )
    return given


def connection_options(function: F) -> F:
    """`--url`, `--dev`, `--deadline`, resolved into one `connection: Connection` argument."""

    @functools.wraps(function)
    def run(*args: Any, url: str | None, dev: bool, deadline: float | None, **kwargs: Any) -> Any:
        called = invocation()
        connection = resolve(url or called.root_url, dev or called.root_dev, deadline)
        called.url = connection.url
        if connection.dev_store is not None and not called.as_json:
            running = connection.dev_store
            note = f"harel: using the store of harel dev (pid {running.pid}): {running.url}"
            make_console(stderr=True).print(Text(note, style="dim"), soft_wrap=True)
        return function(*args, connection=connection, **kwargs)

    deadline_option = click.option(
        "--deadline",
        type=SECONDS,
        envvar=DEADLINE_VARIABLE,
        show_envvar=True,
        help="seconds to wait for the deployment to answer; 0 waits indefinitely [default: 60]",
    )
    return url_option(dev_option(deadline_option(run)))  # type: ignore[return-value]


@overload
def json_option(function: F) -> F: ...
@overload
def json_option(*, help: str) -> Callable[[F], F]: ...
def json_option(
    function: F | None = None, *, help: str = "print one JSON document instead of text"
) -> F | Callable[[F], F]:
    """`--json`, handed to the command as `out: Output`."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def run(*args: Any, as_json: bool, **kwargs: Any) -> Any:
            return command(*args, out=Output(as_json=as_json), **kwargs)

        return click.option("--json", "as_json", is_flag=True, help=help)(run)  # type: ignore[return-value]

    return decorate(function) if function is not None else decorate


@overload
def app_options(function: F) -> F: ...
@overload
def app_options(*, runs: bool) -> Callable[[F], F]: ...
def app_options(function: F | None = None, *, runs: bool = False) -> F | Callable[[F], F]:
    """`--app` and `--charts`, loaded into one `app: App` argument. With `runs` (a worker's App) every action
    and guard its charts name must be registered; a client's App only gives charts."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def run(*args: Any, app_spec: str | None, charts: Path | None, **kwargs: Any) -> Any:
            return command(*args, app=load_application(app_spec, charts, runs=runs), **kwargs)

        return app_option(charts_option(run))  # type: ignore[return-value]

    return decorate(function) if function is not None else decorate


app_option = click.option(
    "--app",
    "app_spec",
    metavar="MODULE:APP",
    help="your App (charts, actions, guards), imported from the current folder, e.g. orders.app:app",
)
charts_option = click.option(
    "--charts",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    metavar="DIR",
    help="a folder of YAML/JSON charts",
)


def load_application(app_spec: str | None, charts: Path | None, *, runs: bool = True) -> App:
    """The App from `--app` (importable from the current folder, as uvicorn and celery do) and `--charts`."""
    if app_spec and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return build_app(app_spec, charts, runs=runs)


def pass_connection_to_root(url: str | None, dev: bool) -> None:
    """The root command's own `--url`/`--dev` (given before the command name): the command's win."""
    called = invocation()
    called.root_url, called.root_dev = url, dev
