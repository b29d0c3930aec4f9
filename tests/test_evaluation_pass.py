"""The evaluator's pass: the tables that changed go first, and a table committed while a long pass runs is evaluated
within it, not after it. Real tables in a SQL catalog, written by pyiceberg; the evaluator is the server's, with
its verdict for one table made to wait on the test (the pass's scheduling is what is under test, not the verdict)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakewarden.api.context import ServerContext
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.metadata.catalogs import open_catalog
from lakewarden.services.tables import evaluation as evaluation_module
from lakewarden.services.tables.evaluation import ReadTrigger, TableEvaluator
from lakewarden.store.tables import TableRecord
from tests.helpers import wait_for
from tests.test_explorer import refresh, register

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
TWO_FILES = {"self-optimizing.minor.trigger.file-count": "2"}


def ctx(client: TestClient) -> ServerContext:
    return client.app.state.context  # type: ignore[attr-defined, no-any-return]


def append(catalog: Any, name: str, value: int) -> None:
    catalog.load_table(("db", name)).append(pa.table({"id": pa.array([value], pa.int64())}))


def evaluation(client: TestClient, c: str, name: str) -> dict[str, Any]:
    found = client.get(f"/api/v1/tables/{c}/db/{name}").json()
    return {"snapshot": found["current_snapshot_id"], **(found["evaluation"] or {})}


class Watched(TableEvaluator):
    """The server's evaluator, recording the order of its verdicts and holding the one for `held` until released."""

    def __init__(self, held: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held = held
        self.order: list[str] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def _verdict(self, catalog: Any, rec: TableRecord, trigger: ReadTrigger | None = None) -> dict[str, Any]:
        self.order.append(rec.identifier.table_name)
        if rec.identifier.table_name == self.held:
            self.entered.set()
            assert self.release.wait(60), "the test never released the held verdict"
        return super()._verdict(catalog, rec, trigger)


def watched(client: TestClient, threads: int, held: str | None = None, recheck: float | None = None) -> Watched:
    server = ctx(client).evaluator
    return Watched(
        held,
        db=server.db,
        interval_seconds=60,
        thread_count=threads,
        recheck_seconds=recheck,
        internal=server.internal,
        cache=server.cache,
    )


def make_tables(client: TestClient, spec: CatalogSpec, names: dict[str, dict[str, str]]) -> Any:
    register(client, spec)
    catalog = open_catalog(spec)
    catalog.create_namespace("db")
    for name, properties in names.items():
        catalog.create_table(("db", name), SCHEMA, properties=properties)
        append(catalog, name, 1)
    refresh(client, spec.name)
    return catalog


def test_changed_tables_go_before_rechecks_and_optimized_before_shown(
    client: TestClient, sql_catalog: CatalogSpec
) -> None:
    c = sql_catalog.name
    off = {**TWO_FILES, "self-optimizing.enabled": "false"}
    catalog = make_tables(client, sql_catalog, {"rechecked": TWO_FILES, "shown": off, "changed": TWO_FILES})
    first = watched(client, threads=1, recheck=0.001)  # every table due again at once, by time alone
    first.run_once()
    assert sorted(first.order) == ["changed", "rechecked", "shown"]

    # `rechecked` is due for its recheck only, and has waited longest; the other two have new snapshots
    time.sleep(0.05)
    append(catalog, "shown", 2)
    append(catalog, "changed", 2)
    refresh(client, c)
    second = watched(client, threads=1)
    second.run_once()
    assert second.order == ["changed", "shown", "rechecked"]
    assert evaluation(client, c, "changed")["type"] == "minor"


@contextmanager
def big_held(client: TestClient, spec: CatalogSpec) -> Iterator[tuple[Any, Watched, threading.Thread]]:
    """Tables `big` and `hot` of one file each, evaluated (idle); then `big` given a second file and a pass started
    that holds `big`'s verdict until the block ends. Yields the catalog, that pass's evaluator and its thread."""
    catalog = make_tables(client, spec, {"big": TWO_FILES, "hot": TWO_FILES})
    watched(client, threads=2).run_once()
    assert evaluation(client, spec.name, "hot")["type"] is None  # one file: idle
    append(catalog, "big", 2)
    refresh(client, spec.name)
    evaluator = watched(client, threads=2, held="big")
    passing = threading.Thread(target=evaluator.run_once)
    passing.start()
    try:
        assert evaluator.entered.wait(30), "the pass never reached the held table"
        yield catalog, evaluator, passing
    finally:
        evaluator.release.set()
        passing.join(60)


def test_a_table_committed_during_a_long_pass_is_evaluated_within_it(
    client: TestClient, sql_catalog: CatalogSpec
) -> None:
    c = sql_catalog.name
    with big_held(client, sql_catalog) as (catalog, evaluator, passing):
        append(catalog, "hot", 2)  # while `big`'s verdict is still being made
        refresh(client, c)
        evaluator.wake()  # as the change feed wakes it after a commit
        hot = wait_for(
            "hot evaluated within the pass",
            lambda: (e := evaluation(client, c, "hot")).get("snapshot_id") == e["snapshot"] and e,
            timeout=30,
        )
        assert hot["type"] == "minor" and client.get(f"/api/v1/tables/{c}/db/hot").json()["status"] == "pending"
        assert passing.is_alive() and not evaluator.release.is_set()  # `big` still held: it did not wait for it
    assert evaluation(client, c, "big")["type"] == "minor"
    assert evaluator.order == ["big", "hot"]


def test_a_table_changed_while_its_verdict_is_made_stays_due(client: TestClient, sql_catalog: CatalogSpec) -> None:
    c = sql_catalog.name
    catalog = make_tables(client, sql_catalog, {"moving": {**TWO_FILES, "self-optimizing.enabled": "false"}})
    append(catalog, "moving", 2)  # two files: a minor optimizing once it is turned on
    refresh(client, c)
    evaluator = watched(client, threads=1, held="moving", recheck=600)
    passing = threading.Thread(target=evaluator.run_once)
    passing.start()
    try:
        assert evaluator.entered.wait(30), "the pass never reached the held table"
        with catalog.load_table(("db", "moving")).transaction() as tx:  # turned on while its verdict is made
            tx.set_properties({"self-optimizing.enabled": "true"})
        refresh(client, c)
    finally:
        evaluator.release.set()
        passing.join(60)
    assert evaluation(client, c, "moving")["type"] is None  # the verdict on the table as the pass read it
    # that verdict did not push back the moment the change set: the next pass takes the table, not the recheck
    again = watched(client, threads=1, recheck=600)
    again.run_once()
    assert again.order == ["moving"] and evaluation(client, c, "moving")["type"] == "minor"


def test_a_wake_during_a_long_verdict_is_taken_in_at_once(
    client: TestClient, sql_catalog: CatalogSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass looks for changed tables at most every LOOK_SECONDS; a wake coming later than that after its last
    look is looked at when it comes, not when the verdict being made ends or the wait for it times out."""
    monkeypatch.setattr(evaluation_module, "LOOK_SECONDS", 2.0)
    c = sql_catalog.name
    with big_held(client, sql_catalog) as (catalog, evaluator, passing):
        time.sleep(2.2)  # past the pace of the looks: the pass's wait for `big` runs on
        append(catalog, "hot", 2)
        refresh(client, c)
        woken = time.monotonic()
        evaluator.wake()
        wait_for(
            "hot evaluated",
            lambda: (e := evaluation(client, c, "hot")).get("snapshot_id") == e["snapshot"] and e,
            timeout=30,
        )
        # within a few verdicts' time; waiting for the next look would take until 4 s after the pass began
        assert time.monotonic() - woken < 1.2
        assert passing.is_alive() and not evaluator.release.is_set()
    assert evaluator.order == ["big", "hot"]
