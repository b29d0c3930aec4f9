"""The dashboard in a real headless Chromium (Debian's, driven by Selenium) against a real server with
real tables: every page clicked through, a group scaled out through a form, a process watched as it
appears, bad input answered in the form. Screenshots of every page go to test-output/dashboard/."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.helpers import PROPS, open_lake, wait_for
from tests.servers import FAST_EVALUATOR, ServerProcess, started_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]
OUTPUT = Path(os.environ.get("LAKEWARDEN_TEST_OUTPUT", Path(__file__).resolve().parent.parent / "test-output"))


class Page:
    """The dashboard in the browser: navigate, wait for what a person would see, take screenshots."""

    def __init__(self, driver: Any, server: ServerProcess) -> None:
        self.driver = driver
        self.root = f"{server.url}/dashboard/"
        (OUTPUT / "dashboard").mkdir(parents=True, exist_ok=True)

    def open(self, fragment: str) -> None:
        self.driver.get(self.root + fragment)

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def text(self, selector: str) -> str:
        """The element's text; "" while it is missing or being replaced by the page's live refresh."""
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            found = self.all(selector)
            return str(found[0].text) if found else ""
        except StaleElementReferenceException:
            return ""

    def click(self, selector: str, timeout: float = 60) -> None:
        """Click an element that the live refresh may be re-rendering: find it afresh until it works."""
        from selenium.common.exceptions import StaleElementReferenceException

        def attempt() -> bool:
            try:
                found = self.all(selector)
                if found:
                    found[0].click()
                    return True
            except StaleElementReferenceException:
                pass
            return False

        wait_for(f"a click on {selector}", attempt, timeout=timeout, interval=0.25)

    def wait_text(self, selector: str, expected: str, timeout: float = 60) -> str:
        return str(
            wait_for(
                f"{expected!r} in {selector}",
                lambda: expected in self.text(selector) and self.text(selector),
                timeout=timeout,
                interval=0.25,
            )
        )

    def wait_for(self, selector: str, timeout: float = 60) -> Any:
        return wait_for(
            f"{selector} on the page", lambda: (self.all(selector) or [None])[0], timeout=timeout, interval=0.25
        )

    def sign_in(self, token: str | None = None, name: str = "", password: str = "") -> None:
        """The sign-in form, as the dashboard shows it to a visitor without a session."""
        self.wait_for("#sign-in")
        if token is not None:
            self.css('#sign-in input[name="token"]').send_keys(token)
        else:
            self.css('#sign-in input[name="name"]').send_keys(name)
            self.css('#sign-in input[name="password"]').send_keys(password)
        self.css('#sign-in button[type="submit"]').click()

    def chart(self, selector: str, label: str) -> list[dict[str, Any]] | None:
        """The points of a chart's dataset, as Chart.js holds them; None while the chart or the dataset is missing."""
        script = (
            "const canvas = document.querySelector(arguments[0]);"
            "const chart = canvas && Chart.getChart(canvas);"
            "const set = chart && chart.data.datasets.find((d) => d.label === arguments[1]);"
            "return set && set.data.length ? set.data.map((p) => ({x: p.x, y: p.y})) : null;"
        )
        found = self.driver.execute_script(script, selector, label)
        return list(found) if found else None

    def screenshot(self, name: str) -> None:
        assert self.driver.save_screenshot(str(OUTPUT / "dashboard" / f"{name}.png"))


