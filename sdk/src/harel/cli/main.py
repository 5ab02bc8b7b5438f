"""The `harel` command group, and what a failure prints.

A failure a user can cause ends in one line on stderr, `harel COMMAND: what is wrong; what to do` (one JSON
object with `--json`), and the exit code `harel.cli.exits` gives it. Only a bug shows a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import click
from bson.errors import InvalidDocument
from click.shell_completion import get_completion_class

from harel import __version__
from harel.cli import charts, dead, demo, deployment, dev, executions, observe, partitions, pause, worker
from harel.cli.exits import MEANING, Exit, exit_code_for
from harel.cli.logsetup import FORMAT_VARIABLE, LEVEL_VARIABLE, configure
from harel.cli.options import Invocation, dev_option, pass_connection_to_root, url_option
from harel.cli.settings import DEADLINE_VARIABLE, DEV_VARIABLE, URL_FILE_VARIABLE, URL_VARIABLE
from harel.connection import scrub
from harel.errors import (
    ConnectionFailed,
    DeploymentError,
    DeploymentRefused,
    ExecutionFinished,
    HarelError,
    LocalDataError,
    LocalServerError,
    NotParked,
    UnknownExecution,
    UnreadableExecution,
)

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VARIABLE = "_HAREL_COMPLETE"

ROOT_EPILOG = "\n".join(
    [
        "\b",
        "Exit codes:",
        *(f"  {int(code):<3} {meaning}" for code, meaning in MEANING.items()),
        "",
        "\b",
        "Environment:",
        f"  {URL_VARIABLE:<22} the deployment's URL (--url)",
        f"  {URL_FILE_VARIABLE:<22} a file holding the URL, read when neither is given",
        "  (none of them)         the store of a `harel dev` running here or above (.harel/dev.json), said on stderr",
        f"  {DEADLINE_VARIABLE:<22} seconds to wait for the deployment (--deadline; 0: indefinitely)",
        f"  {DEV_VARIABLE:<22} 1: accept a standalone server, loudly (--dev)",
        f"  {LEVEL_VARIABLE:<22} DEBUG, INFO, WARNING, ERROR (worker, dev: INFO, demo: ERROR, others: WARNING)",
        f"  {FORMAT_VARIABLE:<22} text or json (worker: json unless stderr is a terminal)",
        "  NO_COLOR               set: no colour, even on a terminal",
        "",
        "\b",
        "Shell completion:",
        '  bash: eval "$(harel --completion bash)"   (in ~/.bashrc)',
        '  zsh:  eval "$(harel --completion zsh)"    (in ~/.zshrc)',
        "  fish: harel --completion fish > ~/.config/fish/completions/harel.fish",
    ]
)


def _print_completion(ctx: click.Context, _param: click.Parameter, shell: str | None) -> None:
    if shell is None or ctx.resilient_parsing:
        return
    completion = get_completion_class(shell)
    assert completion is not None, "click.Choice admits only the shells click completes"
    click.echo(completion(harel, {}, "harel", COMPLETE_VARIABLE).source())
    ctx.exit(Exit.OK)


@click.group(epilog=ROOT_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="harel", message="%(prog)s %(version)s")
@click.option(
    "--completion",
    type=click.Choice(SHELLS),
    callback=_print_completion,
    expose_value=False,
    is_eager=True,
    help="print the shell completion script for SHELL and exit",
)
@url_option
@dev_option
@click.pass_context
def harel(ctx: click.Context, url: str | None, dev: bool) -> None:
    """Durable Harel statecharts on MongoDB: run workers, start and inspect executions, check a
    deployment. `harel COMMAND --help` tells more."""
    called = ctx.find_object(Invocation)
    assert called is not None, "main() passes an Invocation"
    called.command = ctx.invoked_subcommand or ""
    pass_connection_to_root(url, dev)
    configure(called.command)


for _module in (worker, dev, executions, observe, dead, charts, demo, deployment, partitions, pause):
    for _command in _module.COMMANDS:
        harel.add_command(_command)


def explain(error: HarelError) -> str:
    """The error's message, with the next step where the error itself cannot know it."""
    if isinstance(error, UnknownExecution):
        return f"{error}; `harel list` shows the executions there"
    if isinstance(error, LocalServerError):
        return f"{error}; stop what holds the port, or choose another with --port (0 takes a free one)"
    if isinstance(error, LocalDataError):
        return f"{error}; give --data a file harel dev wrote, or a new path"
    if isinstance(error, NotParked):
        return f"{error}; `harel dead list` shows the executions that have one"
    if isinstance(error, UnreadableExecution):
        return (
            f"{error}; `harel status {error.execution_id}` shows what can be read of it, `--document` the stored "
            "document to repair"
        )
    if isinstance(error, ExecutionFinished):
        return f"{error}; `harel status {error.execution_id}` shows how it ended"
    if isinstance(error, ConnectionFailed):
        return (
            f"{error}; check the URL and that the deployment is up, or wait longer with --deadline "
            "(0 waits indefinitely)"
        )
    if isinstance(error, DeploymentRefused):
        return f"{error}; `harel check` shows every finding with its fix"
    return str(error)


def report(called: Invocation, as_json: bool, kind: str, message: str, code: Exit) -> int:
    text = " ".join(message.split())
    if as_json:
        line = json.dumps({"error": kind, "message": text, "exit_code": int(code)})
    else:
        line = f"harel {called.command}: {text}" if called.command else f"harel: {text}"
    click.echo(line, err=True)
    return int(code)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in arguments
    called = Invocation(as_json=as_json)
    try:
        result = harel.main(args=arguments, prog_name="harel", standalone_mode=False, obj=called)
    except click.exceptions.NoArgsIsHelpError as error:
        click.echo(error.format_message(), err=True)
        return Exit.USAGE
    except click.UsageError as error:
        path = error.ctx.command_path if error.ctx is not None else "harel"
        message = f"{error.format_message()} (see `{path} --help`)"
        return report(called, as_json, type(error).__name__, message, Exit.USAGE)
    except click.ClickException as error:
        return report(called, as_json, type(error).__name__, error.format_message(), Exit.USAGE)
    except click.Abort:
        return report(called, as_json, "Interrupted", "interrupted", Exit.INTERRUPTED)
    except DeploymentError as error:
        said = error.message.split(", Timeout:", maxsplit=1)[0]  # PyMongo appends the whole topology
        message = f"the deployment failed during the command: {scrub(said, called.url)}; run it again"
        return report(called, as_json, type(error).__name__, message, exit_code_for(error))
    except HarelError as error:
        return report(called, as_json, type(error).__name__, explain(error), exit_code_for(error))
    except InvalidDocument as error:
        message = f"a value cannot be stored: {error}; keep large payloads out of events and contexts"
        return report(called, as_json, type(error).__name__, message, Exit.USAGE)
    except BrokenPipeError:  # `harel list | head`: the reader has gone, and so may we
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.FAILED
    return int(result or Exit.OK)
