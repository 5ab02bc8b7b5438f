"""Where `harel dev` says its store is (`.harel/dev.json`, held under a lock while it runs), and how other
commands find it: after --url, HAREL_MONGO_URL and HAREL_MONGO_URL_FILE, from the folder they run in or one
above, saying so on stderr; a file whose `harel dev` is gone is ignored. `harel dev` itself as processes:
tests/wire/test_dev.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harel.backend import open_backend
from harel.cli import main, settings
from harel.cli.devstate import STATE_FILE, DevState, DevStore, find
from harel.cli.settings import resolve_url
from harel.errors import InvalidArgument

URL = "mongodb://127.0.0.1:40123/?replicaSet=rs0"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[DevState]:
    state = DevState.claim(tmp_path)
    state.publish(URL, None)
    yield state
    state.release()


def test_a_running_dev_is_found_from_its_folder_and_below(tmp_path: Path, running: DevState) -> None:
    below = tmp_path / "orders" / "deep"
    below.mkdir(parents=True)

    expected = DevStore(URL, os.getpid(), tmp_path / STATE_FILE, None)
    assert find(tmp_path) == expected
    assert find(below) == expected
    assert find(tmp_path.parent) is None, "not above it"
    assert json.loads((tmp_path / STATE_FILE).read_text())["url"] == URL


def test_a_released_state_is_gone(tmp_path: Path) -> None:
    state = DevState.claim(tmp_path)
    state.publish(URL, tmp_path / "dev.db")
    assert find(tmp_path) is not None and find(tmp_path).data == str(tmp_path / "dev.db")  # type: ignore[union-attr]

    state.release()

    assert find(tmp_path) is None
    assert not (tmp_path / ".harel").exists(), "the folder it made goes too, when empty"


def test_a_file_left_by_a_dev_that_is_gone_is_ignored(tmp_path: Path) -> None:
    (tmp_path / ".harel").mkdir()
    (tmp_path / STATE_FILE).write_text(json.dumps({"url": URL, "pid": os.getpid()}))  # nobody holds it

    assert find(tmp_path) is None
    state = DevState.claim(tmp_path)  # and a new harel dev takes it over
    state.release()


def test_a_second_dev_in_the_folder_is_refused(tmp_path: Path, running: DevState) -> None:
    with pytest.raises(
        InvalidArgument, match=rf"another harel dev runs for {tmp_path} \(pid {os.getpid()}, "
    ):
        DevState.claim(tmp_path)


def test_the_dev_store_comes_after_the_option_the_variable_and_the_file(
    tmp_path: Path, running: DevState
) -> None:
    secret = tmp_path / "url"
    secret.write_text("mongodb://from-file/")

    assert resolve_url(None, {"HAREL_MONGO_URL": "mongodb://v/"}, tmp_path)[:2] == (
        "mongodb://v/",
        "HAREL_MONGO_URL",
    )
    assert resolve_url(None, {"HAREL_MONGO_URL_FILE": str(secret)}, tmp_path)[0] == "mongodb://from-file/"
    assert resolve_url("mongodb://o/", {}, tmp_path)[0] == "mongodb://o/"
    url, source, store = resolve_url(None, {}, tmp_path)
    assert (url, source) == (URL, "harel dev") and store is not None and store.pid == os.getpid()


def test_a_command_says_it_uses_the_dev_store(
    tmp_path: Path,
    running: DevState,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("HAREL_MONGO_URL", "HAREL_MONGO_URL_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    opened: list[str] = []

    def in_process(url: str, **_: object) -> object:
        opened.append(url)
        return open_backend("mongomock://")

    monkeypatch.setattr(settings, "open_backend", in_process)

    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    assert opened == [URL]
    assert err.splitlines()[0] == f"harel: using the store of harel dev (pid {os.getpid()}): {URL}"

    assert main(["list", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["items"] == [] and "harel dev" not in err, "--json output stays one document"