def test_every_page_live_with_forms_scale_out_and_a_process(tmp_path: Path, spark: SparkSession, browser: Any) -> None:
    extra = (
        "  evaluator: {interval: 1s, recheck-interval: 1s}\n  optimizer: {heart-beat-timeout: 20s}\n"
        # every change sampled for the charts, the groups' load every second
        "  history: {table-shapes: {interval: 0s}, group-load: {interval: 1s}}\n"
    )
    with started_server(tmp_path, extra=extra) as server:
        api: httpx.Client = open_lake(server, spark)
        spark.sql(
            f"CREATE TABLE local.db.clicks (id BIGINT, cat STRING, v STRING) USING iceberg "
            f"PARTITIONED BY (cat) TBLPROPERTIES ({PROPS}, 'gc.enabled'='false')"
        )
        for i in range(4):
            spark.sql(
                f"INSERT INTO local.db.clicks SELECT id, IF(id % 2 = 0, 'a', 'b'), 'v' FROM range({i * 10}, "
                f"{i * 10 + 10})"
            )
        api.post("/catalogs/local/refresh")
        wait_for("pending", lambda: api.get("/tables/local/db/clicks").json()["status"] == "pending")
        page = Page(browser, server)

        # a visitor without a session sees the sign-in form; a wrong token is refused there
        page.open("#/")
        page.sign_in("lw_nope_nope")
        page.wait_text("#sign-in-error", "unknown token")
        page.css('#sign-in input[name="token"]').clear()
        page.screenshot("sign-in")
        page.css('#sign-in input[name="token"]').send_keys(server.token)
        page.css('#sign-in button[type="submit"]').click()
        page.wait_text("#signed-in", "admin (admin)")

        # overview: the cards fill in from the API
        page.wait_text("#card-tables .value", "1")
        page.wait_text("#card-pending .value", "1")
        page.wait_text("#card-threads", "OPTIMIZER THREADS")  # in capitals: the style sheet
        page.wait_text(f'#nodes tr[data-node="{server.url}"]', "leader")  # one node: it leads
        assert "(serving this page)" in page.text(f'#nodes tr[data-node="{server.url}"]')
        page.screenshot("overview")

        # catalogs: health and last refresh; refresh one now
        page.css('nav a[data-nav="catalogs"]').click()
        page.wait_text('tr[data-catalog="local"]', "healthy")
        page.click('button[data-refresh="local"]')
        message = page.wait_text("#catalog-message", "local: healthy")
        # counts, not names; `updated` is 1 if the optimizer compacted the table since the last refresh
        shown = re.fullmatch(r"local: healthy, 0 added, ([01]) updated, 0 disposed; 1 in all", message)
        assert shown is not None, message
        page.screenshot("catalogs")

        # tables: status, group and health; the filter; a click opens the table
        page.css('nav a[data-nav="tables"]').click()
        row = page.wait_text('tr[data-table="local.db.clicks"]', "pending")
        assert "default" in row and "poor" in row
        page.css("#table-filter").send_keys("nothing-matches")
        wait_for("the filter", lambda: not page.all('tr[data-table="local.db.clicks"]'), timeout=10, interval=0.25)
        page.css("#table-filter").clear()
        page.click('tr[data-table="local.db.clicks"]')
        page.wait_text("#tab", "Why pending")
        page.wait_text("#tab", "minor.trigger.file-count")  # the why, per partition
        page.screenshot("table")
        for tab, expected in (
            ("files", "cat=a"),
            ("snapshots", "append"),
            ("processes", "none"),
            ("config", "self-optimizing.minor.trigger.file-count"),
        ):
            page.css(f'a[data-tab="{tab}"]').click()
            page.wait_text("#tab", expected)
            page.screenshot(f"table-{tab}")
        # a maintenance action from the table page: an unknown dry run is refused, with the reason shown
        page.css('a[data-tab="overview"]').click()
        page.wait_for("#action-form")
        page.css("#dry-run").click()
        page.css('#action-form button[type="submit"]').click()
        page.wait_text("#action-error", "dry_run")
        # a table setting that forbids an action: shown on the page, and a run creates no process
        page.wait_text("#maintenance", "gc.enabled=false on the table")
        page.css("#dry-run").click()
        page.css('#action-form button[type="submit"]').click()  # expire-snapshots, the first action
        page.wait_text("#action-message", "no process created: gc.enabled=false")

        # groups: bad input gets a clear message; a new group; scale the default group out
        page.css('nav a[data-nav="groups"]').click()
        page.wait_for('[data-group="default"]')
        page.css("#group-name").send_keys("bad name!")
        page.css('#group-create button[type="submit"]').click()
        page.wait_text("#group-create-error", "name")
        page.css("#group-name").clear()
        page.css("#group-name").send_keys("etl")
        page.css("#group-properties").clear()
        page.css("#group-properties").send_keys("not a pair")
        page.css('#group-create button[type="submit"]').click()
        page.wait_text("#group-create-error", "key=value")
        page.css("#group-properties").clear()
        page.css("#group-properties").send_keys("scheduling-policy=balanced")
        page.css('#group-create button[type="submit"]').click()
        page.wait_for('[data-group="etl"]')
        assert api.get("/resource-groups/etl").json()["properties"] == {"scheduling-policy": "balanced"}
        # dynamic allocation: settings that cannot work name the property; a group using it shows its state
        edit = page.css('[data-group="etl"] [data-form="edit"] textarea')
        edit.clear()
        edit.send_keys("dynamic-allocation.enabled=true")
        page.css('[data-group="etl"] [data-form="edit"] button').click()
        page.wait_text('[data-group="etl"] [data-field="edit-error"]', "dynamic-allocation.max-parallelism")
        dynamic = {"dynamic-allocation.enabled": "true", "dynamic-allocation.max-parallelism": "2"}
        assert api.put("/resource-groups/etl", json={"properties": dynamic}).is_success
        page.wait_text(
            '[data-group="etl"] [data-field="allocation"]', "dynamic allocation: 0 idle, 0 draining", timeout=30
        )
        scale = page.css('[data-group="default"] [data-form="scale"] input[name="instances"]')
        scale.clear()
        scale.send_keys("99")
        page.css('[data-group="default"] [data-form="scale"] button').click()
        page.wait_text('[data-group="default"] [data-field="scale-error"]', "instances")
        scale.clear()
        scale.send_keys("1")
        page.css('[data-group="default"] [data-form="scale"] button').click()
        page.wait_text('[data-group="default"] [data-field="scale-message"]', "asked for 1")
        page.wait_for('[data-group="default"] tr[data-optimizer]', timeout=180)  # a real optimizer process
        page.screenshot("groups")

        # processes: the optimizer picks the pending table up and its process appears
        page.css('nav a[data-nav="processes"]').click()
        page.wait_text('#recent tr[data-action="optimizing"]', "local.db.clicks", timeout=180)
        page.wait_text("#recent", "success", timeout=180)
        # the timeline (Gantt) of recent processes: a bar for the process, in the row of its group and table
        bars = wait_for("the timeline's bar", lambda: page.chart("#timeline", "optimizing"))
        assert bars[0]["y"] == "default · local.db.clicks" and bars[0]["x"][0] < bars[0]["x"][1]
        page.screenshot("processes")

        # the table's shape over time: files before and after, the process shaded on the same axis
        page.open("#/tables/local/db/clicks/history")
        data = wait_for("two samples", lambda: len(page.chart("#history-files", "data files") or []) >= 3, timeout=60)
        assert data
        files = [point["y"] for point in page.chart("#history-files", "data files") or []]
        assert 8 in files and files[-1] == 2  # 8 small files, then one per partition
        bands = page.driver.execute_script(
            "const chart = Chart.getChart(document.querySelector('#history-files'));"
            "return Array.from(chart.options.plugins.processBands.items, (band) => String(band.label));"
        )
        assert any(str(band).startswith("minor #") for band in bands), bands
        page.wait_text("#history-note", "processes shaded")
        page.screenshot("table-history")
        # the table's processes: each with its tasks and the files it changed (the files endpoint's first page)
        page.open("#/tables/local/db/clicks/processes")
        page.wait_text("#tab", "data file rewritten")
        assert page.text("#tab").count("data file written") == 2  # one file per partition
        # what it bought: nothing reads this table through lakewarden's catalog, so nothing to judge it by
        page.wait_text("#tab", "what it bought: cost")
        assert "no scans in the day before it" in page.text("#tab")

        # how a table is read: Spark's scan and commit reports to lakewarden's REST catalog, summed and charted
        spark.sql("CREATE TABLE lake.db.seen (id BIGINT) USING iceberg")
        spark.sql("INSERT INTO lake.db.seen VALUES (1), (2)")
        assert len(spark.sql("SELECT * FROM lake.db.seen WHERE id > 0").collect()) == 2
        page.open("#/tables/lake/db/seen/reads")
        page.wait_text("#reads-summary", "spark 1")
        assert "admin 1" in page.text("#reads-summary")
        scans = wait_for("the reads chart", lambda: page.chart("#reads-chart", "scans"))
        assert len(scans) == 24 and scans[-1]["y"] == 1
        page.screenshot("table-reads")

        # a group's load over time
        page.css('nav a[data-nav="groups"]').click()
        busy = wait_for(
            "the load chart", lambda: page.chart('[data-group="default"] [data-field="load-chart"]', "threads")
        )
        assert max(point["y"] for point in busy) >= 1  # the optimizer's thread
        page.screenshot("groups-load")
        page.open("#/")
        page.wait_text("#card-files .value", "→")
        page.wait_text("#card-cost", "USD")  # what the processes cost
        wait_for("files optimized", lambda: page.text("#card-files .value") not in ("", "0 → 0"), timeout=30)
        page.screenshot("overview-after")
        assert api.post("/resource-groups/default/scale", json={"instances": 0}).status_code == 200

        # sign out; a viewer signs in with name and password, sees every page and changes nothing
        body = {"name": "vera", "role": "viewer", "password": "correct horse"}
        assert api.post("/principals", json=body).status_code == 201
        page.click("#sign-out")
        page.sign_in(name="vera", password="wrong password")
        page.wait_text("#sign-in-error", "wrong name or password")
        page.css('#sign-in input[name="password"]').clear()
        page.css('#sign-in input[name="password"]').send_keys("correct horse")
        page.css('#sign-in button[type="submit"]').click()
        page.wait_text("#signed-in", "vera (viewer)")
        page.css('nav a[data-nav="groups"]').click()
        scale = page.wait_for('[data-group="default"] [data-form="scale"] input[name="instances"]')
        scale.clear()
        scale.send_keys("1")
        page.css('[data-group="default"] [data-form="scale"] button').click()
        page.wait_text('[data-group="default"] [data-field="scale-error"]', "needs role operator")
        page.screenshot("viewer-refused")
        assert api.get("/resource-groups/default").json()["properties"].get("instances") == "0"
        audit = api.get("/audit").json()
        assert [e["action"] for e in audit[:1]] == ["create-principal"] and audit[0]["principal"] == "admin"
        # the audit page: who changed what, here the viewer's own visit changed nothing
        page.css('nav a[data-nav="audit"]').click()
        page.wait_text("#audit", "create-principal")
        page.wait_text("#audit", "POST /api/v1/resource-groups/{name}/scale")  # the admin's scale-out
        page.css("#audit-principal").send_keys("nobody")
        wait_for("the filter", lambda: "none" in page.text("#audit"), timeout=10, interval=0.25)
        page.screenshot("audit")


