"""Listing a SQL (JDBC) catalog's tables in one read (`metadata.catalogs.table_locations`).

That read goes to the catalog's own `iceberg_tables` table through pyiceberg's ORM model, and leaves views out
with pyiceberg's private `SqlCatalog._iceberg_type_filter` (lakewarden/_compat/pyiceberg.py; Iceberg's Java and Rust
catalogs keep views in the same table). A pyiceberg upgrade that renames the helper must fail here, not list views as
tables."""

from __future__ import annotations

import re
from pathlib import Path

from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from sqlalchemy.orm import Session

from lakewarden._compat.pyiceberg import views_filter
from lakewarden.domain.catalogs import TableFilter
from lakewarden.metadata.catalogs import table_locations

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def test_a_sql_catalog_lists_its_tables_locations_and_not_its_views(tmp_path: Path) -> None:
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    catalog.create_namespace("scratch")
    events = catalog.create_table("db.events", SCHEMA)
    scratch = catalog.create_table("scratch.tmp", SCHEMA)
    assert views_filter(catalog) is not None, "pyiceberg's helper is gone: see above"
    with Session(catalog.engine) as session:  # a view, as Iceberg's Java JDBC catalog records it
        session.add(
            IcebergTables(
                catalog_name="c",
                table_namespace="db",
                table_name="recent",
                metadata_location=f"file://{tmp_path}/db/recent/metadata/00000-v.metadata.json",
                previous_metadata_location=None,
            )
        )
        session.flush()
        session.query(IcebergTables).filter_by(table_name="recent").update({"iceberg_type": "VIEW"})
        session.commit()

    everything = table_locations(catalog, TableFilter(None, None))
    assert everything == {
        ("db", "events"): events.metadata_location,
        ("scratch", "tmp"): scratch.metadata_location,
    }
    only_db = table_locations(catalog, TableFilter(re.compile("db"), None))
    assert only_db == {("db", "events"): events.metadata_location}
    # a commit moves the location the listing reports
    with events.transaction() as tx:
        tx.set_properties({"k": "v"})
    moved = table_locations(catalog, TableFilter(None, None))
    assert moved is not None
    assert moved[("db", "events")] == catalog.load_table("db.events").metadata_location


def test_a_catalog_that_cannot_list_locations_says_so() -> None:
    assert table_locations(object(), TableFilter(None, None)) is None
