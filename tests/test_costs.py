"""What each process cost: Spark's own figures of every task, priced by the task's group.

The figures come from the optimizer's Spark driver (its status store, behind the Spark UI): they are checked
against what the Spark UI's REST API shows for the same job group, then followed into the process, the table,
the group, the overview, the CLI and the Prometheus metrics.
"""

from __future__ import annotations

import math
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lakewarden.config import Config
from lakewarden.domain.costs import GB, Price, add_usage, cpu_seconds, total_usage, validate_prices
from lakewarden.domain.errors import InvalidField
from lakewarden.optimizer.cpu import TICKS, CpuShares, process_cpu_seconds
from lakewarden.protocol.messages import SparkUsage
from tests.helpers import PROPS, open_lake, running_optimizer, table_status, wait_for
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# ---- the rules


def test_a_price_charges_the_cores_held_and_the_bytes_written() -> None:
    price = Price(core_hour=2.0, gb_written=0.5)
    assert price.of(SparkUsage()) == 0
    # one core held for half an hour, two GB written: 1.0 + 1.0; CPU time is not what is charged
    assert price.of(SparkUsage(run_ms=1_800_000, cpu_ms=10, written_bytes=2 * GB)) == pytest.approx(2.0)


def test_a_group_sets_its_own_price_and_a_bad_one_is_refused_by_name() -> None:
    default = Price(core_hour=0.05, gb_written=0.0, currency="EUR")
    assert default.for_group({}) == default
    assert default.for_group({"cost.core-hour": "1.5"}) == Price(1.5, 0.0, "EUR")
    assert default.for_group({"cost.gb-written": "0"}).gb_written == 0
    for bad in ("-1", "abc", "nan", "inf", ""):
        with pytest.raises(InvalidField) as refused:
            validate_prices({"cost.gb-written": bad})
        assert refused.value.field == "properties.cost.gb-written"


def test_attempts_add_up_and_keep_their_cost() -> None:
    price = Price(core_hour=3600.0)  # a core-second costs 1
    first = add_usage(None, SparkUsage(tasks=2, run_ms=1000, cpu_ms=700, peak_memory_bytes=10), price)
    assert first["cost"] == pytest.approx(1.0)
    # the retry is priced at the price of its time; the peak is the larger one, not a sum
    both = add_usage(first, SparkUsage(tasks=3, run_ms=3000, cpu_ms=100, peak_memory_bytes=4), Price(core_hour=7200.0))
    assert both["tasks"] == 5 and both["run_ms"] == 4000 and both["cpu_ms"] == 800
    assert both["peak_memory_bytes"] == 10
    assert both["cost"] == pytest.approx(1.0 + 6.0)
    total = total_usage([both, None, first])
    assert total["tasks"] == 7 and total["cost"] == pytest.approx(8.0) and total["peak_memory_bytes"] == 10


def test_attempts_side_by_side_share_the_cpu_spent_while_they_ran() -> None:
    spent = [0.0]
    shares = CpuShares(lambda: spent[0])
    spent[0] = 5.0  # before any attempt: nobody's
    shares.start("a")
    spent[0] = 7.0  # a alone
    shares.start("b")
    spent[0] = 11.0  # a and b
    assert shares.stop("a") == pytest.approx(2.0 + 2.0)
    spent[0] = 12.0  # b alone
    assert shares.stop("b") == pytest.approx(2.0 + 1.0)
    assert shares.stop("never-started") == 0.0


def test_a_process_cpu_is_read_from_proc_and_grows_with_work() -> None:
    before = process_cpu_seconds([os.getpid()])
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = process_cpu_seconds([os.getpid()])
    assert after - before >= 0.15
    assert process_cpu_seconds([os.getpid(), 2**22 + 12345]) >= after  # a process gone adds nothing


def test_a_tasks_cpu_is_its_whole_cpu_when_measured_else_spark_executor_cpu() -> None:
    assert cpu_seconds({"cpu_ms": 500, "whole_cpu_ms": 2500}) == 2.5
    assert cpu_seconds({"spark_cpu_ms": 500}, "spark_") == 0.5  # an optimizer that did not measure it
    assert cpu_seconds(None) == 0.0


def test_the_server_price_is_configured_and_checked() -> None:
    config = Config.model_validate({"ams": {"cost": {"core-hour": 0.2, "currency": "EUR"}}})
    assert config.ams.cost.core_hour == 0.2 and config.ams.cost.gb_written == 0 and config.ams.cost.currency == "EUR"
    with pytest.raises(ValueError, match="core-hour"):
        Config.model_validate({"ams": {"cost": {"core-hour": -1}}})


# ---- measured on Spark