def test_metrics_expose_tables_processes_groups_and_latency(tmp_path: Path, spark: SparkSession) -> None:
    from tests.helpers import running_optimizer

    with started_server(tmp_path, extra=FAST_EVALUATOR) as server:
        api = open_lake(server, spark)
        spark.sql(f"CREATE TABLE local.db.m (id BIGINT, cat STRING, v STRING) USING iceberg TBLPROPERTIES ({PROPS})")
        for i in range(4):
            spark.sql(f"INSERT INTO local.db.m VALUES ({i}, 'a', 'v')")
        api.post("/catalogs/local/refresh")
        wait_for("pending", lambda: api.get("/tables/local/db/m").json()["status"] == "pending")
        with running_optimizer(server, spark):
            wait_for("optimized", lambda: [p for p in api.get("/processes").json() if p["status"] == "success"])
        spark.sql("ALTER TABLE local.db.m SET TBLPROPERTIES ('snapshot.keep.duration'='0min')")
        api.post("/catalogs/local/refresh")
        process = api.post("/tables/local/db/m/actions/expire-snapshots").json()["process_id"]
        with running_optimizer(server, spark):
            wait_for("expired", lambda: api.get(f"/processes/{process}").json()["status"] == "success")
        text = server.http.get(f"{server.url}/metrics").text
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))

    def value(name: str, **labels: str) -> float:
        found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
        assert found, f"{name} {labels} not in\n{text}"
        return sum(found)

    table = {"catalog": "local", "database": "db", "table": "m"}
    assert value("lakewarden_table_status", **table, status="idle") == 1
    assert value("lakewarden_table_files", **table, content="data") == 1  # compacted into one
    assert value("lakewarden_processes_total", **table, action="optimizing", type="minor", status="success") == 1
    assert value("lakewarden_processes_total", **table, action="expire-snapshots", status="success") == 1
    assert value("lakewarden_optimizing_seconds_total", **table, type="minor") > 0
    assert value("lakewarden_optimizing_files_in_total", **table) == 4
    assert value("lakewarden_optimizing_files_out_total", **table) == 1
    assert value("lakewarden_maintenance_snapshots_expired_total", action="expire-snapshots") >= 1
    assert value("lakewarden_group_threads", group="default") == 0  # the test's optimizers have left
    assert value("lakewarden_group_queued_tasks", group="default") == 0
    assert value("lakewarden_catalog_healthy", catalog="local") == 1
    route = "/api/v1/tables/{catalog}/{database}/{table}"
    assert value("lakewarden_http_request_duration_seconds_count", method="GET", route=route, status="200") >= 1
