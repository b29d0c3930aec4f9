"""Filtered pages of tables (`store.tables.list_tables`) among many: the name filter's trigram index (migration
0020: FTS5 on SQLite, pg_trgm on PostgreSQL), the status index, and the choice between a filter's index and a
walk by name. The thresholds are made small here, so each way is taken with a few hundred tables; every page
must equal the brute-force answer."""

from __future__ import annotations

import itertools
import random

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text, update

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.tables import TableIdentifier, TableStatus
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import tables as table_store
from lakewarden.store.models import TableRuntimeRow
from tests.test_scheduling import ctx_of

NAMESPACES = ["alpha", "beta_1", "beta_2", "Gamma", "zeta%"]


@pytest.fixture
def tables(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> list[tuple[TableIdentifier, int]]:
    """600 tables in two catalogs and five namespaces (names with `_`, `%` and capitals); a cluster of pending
    tables at the end of the name order, and a few optimizing ones spread out. Thresholds: FEW 20, WALK 50, MANY 60."""
    monkeypatch.setattr(table_store, "FEW", 20)
    monkeypatch.setattr(table_store, "WALK", 50)
    monkeypatch.setattr(table_store, "MANY", 60)
    ctx = ctx_of(client)
    made: list[tuple[TableIdentifier, int]] = []
    with ctx.db.write() as session:
        for catalog in ("c1", "c2"):
            catalog_store.create_catalog(session, CatalogSpec(catalog, "sql", {"uri": "sqlite:////x.db"}))
        for i, (catalog, namespace) in enumerate(itertools.product(("c1", "c2"), NAMESPACES)):
            for j in range(60):
                name = TableIdentifier(catalog, namespace, f"t{i:02d}_{j:03d}{'X' if j % 7 == 0 else ''}")
                made.append((name, table_store.add_table(session, name, "default", {}).runtime.table_id))
        pending = [table_id for name, table_id in made if name.catalog == "c2" and name.database == "zeta%"]
        failed = [table_id for _, table_id in random.Random(3).sample(made, 15)]
        session.execute(
            update(TableRuntimeRow)
            .where(TableRuntimeRow.table_id.in_(pending))
            .values(status_code=int(TableStatus.PENDING))
        )
        session.execute(
            update(TableRuntimeRow)
            .where(TableRuntimeRow.table_id.in_(failed))
            .values(status_code=int(TableStatus.MINOR_OPTIMIZING))
        )
    return made


def brute(client: TestClient, **filters: object) -> list[str]:
    with ctx_of(client).db.read() as session:
        every = table_store.list_tables(session)
    name = str(filters.get("name") or "").lower()
    status = filters.get("status")
    after = filters.get("after")
    assert after is None or isinstance(after, TableIdentifier)
    kept = [
        r
        for r in every
        if name in str(r.name).lower()
        and (status is None or r.runtime.status_code == int(status))  # type: ignore[call-overload]
        and (
            after is None
            or (r.name.catalog, r.name.database, r.name.table) > (after.catalog, after.database, after.table)
        )
    ]
    return [str(r.name) for r in kept]


def paged(client: TestClient, limit: int, **filters: object) -> list[str]:
    with ctx_of(client).db.read() as session:
        return [str(r.name) for r in table_store.list_tables(session, limit=limit, **filters)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "t03_017",  # one table: by the index
        "x",  # short: walked
        "_00",  # `_` is no wildcard; every namespace has them
        "beta_",  # 240 tables in the middle: more than MANY, clustered past WALK: walked to
        "zeta%",  # `%` literally; 60 tables at the end of each catalog
        "c2.zeta%.t09_0",  # 50 tables at the very end: more than FEW, at most MANY: by the index, sorted
        "gamma",  # any case
        "nothing-like-it",
    ],
)
@pytest.mark.parametrize("limit", [5, 100, 1000])
def test_a_name_filter_pages_as_brute_force_does(client: TestClient, tables: object, name: str, limit: int) -> None:
    expected = brute(client, name=name)
    assert paged(client, limit, name=name) == expected[:limit]
    if len(expected) > 3:  # the next page, by keyset and by offset
        after = TableIdentifier.parse(expected[2])
        assert paged(client, limit, name=name, after=after) == expected[3 : 3 + limit]
        with ctx_of(client).db.read() as session:
            skipped = table_store.list_tables(session, limit=limit, offset=3, name=name)
        assert [str(r.name) for r in skipped] == expected[3 : 3 + limit]


@pytest.mark.parametrize("status", [TableStatus.IDLE, TableStatus.PENDING, TableStatus.MINOR_OPTIMIZING])
@pytest.mark.parametrize("limit", [5, 100])
def test_a_status_filter_pages_as_brute_force_does(
    client: TestClient, tables: object, status: TableStatus, limit: int
) -> None:
    expected = brute(client, status=status)
    assert expected, status
    assert paged(client, limit, status=status) == expected[:limit]
    assert paged(client, limit, status=status, name="zeta") == brute(client, status=status, name="zeta")[:limit]
    assert paged(client, limit, status=status, offset=2) == expected[2 : 2 + limit]


@pytest.mark.parametrize("offset", [0, 1, 299, 599, 600, 650])
def test_an_offset_page_is_the_slice_of_every_table(client: TestClient, tables: object, offset: int) -> None:
    """An offset page skips tables by the name index alone, then reads the page's rows: the same slice."""
    expected = brute(client)
    assert paged(client, 100, offset=offset) == expected[offset : offset + 100]
    with ctx_of(client).db.read() as session:
        everything = [str(r.name) for r in table_store.list_tables(session, offset=offset)]
    assert everything == expected[offset:]


def test_the_name_index_follows_the_tables(client: TestClient, tables: list[tuple[TableIdentifier, int]]) -> None:
    """Added and disposed tables are found and forgotten by the index (SQLite: its triggers)."""
    ctx = ctx_of(client)
    with ctx.db.write() as session:
        table_store.add_table(session, TableIdentifier("c1", "alpha", "brand_new_one"), "default", {})
        gone = next(table_id for name, table_id in tables if name.table == "t03_017")
        table_store.dispose_table(session, gone)
    assert paged(client, 10, name="brand_new") == ["c1.alpha.brand_new_one"]
    assert paged(client, 10, name="t03_017") == []
    with ctx.db.read() as session:
        if session.get_bind().dialect.name == "sqlite":
            indexed = session.execute(text("SELECT count(*) FROM table_search")).scalar()
            assert indexed == len(tables), "table_search is not kept equal to table_identifier"
        else:
            found = session.execute(text(f"SELECT 1 FROM pg_indexes WHERE indexname = '{table_store.TRIGRAM_INDEX}'"))
            assert found.first() is not None, "no trigram index on PostgreSQL"
