"""The dashboard, the alerting rules and the compose observability profile.

- `promtool check rules` and `promtool test rules` on the rules file (Debian's `prometheus` package provides
  promtool), and `promtool check config` on the compose stack's prometheus.yml;
- every metric a dashboard panel or an alert names is one the workers export (harel.metrics.Metrics) or one the
  pinned mongodb_exporter documents (observability/mongodb_exporter_metrics.txt, with its source);
- every alert names a section of docs/runbook.md that exists; the dashboard is well formed;
- `docker compose --profile observability --profile backup config` (Compose's own binary, tests/tools/compose.txt,
  offline) renders in every HAREL_TLS_MODE, and the rendering validates against the compose specification; in it no
  environment holds a password but the exporter's, each secret is mounted for the user its service runs as, and the
  services that reach the members use TLS exactly from preferTLS on; ops-users.js runs as rendered (under the fake
  mongosh of the chart tests), with the files its secrets become.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from prometheus_client.metrics_core import Metric

from harel.metrics import Metrics
from harel_stack.settings import CLIENT_TLS_MODES, SECRET_VARIABLES, TlsMode
from tests.infra.compose_render import env_file, render, secret_value
from tests.infra.test_helm import requires_node
from tests.infra.test_helm_operations import initiated_cluster, run_ops_users

pytestmark = pytest.mark.infra

REPOSITORY = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPOSITORY / "helm" / "harel-stack" / "files" / "observability"
RULES = OBSERVABILITY / "harel-alerts.rules.yml"
DASHBOARD = OBSERVABILITY / "harel-dashboard.json"
RULE_TESTS = Path(__file__).parent / "observability" / "alerts.test.yml"
EXPORTER_METRICS = Path(__file__).parent / "observability" / "mongodb_exporter_metrics.txt"
RUNBOOK = REPOSITORY / "docs" / "runbook.md"
OPS_USERS = REPOSITORY / "helm" / "harel-stack" / "files" / "ops-users.js"
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
    assert rows == ["Workers", "MongoDB", "Sharded cluster"]


def test_dashboard_shows_every_alerted_metric() -> None:
    on_dashboard = set().union(*(metric_names(expr) for _, expr in dashboard_expressions()))
    alerted = set().union(*(metric_names(rule["expr"]) for rule in alert_rules()))
    assert alerted - on_dashboard == set()


# --- compose: the observability and backup profiles ------------------------------------------------------------


# The services of compose/observability.yml.
OPERATOR_SERVICES = ("mongo-ops-users", "mongodb-exporter", "prometheus", "grafana", "backup", "restore")
# The ones that connect to the members, and what in each says how.
MEMBER_CLIENTS = ("mongo-ops-users", "mongodb-exporter", "backup", "restore")
PROFILES = ("three-members", "observability", "backup")
TLS_MODES = get_args(TlsMode)
# The one environment value allowed to carry a password, and why. The Helm chart's exporter has the same exception
# (test_checkov.ACCEPTED_FAILURES); compose/observability.yml says it in place.
PASSWORD_IN_ENVIRONMENT = {
    ("mongodb-exporter", "MONGODB_PASSWORD"): (
        "mongodb_exporter 0.53.0 reads its password from MONGODB_PASSWORD, --mongodb.password or the URI only, and "
        "its image holds the binary alone: no shell to read a file into the variable"
    ),
}
# Every secret mounted in the stack, by service and secret: the uid and gid of the user the service runs as.
SECRET_OWNERS = {
    # The image's entrypoint reads it as mongodb before it starts mongod.
    ("mongo1", "mongo_root_password"): ("999", "999"),
    # The worker image's user.
    ("mongo-init", "mongo_root_password"): ("10001", "10001"),
    ("mongo-init", "mongo_previous_root_password"): ("10001", "10001"),
    ("mongo-init", "app_password"): ("10001", "10001"),
    # user: 999:999, the mongo image's mongodb.
    ("mongo-ops-users", "mongo_root_password"): ("999", "999"),
    ("mongo-ops-users", "monitor_password"): ("999", "999"),
    ("mongo-ops-users", "backup_password"): ("999", "999"),
    # The grafana image's user.
    ("grafana", "grafana_admin_password"): ("472", "0"),
    # user: HAREL_BACKUPS_UID:HAREL_BACKUPS_GID, .env.example's defaults here.
    ("backup", "backup_password"): ("1000", "1000"),
    # user: HAREL_BACKUPS_UID:HAREL_BACKUPS_GID like the backup, whose archives it reads.
    ("restore", "mongo_root_password"): ("1000", "1000"),
}


@pytest.fixture(scope="module")
def rendered_modes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The stack with the observability and backup profiles, as `docker compose config` renders it for each
    HAREL_TLS_MODE from a compose/.env that `make up` would write."""
    return {
        mode: render(env_file(tmp_path_factory.mktemp(f"compose-{mode}"), HAREL_TLS_MODE=mode), *PROFILES)
        for mode in TLS_MODES
    }


