"""The observability and backup pages (docs/observability.md, docs/backups.md): every command they show is
checked.

Each command of a console block parses as bash (`bash -n`); `make` targets exist; `helm upgrade --set` values
render the chart; the restore Pod validates against the Kubernetes schemas and names objects the chart renders;
kubectl names the chart's objects; Ansible tags exist in site.yml; the harel-stack commands parse; the paths the
restore runs exist where each mode installs the backup script.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from harel_stack.cli import build_parser
from tests.documents import DOCS
from tests.infra.helm_lint import CHART_DIR, kube_version

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
# In the order of the site's nav: observability, then backups (their helm upgrades add up, --reuse-values).
PAGES = (DOCS / "observability.md", DOCS / "backups.md")
RELEASE = "harel-stack"
NAMESPACE = "harel"


def section() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in PAGES)


@dataclass(frozen=True)
class Command:
    text: str
    heredoc: str | None

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text.split("<<", 1)[0], comments=True)


def commands() -> Iterator[Command]:
    """Every command of every console block, `\\` continuations and heredocs joined. In a block with prompts
    (`$ `, or `# ` for a root shell) the other lines are output; in a block without, every line is a command."""
    for block in re.findall(r"```console\n(.*?)```", section(), re.S):
        lines = block.splitlines()
        prompted = any(line.startswith("$ ") for line in lines)
        index = 0
        while index < len(lines):
            line = lines[index]
            index += 1
            if prompted and not line.startswith(("$ ", "# ")):
                continue  # output
            text = line[2:] if prompted else line
            while text.endswith("\\"):
                text = text[:-1] + " " + lines[index].strip()
                index += 1
            heredoc = None
            if "<<'EOF'" in text:
                end = lines.index("EOF", index)
                heredoc = "\n".join(lines[index:end]) + "\n"
                index = end + 1
            yield Command(text, heredoc)


ALL = list(commands())


def test_the_pages_show_metrics_backup_and_restore_for_every_mode() -> None:
    observability, backups = (page.read_text(encoding="utf-8") for page in PAGES)
    for heading in ("## Compose", "## Kubernetes", "## Ansible"):
        assert f"\n{heading}\n" in observability and f"\n{heading}\n" in backups
    assert "\n## The backup status document\n" in backups
    assert backups.count("**Restore**") == 3
    assert len(ALL) >= 20


@pytest.mark.parametrize("command", ALL, ids=lambda c: c.text[:60])
def test_every_command_parses_as_bash(command: Command) -> None:
    script = command.text + ("\n" + command.heredoc + "EOF\n" if command.heredoc else "")
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_make_targets_exist() -> None:
    targets = [c.words for c in ALL if c.words[:1] == ["make"]]
    assert {words[1] for words in targets} >= {"up", "backup", "restore"}
    for words in targets:
        dry = subprocess.run(
            ["make", "-n", "-C", str(REPOSITORY), *words[1:]], capture_output=True, text=True, check=False
        )
        assert dry.returncode == 0, dry.stderr
    restore = next(w for w in targets if w[1] == "restore")
    dry = subprocess.run(
        ["make", "-n", "-C", str(REPOSITORY), *restore[1:]], capture_output=True, text=True, check=False
    )
    assert re.search(
        r"harel-stack restore \"compose/backups/harel-\d{8}T\d{6}Z\.archive\.gz\" --yes", dry.stdout
    )


def test_harel_stack_commands_parse() -> None:
    parser = build_parser()
    crontab = next(c for c in ALL if c.text.startswith("crontab"))
    entry = re.search(r"\.venv/bin/harel-stack ([^>]+)>>", crontab.text)
    assert entry is not None
    assert parser.parse_args(entry.group(1).split()).command == "backup"
    assert parser.parse_args(["restore", "x.archive.gz", "--yes"]).yes


def helm_values() -> Iterator[tuple[Command, dict[str, Any]]]:
    """The values after each `helm upgrade --reuse-values --set ...`, accumulated in order as Helm would."""
    values: dict[str, Any] = {}
    for command in ALL:
        words = command.words
        if words[:2] != ["helm", "upgrade"]:
            continue
        assert "--reuse-values" in words
        for index, word in enumerate(words):
            if word == "--set":
                # Helm's own parser: escaped dots in label keys, list indexes, typed values.
                values = merged(values, helm_python.parse_set_string(words[index + 1]))
        yield command, copy.deepcopy(values)


def merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`--reuse-values` plus a `--set`: maps merge key by key, anything else is replaced."""
    result = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def with_backups() -> dict[str, Any]:
    """The values once a `helm upgrade` has turned the backups on: the release the restore runs against."""
    return next(values for _, values in helm_values() if values.get("backup", {}).get("enabled"))


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART_DIR) as loaded:
        yield loaded


