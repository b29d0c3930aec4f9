"""Running one of Paimon's table services on a Paimon table, with Paimon's own code: its Spark procedures
(`sys.compact`, `sys.expire_partitions`, `sys.expire_snapshots`), through a Paimon catalog over the table's
warehouse, in a session that carries Paimon's engine (`lakewarden optimizer --engine paimon`).

Compaction follows the table's own options (Paimon's planner picks the sorted runs or small files), and its commit
expires snapshots as a dedicated compaction job's does. The expiry procedures take the table's retention as
arguments. What the task did is read off the table's snapshots before and after."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lakewarden.domain.durations import parse_duration
from lakewarden.domain.paimon import RETAINED_MAX, RETAINED_MIN, TIME_RETAINED
from lakewarden.protocol.inputs import PaimonServiceInput
from lakewarden.protocol.results import PaimonServiceResult
from lakewarden.spark.sql import identifier, string_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PAIMON_CATALOG = "org.apache.paimon.spark.SparkCatalog"


def catalog_name(spark: SparkSession, warehouse: str) -> str:
    """The session's Paimon catalog over `warehouse`, registered on first use under a name of its own (a catalog's
    warehouse is fixed once Spark has loaded it)."""
    name = "lakewarden_paimon_" + hashlib.sha256(warehouse.encode()).hexdigest()[:12]
    if spark.conf.get(f"spark.sql.catalog.{name}", None) is None:
        spark.conf.set(f"spark.sql.catalog.{name}.warehouse", warehouse)
        spark.conf.set(f"spark.sql.catalog.{name}", PAIMON_CATALOG)
    return name


def run_paimon_service(spark: SparkSession, work: PaimonServiceInput) -> PaimonServiceResult:
    catalog = catalog_name(spark, work.warehouse)
    before = snapshots(spark, catalog, work.table)
    expired_partitions = expired_snapshots = 0
    rows = spark.sql(_statement(catalog, work)).collect()
    if work.service == "expire-partitions":
        expired_partitions = sum(
            len(str(r[0]).split(",")) for r in rows if r[0] not in (None, "No expired partitions.")
        )
    after = snapshots(spark, catalog, work.table)
    if work.service == "expire-snapshots":
        expired_snapshots = len(set(before) - set(after))
    committed = sorted(set(after) - set(before))
    ran = bool(committed or expired_snapshots or expired_partitions)
    return PaimonServiceResult(
        service=work.service,
        snapshots=committed,
        services_run=1 if ran else 0,
        snapshots_expired=expired_snapshots,
        partitions_expired=expired_partitions,
        idle_services=[] if ran else [work.service],
        timeline_tail=str(max(before)) if before else "",  # what the service saw, as for Hudi
    )


def _statement(catalog: str, work: PaimonServiceInput) -> str:
    table = string_literal(work.table)
    match work.service:
        case "compaction":
            return f"CALL {catalog}.sys.compact(table => {table})"
        case "expire-partitions":
            args = [
                f"table => {table}",
                f"expiration_time => {string_literal(work.options['partition.expiration-time'])}",
            ]
            for key, arg in (
                ("partition.timestamp-formatter", "timestamp_formatter"),
                ("partition.timestamp-pattern", "timestamp_pattern"),
            ):
                if work.options.get(key):
                    args.append(f"{arg} => {string_literal(work.options[key])}")
            return f"CALL {catalog}.sys.expire_partitions({', '.join(args)})"
        case "expire-snapshots":
            return f"CALL {catalog}.sys.expire_snapshots({_retention(table, work.options)})"
    raise ValueError(f"not a service lakewarden runs with a procedure: {work.service}")


def _retention(table: str, options: Mapping[str, str]) -> str:
    """The expiry's arguments from the table's retention options, with Paimon's defaults: the procedure's own
    defaults keep every snapshot."""
    keep_min = options.get(RETAINED_MIN[0]) or str(RETAINED_MIN[1])
    args = [f"table => {table}", f"retain_min => {int(keep_min)}"]
    if options.get(RETAINED_MAX):
        args.append(f"retain_max => {int(options[RETAINED_MAX])}")
    retained = parse_duration(options[TIME_RETAINED[0]]) if options.get(TIME_RETAINED[0]) else TIME_RETAINED[1]
    # a timestamp in the session's time zone (UTC: spark/session.py)
    older_than = (datetime.now(UTC) - retained).strftime("%Y-%m-%d %H:%M:%S")
    args.append(f"older_than => TIMESTAMP '{older_than}'")
    return ", ".join(args)


def snapshots(spark: SparkSession, catalog: str, table: str) -> list[int]:
    """The table's snapshot ids now, from Paimon's `$snapshots` system table."""
    database, name = table.split(".", 1)
    system_table = f"{catalog}.{identifier(database)}.{identifier(name + '$snapshots')}"
    found = spark.sql(f"SELECT snapshot_id FROM {system_table}").collect()
    return sorted(int(r[0]) for r in found)