@pytest.fixture(scope="module")
def rendered_compose(rendered_modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return rendered_modes["disabled"]


@pytest.mark.parametrize("mode", TLS_MODES)
def test_rendered_compose_validates_against_the_compose_specification(
    rendered_modes: dict[str, dict[str, Any]], mode: str, tmp_path: Path
) -> None:
    path = tmp_path / "rendered.json"
    path.write_text(json.dumps(rendered_modes[mode]))
    checker = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(OPERATOR_SERVICES) <= set(rendered_modes[mode]["services"])


def test_observability_services_are_pinned_private_and_read_only(rendered_compose: dict[str, Any]) -> None:
    services = rendered_compose["services"]
    ours = {name: services[name] for name in OPERATOR_SERVICES}
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


@pytest.mark.parametrize("mode", TLS_MODES)
def test_no_environment_holds_a_password_but_the_exporters(
    rendered_modes: dict[str, dict[str, Any]], mode: str
) -> None:
    services = rendered_modes[mode]["services"]
    passwords = {secret_value(variable) for variable in SECRET_VARIABLES}
    in_environment = set()
    for name, service in services.items():
        mounted = {secret["target"] for secret in service.get("secrets", [])}
        for key, value in service.get("environment", {}).items():
            if any(password in str(value) for password in passwords):
                in_environment.add((name, key))
            elif "PASSWORD" in key:
                # A file compose mounts for the service: the path, never the password.
                assert key.endswith("_FILE") and value in mounted, f"{name}.{key}={value}"
    assert in_environment == set(PASSWORD_IN_ENVIRONMENT)
    # Nor anywhere else: command lines, health checks, labels.
    elsewhere = json.dumps(
        {name: {k: v for k, v in s.items() if k != "environment"} for name, s in services.items()}
    )
    assert not [password for password in passwords if password in elsewhere]


def test_each_secret_is_mounted_owner_read_only_for_the_user_its_service_runs_as(
    rendered_compose: dict[str, Any],
) -> None:
    services = rendered_compose["services"]
    mounted = {
        (name, secret["source"]): (secret["uid"], secret["gid"], secret["mode"], secret["target"])
        for name, service in services.items()
        for secret in service.get("secrets", [])
    }
    assert mounted == {
        (name, source): (uid, gid, "0400", f"/run/secrets/{source}")
        for (name, source), (uid, gid) in SECRET_OWNERS.items()
    }
    # Every service says whom it runs as, none root (tests/infra/test_compose_hardening.py): the secrets' owners.
    users = {name: service["user"] for name, service in services.items()}
    assert {name: users[name] for name, _ in SECRET_OWNERS} == {
        name: ":".join(owner) for (name, _), owner in SECRET_OWNERS.items()
    }
    # Each secret is a variable of compose/.env, which compose copies into the container (never a file in the repo).
    assert {name: secret["environment"] for name, secret in rendered_compose["secrets"].items()} == {
        "mongo_root_password": "HAREL_MONGO_ROOT_PASSWORD",
        "mongo_previous_root_password": "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD",
        "app_password": "HAREL_APP_PASSWORD",
        "monitor_password": "HAREL_MONITOR_PASSWORD",
        "backup_password": "HAREL_BACKUP_PASSWORD",
        "grafana_admin_password": "HAREL_GRAFANA_ADMIN_PASSWORD",
    }


def test_the_backup_and_the_restore_run_as_the_caller_harel_stack_names(tmp_path: Path) -> None:
    """harel-stack's compose runner puts the caller's ids in compose's environment (test_stack_parts): they win over
    compose/.env, and the backup container and its password file follow them."""
    env = env_file(tmp_path, HAREL_BACKUPS_UID="2001", HAREL_BACKUPS_GID="2002")
    by_hand = render(env, "backup")["services"]["backup"]
    caller = render(env, "backup", variables={"HAREL_BACKUPS_UID": "4242", "HAREL_BACKUPS_GID": "4343"})
    backup = caller["services"]["backup"]

    assert by_hand["user"] == "2001:2002"
    assert (by_hand["secrets"][0]["uid"], by_hand["secrets"][0]["gid"]) == ("2001", "2002")
    assert backup["user"] == "4242:4343"
    assert [(s["source"], s["uid"], s["gid"], s["mode"]) for s in backup["secrets"]] == [
        ("backup_password", "4242", "4343", "0400")
    ]
    # The restore reads the archives the backup wrote, as the same caller.
    restore = caller["services"]["restore"]
    assert restore["user"] == "4242:4343"
    assert [(s["source"], s["uid"], s["gid"]) for s in restore["secrets"]] == [
        ("mongo_root_password", "4242", "4343")
    ]


def _without_tls_settings(service: dict[str, Any]) -> dict[str, Any]:
    """`service` less what says how it reaches the members (the exporter's URIs, the CA file settings)."""
    environment = dict(service.get("environment", {}))
    environment.pop("HAREL_BACKUP_TLS_CA", None)
    if "HAREL_OPS_USERS" in environment:
        environment["HAREL_OPS_USERS"] = {
            k: v for k, v in json.loads(environment["HAREL_OPS_USERS"]).items() if k != "tlsCAFile"
        }
    command = [a for a in service.get("command") or [] if not a.startswith("--mongodb.uri=")]
    return service | {"environment": environment, "command": command}


@pytest.mark.parametrize("mode", TLS_MODES)
def test_operator_services_reach_the_members_with_tls_exactly_from_prefer_tls_on(
    rendered_modes: dict[str, dict[str, Any]], mode: str
) -> None:
    services = rendered_modes[mode]["services"]
    clients_use_tls = mode in CLIENT_TLS_MODES
    ca = "/tls/ca.crt" if clients_use_tls else ""

    [uris] = [
        a.removeprefix("--mongodb.uri=") for a in services["mongodb-exporter"]["command"] if "uri=" in a
    ]
    query = "?tls=true&tlsCAFile=/tls/ca.crt" if clients_use_tls else ""
    assert uris.split(",") == [f"mongodb://mongo{n}:27017/admin{query}" for n in (1, 2, 3)]
    assert json.loads(services["mongo-ops-users"]["environment"]["HAREL_OPS_USERS"])["tlsCAFile"] == ca
    assert services["backup"]["environment"]["HAREL_BACKUP_TLS_CA"] == ca
    assert services["restore"]["environment"]["HAREL_BACKUP_TLS_CA"] == ca
    for name in MEMBER_CLIENTS:
        # The CA the `tls` one-shot writes, mounted in every mode (empty of certificates while TLS is disabled).
        assert {
            "type": "volume",
            "source": "tls",
            "target": "/tls",
            "read_only": True,
            "volume": {},
        } in services[name]["volumes"], name
    # Nothing else differs from the plain rendering: the mode changes how these services connect, and only that.
    plain = rendered_modes["disabled"]["services"]
    for name in OPERATOR_SERVICES:
        assert _without_tls_settings(services[name]) == _without_tls_settings(plain[name]), name
    if not clients_use_tls:
        assert {name: services[name] for name in OPERATOR_SERVICES} == {
            name: plain[name] for name in OPERATOR_SERVICES
        }


@requires_node
@pytest.mark.parametrize("mode", TLS_MODES)
def test_ops_users_one_shot_as_rendered_reads_its_secrets_and_connects_as_the_mode_says(
    rendered_modes: dict[str, dict[str, Any]], mode: str, tmp_path: Path
) -> None:
    """ops-users.js under the fake mongosh of the chart tests (tests/infra/fake_mongosh.js), with the environment
    compose renders for mongo-ops-users and, at their mount points, the files its secrets become."""
    rendered = rendered_modes[mode]
    service = rendered["services"]["mongo-ops-users"]
    environment = dict(service["environment"])
    config = json.loads(environment.pop("HAREL_OPS_USERS"))
    mounted = {
        secret["target"]: secret_value(rendered["secrets"][secret["source"]]["environment"])
        for secret in service["secrets"]
    }
    cluster = initiated_cluster(config, secret_value("HAREL_MONGO_ROOT_PASSWORD"))

    run = run_ops_users(
        tmp_path, {"ops-users.js": OPS_USERS.read_text()}, config, environment, cluster, mounted
    )

    assert run.ok, run.error
    assert {name: user["pwd"] for name, user in run.cluster["users"].items()} == {
        "harel-monitor": secret_value("HAREL_MONITOR_PASSWORD"),
        "harel-backup": secret_value("HAREL_BACKUP_PASSWORD"),
    }
    tls = {"tls": "true", "tlsCAFile": "/tls/ca.crt"} if mode in CLIENT_TLS_MODES else {}
    assert run.connections
    for connection in run.connections:
        assert connection["hosts"] == ["mongo1:27017", "mongo2:27017", "mongo3:27017"]
        assert {k: v for k, v in connection["options"].items() if k.startswith("tls")} == tls


def test_the_local_stack_loads_the_charts_dashboard_rules_and_scripts(
    rendered_compose: dict[str, Any],
) -> None:
    services = rendered_compose["services"]
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
