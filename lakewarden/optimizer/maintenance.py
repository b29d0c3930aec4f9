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
from lakewarden.domain.retention import LONG_MAX, Kept, Need, Policy, flink_jobs, latest_external_commit, plan_expiry
from lakewarden.optimizer.history import table_history
from lakewarden.protocol.inputs import (
    AutoCreateTagsInput,
    CleanDanglingDeleteFilesInput,
    CleanOrphanFilesInput,
    ExpireDataInput,
    ExpireSnapshotsInput,
    RewriteManifestsInput,
    TaskInput,
)
from lakewarden.protocol.results import (
    MAX_LISTED,
    AutoCreateTagsResult,
    CleanDanglingDeleteFilesResult,
    CleanOrphanFilesResult,
    ExpireDataResult,
    ExpireSnapshotsResult,
    KeptSnapshot,
    RewriteManifestsResult,
    TaskResult,
)
from lakewarden.spark.classes import java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_maintenance(
    spark: SparkSession, table: Any, name: str, work: TaskInput, properties: dict[str, str]
) -> TaskResult:
    """Run a maintenance task on the table (`name` is catalog.database.table); returns its result."""
    match work:
        case ExpireSnapshotsInput():
            return _expire_snapshots(spark, table, name, work)
        case CleanOrphanFilesInput():
            return _clean_orphan_files(spark, table, work)
        case CleanDanglingDeleteFilesInput():
            return _clean_dangling_delete_files(spark, table)
        case ExpireDataInput():
            return _expire_data(spark, table, name, work, properties)
        case AutoCreateTagsInput():
            return _auto_create_tag(table, work)
        case RewriteManifestsInput():
            return _rewrite_manifests(spark, table, properties)
    raise ValueError(f"{work.action!r} is not a maintenance action")


def _actions(spark: SparkSession) -> Any:
    jvm: Any = spark._jvm
    return java_class(jvm, "org.apache.iceberg.spark.actions.SparkActions").get(spark._jsparkSession)


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


# ---- snapshots


def _expire_snapshots(spark: SparkSession, table: Any, name: str, work: ExpireSnapshotsInput) -> ExpireSnapshotsResult:
    """The plan (domain/retention.py: Iceberg's rules, the snapshots writers need) decides the cutoff; Iceberg's
    own expiry is asked first what it would remove at that cutoff (`apply`, which commits nothing), and runs
    only if that spares every snapshot a writer needs. Iceberg expires the snapshots and names the files no
    snapshot left references (expireFiles commits the expiry and deletes nothing); each is deleted here only if
    it lies under the table's location, so a file another table shares, or a crafted path, is never touched."""
    table.refresh()
    now = _now_ms()
    snapshots, refs = table_history(table)
    policy = Policy(
        keep_ms=work.keep_duration_ms,
        min_count=work.min_count,
        max_ref_age_ms=int(table.properties().getOrDefault("history.expire.max-ref-age-ms", str(LONG_MAX))),
        flink_retention_ms=work.flink_retention_ms,
        wap_retention_ms=work.wap_retention_ms,
        yield_window_ms=work.yield_window_ms,
    )
    bases = dict.fromkeys(work.protected_snapshot_ids, "a running self-optimizing process")
    plan = plan_expiry(snapshots, refs, policy, now, bases)
    kept = [_kept(k) for k in plan.needed]
    protected = [k.snapshot_id for k in plan.needed if k.need is Need.OPTIMIZING_BASE]
    retain_last = max(work.min_count, 1)
    blocked = plan.blocked
    if not blocked:  # Iceberg decides what goes: whatever the plan said, no snapshot a writer needs may be among it
        doomed = table.expireSnapshots().expireOlderThan(plan.cutoff_ms).retainLast(retain_last).apply()
        gone = {int(s.snapshotId()) for s in _iterate(doomed)}
        blocked = [k for k in plan.needed if k.snapshot_id in gone]
    if blocked:
        return ExpireSnapshotsResult(
            cutoff_ms=plan.cutoff_ms, protected_snapshot_ids=protected, kept=kept, blocked=[_kept(k) for k in blocked]
        )
    before = _snapshot_ids(table)
    refs_before = set(table.refs().keySet())
    action = _actions(spark).expireSnapshots(table).expireOlderThan(plan.cutoff_ms).retainLast(retain_last)
    unreferenced = [(str(f.getPath()), str(f.getType())) for f in _iterate(action.expireFiles().collectAsList())]
    expired = before - _snapshot_ids(table)
    files = _TableFiles(spark, table)
    counts = dict.fromkeys(_EXPIRED_KINDS.values(), 0)
    for path, kind in unreferenced:
        if files.under(path) is not None and kind.upper() in _EXPIRED_KINDS:
            counts[_EXPIRED_KINDS[kind.upper()]] += 1
    deleted, freed, outside = files.delete([path for path, _ in unreferenced])
    return ExpireSnapshotsResult(
        snapshots_expired=len(expired),
        **counts,
        files_deleted=deleted,
        bytes_freed=freed,
        skipped_outside_location=outside,
        cutoff_ms=plan.cutoff_ms,
        protected_snapshot_ids=protected,
        kept=kept,
        refs_expired=sorted(refs_before - set(table.refs().keySet())),
    )


