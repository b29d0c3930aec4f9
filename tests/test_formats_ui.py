"""Hudi and Paimon tables in the CLI and the dashboard (Chromium), against a real server: listed with their format,
filtered by it, and shown with their own views; nothing of Iceberg's work is offered for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hudi_tables import HudiTable
from tests.paimon_tables import pk_table, rows, write_paimon
from tests.servers import ServerProcess, cli
from tests.test_dashboard import Page

pytestmark = pytest.mark.slow


def test_hudi_and_paimon_tables_in_the_cli_and_the_dashboard(
    server: ServerProcess, browser: Any, tmp_path: Path
) -> None:
    events = HudiTable(tmp_path / "hudi" / "sales" / "events", mor=True).create("events")
    events.commit({"eu": range(0, 5), "us": range(10, 12)})
    for n in range(5):
        events.commit({"eu": range(0, 2)}, tag=f"u{n}")
    steps: list[dict[str, Any]] = [pk_table("sales.orders")]
    steps += [{"write": "sales.orders", "rows": rows([i], "eu", f"w{i}")} for i in range(5)]
    write_paimon(tmp_path / "paimon", steps)
    api = server.api()
    for name, kind in (("hoodie", "hudi"), ("pond", "paimon")):
        body = {"name": name, "type": kind, "properties": {"warehouse": str(tmp_path / kind)}}
        assert api.post("/catalogs", json=body).status_code == 201
        # the server's explorer watches every catalog on its own and may have added the table first
        refreshed = api.post(f"/catalogs/{name}/refresh").json()
        assert refreshed["health"] == "healthy" and refreshed["tables"] == 1, refreshed
    for table in ("hoodie/sales/events", "pond/sales/orders"):
        assert api.post(f"/tables/{table}/evaluate").status_code == 200

    listed_cli = cli(server, "table", "list", "--format", "hudi").stdout
    assert "hoodie.sales.events" in listed_cli and "pond.sales.orders" not in listed_cli
    assert "is not a table format" in cli(server, "table", "list", "--format", "delta", ok=False).stderr
    shown = " ".join(cli(server, "table", "show", "hoodie.sales.events").stdout.split())
    assert "MERGE_ON_READ" in shown and "deltacommit" in shown and "completed" in shown
    assert "CALL run_compaction(op => 'scheduleAndExecute', table => 'sales.events')" in shown
    assert "recent optimizing" not in shown  # nothing of Iceberg's work is offered
    shown = " ".join(cli(server, "table", "show", "pond.sales.orders").stdout.split())
    assert "L0: 5" in shown and "CALL sys.compact(table => 'sales.orders')" in shown

    page = Page(browser, server)
    page.open("#/")
    page.sign_in(server.token)
    page.open("#/tables")
    page.css("#format-filter").send_keys("paimon")
    page.wait_text("#tables", "pond.sales.orders")
    assert "hoodie.sales.events" not in page.text("#tables")
    page.open("#/tables/hoodie/sales/events/hudi")
    page.wait_text("#hudi-needs", "run_compaction")
    assert "deltacommit" in page.text("#hudi-timeline")
    assert not page.css('.tabs a[data-tab="hudi"]').get_attribute("hidden")
    assert page.css('.tabs a[data-tab="snapshots"]').get_attribute("hidden")  # Iceberg's tabs are hidden
    page.screenshot("hudi-table")
    page.open("#/tables/pond/sales/orders/paimon")
    page.wait_text("#paimon-needs", "sys.compact")
    assert "L0: 5" in page.text("#paimon-buckets")
    page.screenshot("paimon-table")
