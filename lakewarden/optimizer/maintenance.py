"""Running maintenance tasks on Spark with Iceberg's own actions, through the JVM.

Every action works on the table as it is when the task runs (the planner only decided that there
was work): snapshots are expired from a cutoff computed now, orphans are the files Iceberg finds
unreferenced now, and so on. Each returns what it did: files deleted, bytes freed, snapshots
expired, tags created.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakewarden.domain.maintenance import format_datetime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAX_LISTED = 100  # paths reported in a task's output


def run_maintenance(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    handlers = {
        "expire-snapshots": _expire_snapshots,
        "clean-orphan-files": _clean_orphan_files,
        "clean-dangling-delete-files": _clean_dangling_delete_files,
        "expire-data": _expire_data,
        "auto-create-tags": _auto_create_tag,
        "rewrite-manifests": _rewrite_manifests,
    }
    handler = handlers.get(work["action"])
    if handler is None:
        raise ValueError(f"this optimizer does not know the action {work['action']!r}")
    return handler(spark, table, name, work, properties)


def _actions(spark: SparkSession) -> Any:
    jvm: Any = spark._jvm
    return jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)


def _iterate(java_iterable: Any) -> Iterator[Any]:
    """Items of a Java Iterable (py4j turns Java collections into Python ones, but not every Iterable)."""
    if not hasattr(java_iterable, "iterator"):
        yield from java_iterable
        return
    iterator = java_iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _snapshot_ids(table: Any) -> set[int]:
    table.refresh()
    return {int(s.snapshotId()) for s in _iterate(table.snapshots())}


def _referenced_bytes(spark: SparkSession, name: str) -> int:
    """Bytes of the data and delete files any snapshot references (each file counted once)."""
    spark.sql(f"REFRESH TABLE {name}")
    row = spark.sql(
        f"SELECT COALESCE(SUM(file_size_in_bytes), 0) FROM (SELECT DISTINCT file_path, file_size_in_bytes "
        f"FROM {name}.all_files)"
    ).first()
    return int(row[0]) if row is not None else 0


# ---- snapshots


def _expire_snapshots(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    cutoff = _now_ms() - int(work["keep_duration_ms"])
    protected = []
    for snapshot_id in work.get("protected_snapshot_ids", []):
        snapshot = table.snapshot(int(snapshot_id))
        if snapshot is not None:  # keep it, and so everything newer: expiry removes what is older only
            cutoff = min(cutoff, int(snapshot.timestampMillis()))
            protected.append(int(snapshot_id))
    before = _snapshot_ids(table)
    bytes_before = _referenced_bytes(spark, name)
    result = _actions(spark).expireSnapshots(table).expireOlderThan(cutoff).retainLast(int(work["min_count"])).execute()
    expired = before - _snapshot_ids(table)
    counts = {
        "data_files_deleted": int(result.deletedDataFilesCount()),
        "delete_files_deleted": int(result.deletedPositionDeleteFilesCount())
        + int(result.deletedEqualityDeleteFilesCount()),
        "manifests_deleted": int(result.deletedManifestsCount()),
        "manifest_lists_deleted": int(result.deletedManifestListsCount()),
        "statistics_files_deleted": int(result.deletedStatisticsFilesCount()),
    }
    return {
        "snapshots_expired": len(expired),
        **counts,
        "files_deleted": sum(counts.values()),
        "bytes_freed": max(0, bytes_before - _referenced_bytes(spark, name)),
        "cutoff_ms": cutoff,
        "protected_snapshot_ids": protected,
    }


# ---- orphan files


def _clean_orphan_files(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    """Iceberg's DeleteOrphanFiles action finds the files under the table location that no metadata
    references and that are older than the table's min-existing-time (whatever its value: the action
    API takes any interval, unlike the remove_orphan_files procedure, which refuses less than 24 hours).
    It is given a deleter that only collects, so Iceberg deletes nothing itself; each file it names is
    then checked here — under the table location, still there, and old enough by its own modification
    time — and deleted unless this is a dry run. No other process runs on the table meanwhile (the
    server holds this task back until they end)."""
    jvm: Any = spark._jvm
    older_than = _now_ms() - int(work["min_existing_ms"])
    # a java.util.function.Consumer<String> that keeps what it is given: Iceberg's own deletion never runs
    collector = jvm.java.util.stream.Stream.builder()
    result = _actions(spark).deleteOrphanFiles(table).olderThan(older_than).deleteWith(collector).execute()
    conf = spark._jsc.hadoopConfiguration()
    root = jvm.org.apache.hadoop.fs.Path(table.location())
    fs = root.getFileSystem(conf)
    prefix = str(fs.makeQualified(root).toString()).rstrip("/") + "/"
    found: list[tuple[str, int]] = []
    outside = young = 0
    for location in _iterate(result.orphanFileLocations()):
        path = jvm.org.apache.hadoop.fs.Path(str(location))
        qualified = str(fs.makeQualified(path).toString())
        if not qualified.startswith(prefix) or "/../" in qualified:  # never outside the table's location
            outside += 1
            continue
        if not fs.exists(path):
            continue
        status = fs.getFileStatus(path)
        if not status.isFile() or int(status.getModificationTime()) >= older_than:
            young += 1  # written (or rewritten) since Iceberg listed it
            continue
        found.append((qualified, int(status.getLen())))
    dry_run = bool(work.get("dry_run"))
    deleted = 0 if dry_run else sum(1 for path, _ in found if fs.delete(jvm.org.apache.hadoop.fs.Path(path), False))
    size = sum(s for _, s in found)
    return {
        "dry_run": dry_run,
        "orphan_files_found": len(found),
        "orphan_bytes_found": size,
        "files_deleted": deleted,
        "bytes_freed": 0 if dry_run else size,
        "skipped_outside_location": outside,
        "skipped_too_young": young,
        "files": [path for path, _ in found[:MAX_LISTED]],
    }


# ---- dangling delete files


def _clean_dangling_delete_files(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    result = _actions(spark).removeDanglingDeleteFiles(table).execute()
    removed = list(_iterate(result.removedDeleteFiles()))
    return {
        "delete_files_removed": len(removed),
        "bytes_freed": sum(int(f.fileSizeInBytes()) for f in removed),
        "files": [str(f.location()) for f in removed[:MAX_LISTED]],
    }


# ---- data expiration


def _literal(work: dict[str, Any], cutoff_ms: int) -> str:
    """The cutoff as a Spark SQL literal of the expiration field's type (the session is in UTC)."""
    moment = datetime.fromtimestamp(cutoff_ms / 1000, UTC)
    kind = work["field_type"]
    if kind in ("timestamptz", "timestamptz_ns"):
        return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S.%f}'"
    if kind in ("timestamp", "timestamp_ns"):
        return f"TIMESTAMP_NTZ '{moment:%Y-%m-%d %H:%M:%S.%f}'"
    if kind == "date":
        return f"DATE '{moment:%Y-%m-%d}'"
    if kind in ("long", "int"):
        return str(cutoff_ms if work["number_format"] == "TIMESTAMP_MS" else cutoff_ms // 1000)
    text = format_datetime(work["string_pattern"], moment, "data-expire.datetime-string-pattern")
    return "'" + text.replace("'", "''") + "'"


def _expire_data(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    """Delete whole data files (level `file`) or whole partitions (level `partition`) whose largest
    value of the field lies before the cutoff, judged by the files' column metrics; a file without
    metrics for the field is kept. Nothing is rewritten."""
    table.refresh()
    current = table.currentSnapshot()
    if current is None:
        return {"data_files_deleted": 0, "records_deleted": 0, "bytes_freed": 0}
    base = int(current.timestampMillis()) if work["base_on_rule"] == "LAST_COMMIT_TIME" else _now_ms()
    cutoff = base - int(work["retention_ms"])
    literal = _literal(work, cutoff)
    field = "`" + work["field"].replace("`", "``") + "`"
    spark.sql(f"REFRESH TABLE {name}")
    partitioned = any(not spec.isUnpartitioned() for spec in _iterate(table.specs().values()))
    key = "to_json(partition)" if partitioned else "''"
    files = (f"SELECT file_path, file_size_in_bytes, record_count, {key} AS p, "
             f"readable_metrics.{field}.upper_bound AS ub FROM {name}.files WHERE content = 0")  # fmt: skip
    if work["level"] == "file":
        query = f"SELECT file_path, file_size_in_bytes, record_count FROM ({files}) WHERE ub < {literal}"
    else:
        query = (f"WITH f AS ({files}) SELECT file_path, file_size_in_bytes, record_count FROM f WHERE p IN "
                 f"(SELECT p FROM f GROUP BY p HAVING count(ub) = count(*) AND max(ub) < {literal})")  # fmt: skip
    expired = spark.sql(query).collect()
    if expired:
        jvm: Any = spark._jvm
        delete = table.newDelete()
        for row in expired:
            # a CharSequence that is not a String: py4j would otherwise pick the producer's own
            # deleteFile(String), which removes the file from storage and not from the table
            delete.deleteFile(jvm.java.lang.StringBuilder(row[0]))
        for key_, value in properties.items():
            delete.set(key_, value)
        delete.commit()
    return {
        "data_files_deleted": len(expired),
        "records_deleted": sum(int(r[2]) for r in expired),
        "bytes_freed": sum(int(r[1]) for r in expired),
        "cutoff_ms": cutoff,
    }


# ---- tags


def _auto_create_tag(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    table.refresh()
    tag = work["tag"]
    if table.refs().containsKey(tag):  # made meanwhile (or by an earlier attempt of this task)
        return {"tags_created": 0, "tags": [tag]}
    manage = table.manageSnapshots().createTag(tag, int(work["snapshot_id"]))
    if int(work.get("max_age_ms", -1)) > 0:
        manage = manage.setMaxRefAgeMs(tag, int(work["max_age_ms"]))
    manage.commit()
    return {"tags_created": 1, "tags": [tag], "snapshot_id": int(work["snapshot_id"])}


# ---- manifests


def _rewrite_manifests(
    spark: SparkSession, table: Any, name: str, work: dict[str, Any], properties: dict[str, str]
) -> dict[str, Any]:
    rewrite = _actions(spark).rewriteManifests(table)
    for key, value in properties.items():
        rewrite = rewrite.snapshotProperty(key, value)
    result = rewrite.execute()
    return {
        "manifests_rewritten": sum(1 for _ in _iterate(result.rewrittenManifests())),
        "manifests_added": sum(1 for _ in _iterate(result.addedManifests())),
    }
