"""Iceberg tables in AWS Glue, through pyiceberg's GlueCatalog, with every table's metadata location read a page
of tables at a time (`GetTables` returns each table's parameters, where Iceberg keeps `metadata_location`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyiceberg.catalog.glue import GlueCatalog

ICEBERG = "iceberg"
MAX_RETRIES = "glue.max-retries"


class GlueTables(GlueCatalog):
    """pyiceberg's GlueCatalog (its commits check Glue's table version: a concurrent commit fails, never lost),
    and the listing of every table's metadata location the explorer watches with."""

    def __init__(self, name: str, **properties: str) -> None:
        # pyiceberg hands `glue.max-retries` to botocore as it finds it, and botocore wants a number: a registered
        # catalog's properties are strings (without a number, a Glue that is down takes 10 attempts to say so)
        settings: dict[str, Any] = dict(properties)
        if MAX_RETRIES in settings:
            settings[MAX_RETRIES] = int(settings[MAX_RETRIES])
        super().__init__(name, **settings)

    def table_locations(self) -> list[tuple[str, str, str]]:
        """(database, table, metadata location) of every Iceberg table: pages of databases, then of each
        database's tables."""
        return list(self._locations())

    def _locations(self) -> Iterator[tuple[str, str, str]]:
        for page in self.glue.get_paginator("get_databases").paginate():
            for database in page["DatabaseList"]:
                tables = self.glue.get_paginator("get_tables").paginate(DatabaseName=database["Name"])
                for table_page in tables:
                    for table in table_page["TableList"]:
                        parameters = table.get("Parameters") or {}
                        if parameters.get("table_type", "").lower() != ICEBERG:
                            continue
                        location = parameters.get("metadata_location")
                        if location:
                            yield database["Name"], table["Name"], location