def rendered(chart: helm_python.Chart, values: dict[str, Any]) -> list[dict[str, Any]]:
    output = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=False)
    return [
        doc
        for name, text in output.items()
        if not name.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def test_helm_commands_set_values_the_chart_accepts(chart: helm_python.Chart) -> None:
    steps = list(helm_values())
    assert len(steps) >= 3
    for command, values in steps:
        manifests = rendered(chart, values)
        assert manifests, command.text
    final = rendered(chart, steps[-1][1])
    kinds = {doc["kind"] for doc in final}
    assert {"CronJob", "ServiceMonitor", "PrometheusRule"} <= kinds


def test_the_restore_pod_validates_and_names_what_the_chart_renders(chart: helm_python.Chart) -> None:
    [apply] = [c for c in ALL if c.heredoc and c.words[:3] == ["kubectl", "-n", NAMESPACE]]
    pod = yaml.safe_load(apply.heredoc or "")
    kubernetes_validate.validate(pod, kube_version(), strict=True)
    values = with_backups()
    objects = {(doc["kind"], doc["metadata"]["name"]): doc for doc in rendered(chart, values)}
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    scripts = objects[("ConfigMap", volumes["scripts"]["configMap"]["name"])]
    assert {"harel-backup.sh", "backup.env"} <= set(scripts["data"])
    assert ("PersistentVolumeClaim", volumes["backups"]["persistentVolumeClaim"]["claimName"]) in objects
    env = {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}
    assert not [name for name in env if name.endswith("PASSWORD")], "passwords as files only"
    [item] = volumes["root-auth"]["secret"]["items"]
    secret = objects[("Secret", volumes["root-auth"]["secret"]["secretName"])]
    assert item["key"] in secret["data"]
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert env["HAREL_RESTORE_PASSWORD_FILE"]["value"] == f"{mounts['root-auth']}/{item['path']}"
    assert env["HAREL_BACKUP_SETTINGS"]["value"] == "/var/run/harel/backup/backup.env"
    # The NetworkPolicy in front of MongoDB lets it in.
    policy = objects[("NetworkPolicy", f"{RELEASE}-mongodb")]
    selectors = [peer["podSelector"]["matchLabels"] for peer in policy["spec"]["ingress"][0]["from"]]
    assert any(selector.items() <= pod["metadata"]["labels"].items() for selector in selectors)
    restore = next(c for c in ALL if "harel-backup.sh restore" in c.text and c.words[0] == "kubectl")
    assert restore.words[-3:-1] == ["/var/run/harel/backup/harel-backup.sh", "restore"]
    # mongorestore of the same release as the members' server, as the chart's own backup CronJob runs it.
    cronjob = objects[("CronJob", f"{RELEASE}-backup")]
    images = {c["image"] for c in cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]}
    assert pod["spec"]["containers"][0]["image"] in images


def test_kubectl_commands_name_the_charts_objects(chart: helm_python.Chart) -> None:
    values = with_backups()
    names = {(doc["kind"].lower(), doc["metadata"]["name"]) for doc in rendered(chart, values)}
    assert ("cronjob", f"{RELEASE}-backup") in names
    assert ("deployment", f"{RELEASE}-worker") in names
    text = " ".join(c.text for c in ALL)
    assert f"cronjob/{RELEASE}-backup" in text
    assert f"scale deployment {RELEASE}-worker" in text
    # The restore's Job selector is checked against the Jobs the chart renders in test_readme_commands.py.


def test_ansible_commands_use_tags_site_yml_has() -> None:
    plays = yaml.safe_load((REPOSITORY / "playbooks" / "site.yml").read_text())
    tags = {tag for play in plays for tag in play.get("tags", [])}
    used = [c.words for c in ALL if c.words[:1] == ["ansible-playbook"]]
    assert used
    for words in used:
        requested = set(words[words.index("--tags") + 1].split(","))
        assert requested <= tags, requested - tags
    defaults = yaml.safe_load(
        (REPOSITORY / "playbooks" / "roles" / "mongodb_backup" / "defaults" / "main.yml").read_text()
    )
    restore = next(c for c in ALL if "harel-backup.sh restore" in c.text and c.words[0] == "bash")
    assert restore.words[1] == f"{defaults['mongodb_backup_script_dir']}/harel-backup.sh"
    assert restore.words[3].startswith(defaults["mongodb_backup_dir"] + "/")
    env_source = next(c for c in ALL if ". /etc/default/harel-backup" in c.text)
    assert defaults["mongodb_backup_env_file"] in env_source.text