def ui_figures(spark: SparkSession, group: str) -> dict[str, int]:
    """What the Spark UI's REST API shows for the stages of a job group's jobs."""
    sc = spark.sparkContext
    assert sc.uiWebUrl, "the test session runs its web UI"
    api = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    jobs = [j for j in httpx.get(f"{api}/jobs", timeout=10).json() if j.get("jobGroup") == group]
    figures = {"jobs": len(jobs), "cpu_ns": 0, "run_ms": 0, "written_bytes": 0, "read_records": 0, "tasks": 0}
    figures["peak_memory"] = 0  # the largest of any one task's, from each attempt's list of tasks
    for stage_id in sorted({s for j in jobs for s in j["stageIds"]}):
        response = httpx.get(f"{api}/stages/{stage_id}", timeout=10)
        if response.status_code == 404:
            continue
        for attempt in response.json():
            figures["cpu_ns"] += attempt["executorCpuTime"]
            figures["run_ms"] += attempt["executorRunTime"]
            figures["written_bytes"] += attempt["outputBytes"]
            figures["read_records"] += attempt["inputRecords"]
            figures["tasks"] += attempt["numCompleteTasks"] + attempt["numFailedTasks"] + attempt["numKilledTasks"]
            listed = httpx.get(f"{api}/stages/{stage_id}/{attempt['attemptId']}/taskList?length=10000", timeout=10)
            peaks = [t["taskMetrics"]["peakExecutionMemory"] for t in listed.json() if t.get("taskMetrics")]
            figures["peak_memory"] = max([figures["peak_memory"], *peaks])
    return figures


@pytest.mark.spark
def test_the_usage_of_a_job_group_is_what_the_spark_ui_shows(spark: SparkSession, tmp_path: Any) -> None:
    from lakewarden.optimizer.usage import job_group_usage

    sc = spark.sparkContext
    sc.setJobGroup("lakewarden-usage-test", "usage", interruptOnCancel=True)
    try:
        frame = spark.range(0, 400_000, 1, 4).selectExpr("id % 97 AS k", "id")
        frame.groupBy("k").count().write.mode("overwrite").parquet(str(tmp_path / "out"))
        spark.range(0, 1000).selectExpr("sum(id)").collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    usage = job_group_usage(spark, "lakewarden-usage-test")
    shown = ui_figures(spark, "lakewarden-usage-test")
    assert usage.jobs == shown["jobs"] >= 2
    assert usage.cpu_ms == shown["cpu_ns"] // 1_000_000 > 0
    assert usage.run_ms == shown["run_ms"] > 0
    assert usage.written_bytes == shown["written_bytes"] > 0
    assert usage.read_records == shown["read_records"] == 401_000
    assert usage.tasks == shown["tasks"] > 0
    assert usage.shuffle_bytes > 0  # an aggregation: its hash map is the largest task's peak memory
    assert usage.peak_memory_bytes == shown["peak_memory"] > 0
    assert job_group_usage(spark, "no-such-group") == SparkUsage()


@pytest.mark.spark
def test_the_usage_of_a_failed_job_counts_its_failed_tasks(spark: SparkSession) -> None:
    from lakewarden.optimizer.usage import job_group_usage

    def fail(_: object) -> None:
        raise ValueError("a task that fails")

    sc = spark.sparkContext
    sc.setJobGroup("lakewarden-usage-failed", "usage of a failed job", interruptOnCancel=True)
    try:
        with pytest.raises(Exception, match="a task that fails"):
            sc.parallelize(range(4), 2).foreach(fail)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    usage = job_group_usage(spark, "lakewarden-usage-failed")
    shown = ui_figures(spark, "lakewarden-usage-failed")
    assert usage.jobs == shown["jobs"] == 1
    # local mode tries a task once: the failed attempt of the stage is its last, and its tasks are counted
    assert usage.tasks == shown["tasks"] >= 1
    assert usage.run_ms == shown["run_ms"]