def _kept(kept: Kept) -> KeptSnapshot:
    return KeptSnapshot(snapshot_id=kept.snapshot_id, need=kept.need.value, detail=kept.detail)


# the kinds of FileInfo that Iceberg's expireFiles names (BaseSparkAction), by what the result counts
_EXPIRED_KINDS = {
    "DATA": "data_files_deleted",
    "POSITION_DELETES": "delete_files_deleted",
    "EQUALITY_DELETES": "delete_files_deleted",
    "MANIFEST": "manifests_deleted",
    "MANIFEST LIST": "manifest_lists_deleted",
    "STATISTICS FILES": "statistics_files_deleted",
}


_SAME_OBJECT = ("s3a://", "s3n://")  # name the object `s3://` names (as Iceberg's equal schemes say)


def same_scheme(location: str) -> str:
    """`location` with `s3a://` and `s3n://` written `s3://`: one object, one name."""
    for scheme in _SAME_OBJECT:
        if location.lower().startswith(scheme):
            return "s3://" + location[len(scheme) :]
    return location


class _TableFiles:
    """One table's files through the table's own FileIO (its storage and credentials: a local disk, HDFS or S3),
    confined to the table's location: a file is touched only if it lies under the location as whole path segments
    (the table at `…/t1` never reaches into `…/t10`), on the same scheme, with no `..` in its path."""

    def __init__(self, spark: SparkSession, table: Any) -> None:
        jvm: Any = spark._jvm
        self.jvm = jvm
        self.io = table.io()
        self.location = str(table.location())
        self._conf = spark._jsc.hadoopConfiguration()
        self.prefix = self.qualified_name(self.location).rstrip("/") + "/"
        self._listing: dict[str, tuple[int, int]] | None = None

    def qualified_name(self, path: str) -> str:
        """The path as this table's files are compared: an object store's as it is (`s3a://` as `s3://`), a file
        system's fully qualified by Hadoop (`/x` as `file:/x`)."""
        if "://" in path and not path.lower().startswith(("file:", "hdfs:")):
            return same_scheme(path)
        hadoop_path = java_class(self.jvm, "org.apache.hadoop.fs.Path")(path)
        return str(hadoop_path.getFileSystem(self._conf).makeQualified(hadoop_path).toString())

    def under(self, path: str) -> str | None:
        """The path's qualified name if it lies under the table's location; else None."""
        qualified = self.qualified_name(path)
        return qualified if qualified.startswith(self.prefix) and "/../" not in qualified else None

    def listing(self) -> dict[str, tuple[int, int]]:
        """Every file under the table's location, paged through by the FileIO (any number of them): qualified
        name -> (size, modified at, ms)."""
        if self._listing is None:
            found: dict[str, tuple[int, int]] = {}
            for info in _iterate(self.io.listPrefix(self.location)):
                name = self.under(str(info.location()))
                if name is not None:
                    found[name] = (int(info.size()), int(info.createdAtMillis()))
            self._listing = found
        return self._listing

    def delete(self, paths: list[str]) -> tuple[int, int, int]:
        """Delete the files that lie under the table's location, in bulk through the FileIO: how many it deleted,
        the bytes they held, and how many lay outside and were left alone. A file already gone counts as
        deleted with no bytes."""
        inside: list[str] = []
        outside = freed = 0
        listing = self.listing()
        for path in paths:
            name = self.under(path)
            if name is None:
                outside += 1
                continue
            inside.append(path)
            freed += listing.get(name, (0, 0))[0]
        if not inside:
            return 0, 0, outside
        bulk = java_class(self.jvm, "org.apache.iceberg.io.SupportsBulkOperations")
        if bulk._java_lang_class.isInstance(self.io):
            self.io.deleteFiles(java_class(self.jvm, "java.util.ArrayList")(inside))  # many at once, retried
        else:
            for path in inside:
                self.io.deleteFile(path)
        for path in inside:
            listing.pop(self.qualified_name(path), None)
        return len(inside), freed, outside


