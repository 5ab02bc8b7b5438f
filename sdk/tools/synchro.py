"""Generate the synchronous twins from their async sources, as PyMongo generates its synchronous API (its
tools/synchro.py): MongoStore from AsyncMongoStore, MongoTransport from AsyncMongoTransport.

    python sdk/tools/synchro.py           write the generated files (`make synchro`)
    python sdk/tools/synchro.py --check   write nothing; exit 1, with a diff, when a generated file differs

The async side is the source because the direction is mechanical that way: dropping `async` and `await`
needs no judgement, while adding them would need to know which calls a client makes awaitable. A source
becomes its twin in four passes: the lines LINES names are replaced; the `async` and `await` keywords are
dropped (as tokens, so "awaited" in prose stays); each name of NAMES becomes its sync counterpart (whole
words, in docstrings and comments too); its first docstring paragraph (the one that names the flavour) is
replaced by the twin's. The result starts with a header saying so and is formatted with ruff.
tests/unit/test_synchro.py regenerates every twin and fails on any difference.
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
PACKAGE = REPOSITORY / "sdk" / "src" / "harel"

# Async name -> sync name. Order does not matter: each is replaced as a whole word.
NAMES = {
    "AsyncMongoStore": "MongoStore",
    "AsyncExecutionStore": "ExecutionStore",
    "AsyncMongoTransport": "MongoTransport",
    "AsyncMongoClient": "MongoClient",
    "TaskWakeups": "ThreadWakeups",
    "connect_async": "connect",
    "check_async": "check",
    "drained": "list",
}
# Whole lines whose sync form is not the async one less its awaits (stripped of indentation to match).
LINES = {
    "from harel.commands import drained, matched, resolved": "from harel.commands import matched",
    "await resolved(self._client.close())": "self._client.close()",
}


@dataclass(frozen=True)
class Twin:
    source: str  # relative to sdk/src/harel
    target: str
    summary: str  # the target's first docstring paragraph


TWINS = (
    Twin(
        "aio_store/mongo.py",
        "store/mongo.py",
        "MongoStore: the seed's execution store, on PyMongo's MongoClient (`from_url`) or an injected client\n"
        "(mongomock in tests). Generated from harel/aio_store/mongo.py (AsyncMongoStore) by\n"
        "sdk/tools/synchro.py: edit that file, then regenerate (`make synchro`).",
    ),
    Twin(
        "transport/aio_mongo.py",
        "transport/mongo.py",
        "MongoTransport: the mailbox transport, on PyMongo's MongoClient (`from_url`) or an injected client\n"
        "(the embedded mongomock:// one included). Generated from harel/transport/aio_mongo.py\n"
        "(AsyncMongoTransport) by sdk/tools/synchro.py: edit that file, then regenerate (`make synchro`).",
    ),
)


def _summary_replaced(text: str, summary: str) -> str:
    if not text.startswith('"""'):
        raise ValueError("a source starts with its module docstring")
    end = text.index("\n\n")
    return '"""' + summary + text[end:]


def _lines_replaced(text: str) -> str:
    out = []
    for line in io.StringIO(text).readlines():
        body = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}{LINES[body]}\n" if body in LINES else line)
    return "".join(out)


def _keywords_dropped(text: str) -> str:
    """`async` before def/with/for and every `await`, with the space after each."""
    lines = io.StringIO(text).readlines()
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    spans: list[tuple[int, int, int]] = []  # (row, start, end) to cut, rows 1-based
    for index, token in enumerate(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        is_async = (
            token.string == "async" and following is not None and following.string in {"def", "with", "for"}
        )
        if token.type == tokenize.NAME and (is_async or token.string == "await"):
            row, start = token.start
            end = following.start[1] if following is not None and following.start[0] == row else token.end[1]
            spans.append((row, start, end))
    for row, start, end in reversed(spans):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + line[end:]
    return "".join(lines)


def _names_replaced(text: str) -> str:
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, NAMES)) + r")\b")
    return pattern.sub(lambda match: NAMES[match.group(1)], text)


def _formatted(text: str, target: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(target), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        check=True,
    )
    return result.stdout


def generate(twin: Twin, package: Path = PACKAGE) -> str:
    source = (package / twin.source).read_text(encoding="utf-8")
    text = _summary_replaced(_names_replaced(_keywords_dropped(_lines_replaced(source))), twin.summary)
    header = f"# Generated by sdk/tools/synchro.py from sdk/src/harel/{twin.source}: do not edit.\n"
    return _formatted(header + text, package / twin.target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; fail when a generated file differs"
    )
    arguments = parser.parse_args(argv)
    stale = []
    for twin in TWINS:
        target = PACKAGE / twin.target
        wanted = generate(twin)
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current == wanted:
            continue
        if arguments.check:
            stale.append(twin.target)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    wanted.splitlines(keepends=True),
                    f"sdk/src/harel/{twin.target} (checked in)",
                    f"sdk/src/harel/{twin.target} (generated from {twin.source})",
                )
            )
        else:
            target.write_text(wanted, encoding="utf-8")
            print(f"wrote sdk/src/harel/{twin.target}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `make synchro` (python sdk/tools/synchro.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
