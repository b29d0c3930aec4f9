"""The alerts worth having (deploy/prometheus/alerts.yml): the rules are valid and fire when they should
(promtool's own checker and rule unit tests), and every series they read is one the server exports, with the
values the rules expect."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from lakewarden.domain.states import ProcessStatus
from lakewarden.store import processes as store
from tests.test_scheduling import (
    add_table,
    ctx_of,
    fail_task,
    make_pending,
    poll,
    process_with_tasks,
    register,
    start_optimizing,
)
from tests.tools import tool_missing

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"


def rules() -> list[dict[str, object]]:
    document = yaml.safe_load((RULES / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_rule_names_its_severity_and_says_what_to_do() -> None:
    found = rules()
    assert {str(r["alert"]) for r in found} == {
        "LakewardenTablePendingTooLong",
        "LakewardenProcessesFailingRepeatedly",
        "LakewardenGroupWithoutOptimizer",
        "LakewardenCatalogUnhealthy",
        "LakewardenNoLeader",
    }
    for rule in found:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule  # type: ignore[index]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule  # type: ignore[index]
        assert "for" in rule, rule  # a blip is not an alert


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    if shutil.which("promtool") is None:
        tool_missing("promtool (Debian's prometheus)")
    checked = subprocess.run(["promtool", "check", "rules", "alerts.yml"], cwd=RULES, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout
    tested = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=RULES, capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def samples(client: TestClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_the_series_the_rules_read_are_exported_with_the_values_they_expect(client: TestClient) -> None:
    ctx = ctx_of(client)
    assert client.post("/api/v1/resource-groups", json={"name": "etl", "container": "local"}).status_code == 201
    waiting = add_table(ctx, "waiting", group="etl")
    make_pending(ctx, waiting)
    failing = add_table(ctx, "failing", **{"self-optimizing.execute.num-retries": "0"})
    token = register(client, "default")
    for _ in range(2):  # two processes of the table fail in a row
        pid = process_with_tasks(ctx, failing, tasks=1)
        start_optimizing(ctx, failing, pid)
        task = poll(client, token)
        fail_task(client, token, pid, task["attempt"], "ValidationException: nope", failure="final")
        assert client.get(f"/api/v1/processes/{pid}").json()["status"] == "failed"

    found = samples(client)
    for rule in rules():
        for name in re.findall(r"lakewarden_[a-z_]+", str(rule["expr"])):
            assert name in found, f"{rule['alert']} reads {name}, which the server does not export"

    status = {
        (labels["table"], labels["status"], labels["group"]): v
        for labels, v in found["lakewarden_table_status_seconds"]
    }
    assert 0 <= status[("waiting", "pending", "etl")] < 60
    streaks = {(labels["table"], labels["action"]): v for labels, v in found["lakewarden_table_failures_in_a_row"]}
    assert streaks == {("failing", "optimizing"): 2.0}
    optimizers = {labels["group"]: v for labels, v in found["lakewarden_group_optimizers"]}
    pending = {labels["group"]: v for labels, v in found["lakewarden_group_pending_tables"]}
    assert optimizers == {"default": 1.0, "etl": 0.0} and pending == {"default": 0.0, "etl": 1.0}

    # a success ends the streak
    pid = process_with_tasks(ctx, failing, tasks=1)
    with ctx.db.write() as session:
        store.transition_process(session, pid, ProcessStatus.RUNNING, ProcessStatus.SUCCESS)
    assert "lakewarden_table_failures_in_a_row" not in samples(client)