# ---- orphan files


def _clean_orphan_files(spark: SparkSession, table: Any, work: CleanOrphanFilesInput) -> CleanOrphanFilesResult:
    """The table's files are listed through its own FileIO (paged, any number of them) and handed to Iceberg's
    DeleteOrphanFiles action, which names those no metadata references and that are older than the table's
    min-existing-time (whatever its value: the action API takes any interval, unlike the remove_orphan_files
    procedure, which refuses less than 24 hours). It is given a deleter that only collects, so Iceberg deletes
    nothing itself; each file it names is checked here (under the table location, listed, old enough by its own
    modification time) and deleted unless this is a dry run. No other process runs on the table meanwhile (the
    server holds this task back until they end)."""
    jvm: Any = spark._jvm
    older_than = _now_ms() - work.min_existing_ms
    files = _TableFiles(spark, table)
    listing = files.listing()
    listed = spark.createDataFrame(
        [(name, datetime.fromtimestamp(modified / 1000, UTC)) for name, (_, modified) in listing.items()],
        "file_path STRING, last_modified TIMESTAMP",
    )
    # a java.util.function.Consumer<String> that keeps what it is given: Iceberg's own deletion never runs
    collector = java_class(jvm, "java.util.stream.Stream").builder()
    # the listing's names are qualified (`file:/…`), where a table's location may not be: the action keeps the
    # listed files under its location, given here in the listing's own form
    action = _actions(spark).deleteOrphanFiles(table).compareToFileList(listed._jdf).location(files.prefix)
    result = action.olderThan(older_than).deleteWith(collector).execute()
    found: list[tuple[str, int]] = []
    outside = young = flink = 0
    jobs = flink_jobs(table_history(table)[0])
    for location in _iterate(result.orphanFileLocations()):
        name = files.under(str(location))
        if name is None:  # never outside the table's location
            outside += 1
            continue
        size, modified = listing.get(name, (-1, 0))
        if size < 0:
            continue
        if modified >= older_than:
            young += 1  # written (or rewritten) since it was listed
            continue
        if name.rsplit("/", 1)[-1].startswith(jobs):
            flink += 1  # a Flink job's manifest of a checkpoint it has not committed yet
            continue
        found.append((str(location), size))
    deleted = 0 if work.dry_run else files.delete([path for path, _ in found])[0]
    size = sum(s for _, s in found)
    return CleanOrphanFilesResult(
        dry_run=work.dry_run,
        orphan_files_found=len(found),
        orphan_bytes_found=size,
        files_deleted=deleted,
        bytes_freed=0 if work.dry_run else size,
        skipped_outside_location=outside,
        skipped_too_young=young,
        skipped_flink_manifests=flink,
        files=[path for path, _ in found[:MAX_LISTED]],
    )


# ---- dangling delete files


def _clean_dangling_delete_files(spark: SparkSession, table: Any) -> CleanDanglingDeleteFilesResult:
    result = _actions(spark).removeDanglingDeleteFiles(table).execute()
    removed = list(_iterate(result.removedDeleteFiles()))
    return CleanDanglingDeleteFilesResult(
        delete_files_removed=len(removed),
        # a deletion vector's own bytes, not its Puffin file's (which other vectors may share)
        bytes_freed=sum(int(f.contentSizeInBytes() or f.fileSizeInBytes()) for f in removed),
        files=[str(f.location()) for f in removed[:MAX_LISTED]],
    )


# ---- data expiration


