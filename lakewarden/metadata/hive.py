"""Iceberg tables in a Hive Metastore, as lakewarden reads them: through pyiceberg's HiveCatalog, one thrift
connection per thread, and every table's metadata location read a batch of tables at a time.

A HiveCatalog holds a single thrift transport that each call opens and closes; the explorer and the evaluator
load tables from several threads at once, so each thread gets a catalog of its own. Commits never go through
here: the optimizers commit with Iceberg's own HiveCatalog in Spark (its metastore locks included).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from pyiceberg.catalog.hive import HiveCatalog

from lakewarden._compat.pyiceberg import hive_client

# how many tables' objects one `get_table_objects_by_name` call asks for: small enough for the metastore to
# answer quickly, large enough that a database of thousands of tables takes a few calls
BATCH = 200
ICEBERG = "iceberg"


class HiveTables:
    """A metastore's Iceberg tables, safe to read from several threads; other catalog calls go to this thread's
    HiveCatalog."""

    def __init__(self, name: str, properties: dict[str, str]) -> None:
        self.name = name
        self.properties = properties
        self._local = threading.local()
        self._opened: list[HiveCatalog] = []
        self._guard = threading.Lock()

    def catalog(self) -> HiveCatalog:
        """This thread's HiveCatalog."""
        catalog: HiveCatalog | None = getattr(self._local, "catalog", None)
        if catalog is None:
            catalog = HiveCatalog(self.name, **self.properties)
            self._local.catalog = catalog
            with self._guard:
                self._opened.append(catalog)
        return catalog

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.catalog(), attribute)

    def table_locations(self) -> list[tuple[str, str, str]]:
        """(database, table, metadata location) of every Iceberg table of the metastore: a listing of databases
        and of each database's table names, then the tables' objects a batch at a time."""
        return list(self._locations())

    def _locations(self) -> Iterator[tuple[str, str, str]]:
        with hive_client(self.catalog()) as client:
            for database in client.get_all_databases():
                names = client.get_all_tables(db_name=database)
                for start in range(0, len(names), BATCH):
                    for table in client.get_table_objects_by_name(
                        dbname=database, tbl_names=names[start : start + BATCH]
                    ):
                        parameters = table.parameters or {}
                        if parameters.get("table_type", "").lower() != ICEBERG:
                            continue  # a Hive table, a view, another format's table
                        location = parameters.get("metadata_location")
                        if location:
                            yield database, table.tableName, location

    def close(self) -> None:
        """Nothing stays open between calls (each opens and closes its transport); forget the catalogs."""
        with self._guard:
            self._opened.clear()
        self._local = threading.local()