@pytest.mark.spark
@pytest.mark.slow
def test_a_compaction_records_what_spark_measured_and_what_it_cost(server: ServerProcess, spark: SparkSession) -> None:
    api = open_lake(server, spark)
    group = api.get("/resource-groups/default").json()
    # a core-second costs 1, a MiB written costs 1: the cost can be checked against the figures
    properties = {**group["properties"], "cost.core-hour": "3600", "cost.gb-written": "1024"}
    assert api.put("/resource-groups/default", json={"properties": properties}).status_code == 200
    refused = api.put("/resource-groups/default", json={"properties": {"cost.core-hour": "cheap"}})
    assert refused.status_code == 400 and "properties.cost.core-hour" in refused.text

    spark.sql(f"CREATE TABLE local.db.c (id BIGINT, cat STRING, v STRING) USING iceberg TBLPROPERTIES ({PROPS})")
    for i in range(4):
        spark.sql(f"INSERT INTO local.db.c SELECT id, 'a', 'v{i}' FROM range({i * 1000}, {i * 1000 + 1000})")
    api.post("/catalogs/local/refresh")
    pending = table_status(api, "c", "pending")
    with running_optimizer(server, spark):
        process = wait_for(
            "a finished process",
            lambda: next((p for p in api.get("/processes").json() if p["status"] in ("success", "failed")), None),
        )
    assert process["status"] == "success", process
    (task,) = process["tasks"]
    usage = task["usage"]
    # exactly what the Spark UI shows for the task's job group
    # the attempt's own job group: its optimizer (by its digest), process, task and attempt
    group = f"lakewarden-{task['optimizer']}-{process['process_id']}-{task['task_id']}-{task['attempt']}"
    shown = ui_figures(spark, group)
    assert usage["cpu_ms"] == shown["cpu_ns"] // 1_000_000 > 0
    # its whole CPU: the optimizer's process and JVM while it ran, which holds a local master's executors
    assert usage["whole_cpu_ms"] > 0 and usage["whole_cpu_ms"] + 2 * 1000 // TICKS >= usage["cpu_ms"]
    assert usage["run_ms"] == shown["run_ms"] > 0
    assert usage["written_bytes"] == shown["written_bytes"] > 0
    assert usage["read_records"] == shown["read_records"] == 4000
    assert usage["jobs"] == shown["jobs"] >= 1 and usage["tasks"] == shown["tasks"]
    expected = usage["run_ms"] / 1000 + usage["written_bytes"] / 2**20
    assert math.isclose(usage["cost"], expected, rel_tol=1e-9)

    # the process adds up its tasks, live and in its summary; the table, the group and the overview add up processes
    assert process["usage"] == {**usage}
    summary = process["summary"]
    assert summary["spark_cpu_ms"] == usage["cpu_ms"] and summary["spark_written_bytes"] == usage["written_bytes"]
    assert math.isclose(summary["cost"], expected, rel_tol=1e-9)
    table = api.get("/tables/local/db/c").json()
    assert table["usage"]["spark_run_ms"] == usage["run_ms"] and table["currency"] == "USD"
    assert math.isclose(table["usage"]["cost"], expected, rel_tol=1e-9)
    group = api.get("/resource-groups/default").json()
    assert math.isclose(group["usage"]["cost"], expected, rel_tol=1e-9)
    overview = api.get("/overview").json()
    assert overview["usage"]["spark_cpu_ms"] == usage["cpu_ms"]

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(api.get(f"{server.url}/metrics").text)
        for sample in family.samples
    }
    labels = (("action", "optimizing"), ("catalog", "local"), ("database", "db"), ("table", "c"))
    assert samples[("lakewarden_spark_cpu_seconds_total", labels)] == usage["cpu_ms"] / 1000
    assert samples[("lakewarden_process_cpu_seconds_total", labels)] == usage["whole_cpu_ms"] / 1000
    assert samples[("lakewarden_spark_written_bytes_total", labels)] == usage["written_bytes"]
    assert math.isclose(samples[("lakewarden_process_cost_total", labels)], expected, rel_tol=1e-9)
    assert math.isclose(samples[("lakewarden_group_cost_total", (("group", "default"),))], expected, rel_tol=1e-9)

    # why the table went first: the only pending table of its group
    assert process["scheduling"]["chosen"]["table"] == "local.db.c" and process["scheduling"]["runner_up"] is None
    assert process["scheduling"]["reason"] == (
        "quota: used 0.0% of its quota in the last hour; the only table that could be planned"
    )
    # since when it waited: the moment it turned pending, before its process was planned
    since = datetime.fromisoformat(process["scheduling"]["pending_since"])
    assert since == datetime.fromisoformat(pending["status_changed_at"]).replace(tzinfo=UTC)
    assert since <= datetime.fromisoformat(process["start_time"]).replace(tzinfo=UTC)
    shown_cli = cli(server, "process", "show", str(process["process_id"])).stdout
    assert "the only table that could be planned" in shown_cli
    assert "what it bought" in shown_cli and "no scans in the day before it" in " ".join(shown_cli.split())
    assert f"cpu {usage['cpu_ms'] / 1000:.1f}s" in shown_cli and "USD" in shown_cli
    assert "cost of its processes" in cli(server, "table", "show", "local.db.c").stdout
    assert "spark cpu s" in cli(server, "group", "list").stdout