def _literal(work: ExpireDataInput, cutoff_ms: int) -> str:
    """The cutoff as a Spark SQL literal of the expiration field's type (the session is in UTC)."""
    moment = datetime.fromtimestamp(cutoff_ms / 1000, UTC)
    kind = work.field_type
    if kind in ("timestamptz", "timestamptz_ns"):
        return f"TIMESTAMP '{moment:%Y-%m-%d %H:%M:%S.%f}'"
    if kind in ("timestamp", "timestamp_ns"):
        return f"TIMESTAMP_NTZ '{moment:%Y-%m-%d %H:%M:%S.%f}'"
    if kind == "date":
        return f"DATE '{moment:%Y-%m-%d}'"
    if kind in ("long", "int"):
        return str(cutoff_ms if work.number_format == "TIMESTAMP_MS" else cutoff_ms // 1000)
    text = format_datetime(work.string_pattern, moment, "data-expire.datetime-string-pattern")
    return "'" + text.replace("'", "''") + "'"


def _expire_data(
    spark: SparkSession, table: Any, name: str, work: ExpireDataInput, properties: dict[str, str]
) -> ExpireDataResult:
    """Delete whole data files (level `file`) or whole partitions (level `partition`) whose largest
    value of the field lies before the cutoff, judged by the files' column metrics; a file without
    metrics for the field is kept. Nothing is rewritten."""
    table.refresh()
    if table.currentSnapshot() is None:
        return ExpireDataResult()
    if work.base_on_rule == "LAST_COMMIT_TIME":
        # the last commit of a writer: lakewarden's own rewrites and deletes are not commits of the data (Amoro)
        last = latest_external_commit(table_history(table)[0])
        if last is None:
            return ExpireDataResult()
        base = last.timestamp_ms
    else:
        base = _now_ms()
    cutoff = base - work.retention_ms
    literal = _literal(work, cutoff)
    field = "`" + work.field.replace("`", "``") + "`"
    spark.sql(f"REFRESH TABLE {name}")
    partitioned = any(not spec.isUnpartitioned() for spec in _iterate(table.specs().values()))
    key = "to_json(partition)" if partitioned else "''"
    files = (
        f"SELECT file_path, file_size_in_bytes, record_count, {key} AS p, "
        f"readable_metrics.{field}.upper_bound AS ub FROM {name}.files WHERE content = 0"
    )
    if work.level == "file":
        query = f"SELECT file_path, file_size_in_bytes, record_count FROM ({files}) WHERE ub < {literal}"
    else:
        query = (
            f"WITH f AS ({files}) SELECT file_path, file_size_in_bytes, record_count FROM f WHERE p IN "
            f"(SELECT p FROM f GROUP BY p HAVING count(ub) = count(*) AND max(ub) < {literal})"
        )
    expired = spark.sql(query).collect()
    if expired:
        jvm: Any = spark._jvm
        delete = table.newDelete()
        for row in expired:
            # a CharSequence that is not a String: py4j would otherwise pick the producer's own
            # deleteFile(String), which removes the file from storage and not from the table
            delete.deleteFile(java_class(jvm, "java.lang.StringBuilder")(row[0]))
        for key_, value in properties.items():
            delete.set(key_, value)
        delete.commit()
    return ExpireDataResult(
        data_files_deleted=len(expired),
        records_deleted=sum(int(r[2]) for r in expired),
        bytes_freed=sum(int(r[1]) for r in expired),
        cutoff_ms=cutoff,
    )


# ---- tags


def _auto_create_tag(table: Any, work: AutoCreateTagsInput) -> AutoCreateTagsResult:
    table.refresh()
    if table.refs().containsKey(work.tag):  # made meanwhile (or by an earlier attempt of this task)
        return AutoCreateTagsResult(tags_created=0, tags=[work.tag])
    manage = table.manageSnapshots().createTag(work.tag, work.snapshot_id)
    if work.max_age_ms > 0:
        manage = manage.setMaxRefAgeMs(work.tag, work.max_age_ms)
    manage.commit()
    return AutoCreateTagsResult(tags_created=1, tags=[work.tag], snapshot_id=work.snapshot_id)


# ---- manifests


def _rewrite_manifests(spark: SparkSession, table: Any, properties: dict[str, str]) -> RewriteManifestsResult:
    rewrite = _actions(spark).rewriteManifests(table)
    for key, value in properties.items():
        rewrite = rewrite.snapshotProperty(key, value)
    result = rewrite.execute()
    return RewriteManifestsResult(
        manifests_rewritten=sum(1 for _ in _iterate(result.rewrittenManifests())),
        manifests_added=sum(1 for _ in _iterate(result.addedManifests())),
    )
