"""Hudi tables as lakewarden sees them: their timeline, their file groups, and what Hudi's own table services
would do next (pure rules; metadata/hudi.py reads the table).

The timeline is read from the instant files' names, as Hudi's `HoodieInstant` does, for both timeline layouts.
The rules are Hudi's own service triggers with their defaults (compaction after delta commits, clustering of small
base files, cleaning of unreadable slices, archiving), each need naming the Spark procedure that does the work.
docs/formats.md lists them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from lakewarden.domain.durations import format_duration

REQUESTED, INFLIGHT, COMPLETED = "requested", "inflight", "completed"
# actions whose completed instant is a write of data (a compaction completes as a commit)
WRITES = frozenset({"commit", "deltacommit", "replacecommit"})
ACTIONS = frozenset(
    {
        "commit",
        "deltacommit",
        "replacecommit",
        "compaction",
        "logcompaction",
        "clustering",
        "clean",
        "rollback",
        "savepoint",
        "restore",
        "indexing",
    }
)
# layout 1 names a commit's inflight state `<instant>.inflight`, without the action
_INSTANT = re.compile(r"^(\d{14,17})(?:_(\d{14,17}))?\.([a-z]+)(?:\.(requested|inflight))?$")
_BASE_FILE = re.compile(r"^(?P<id>.+)_(?P<token>\d+-\d+-\d+)_(?P<instant>\d{14,17})\.(?P<ext>parquet|orc|hfile|lance)$")
_LOG_FILE = re.compile(r"^\.(?P<id>.+)_(?P<instant>\d{14,17})\.log\.(?P<version>\d+)(?:_(?P<token>\d+-\d+-\d+))?$")

MAX_DELTA_COMMITS = ("hoodie.compact.inline.max.delta.commits", 5)
CLUSTERING_SMALL_FILE_LIMIT = ("hoodie.clustering.plan.strategy.small.file.limit", 314_572_800)
CLUSTERING_MAX_COMMITS = ("hoodie.clustering.inline.max.commits", 4)
COMMITS_RETAINED = ("hoodie.cleaner.commits.retained", 10)
KEEP_MAX_COMMITS = ("hoodie.keep.max.commits", 30)
SMALL_FILES_FOR_CLUSTERING = 2  # the fewest small files clustering can merge into fewer


@dataclass(frozen=True, order=True)
class Instant:
    """One instant of the active timeline, in its newest state."""

    timestamp: str
    action: str
    state: str
    completed_at: str | None = None  # layout 2 names when it completed

    @property
    def time(self) -> datetime | None:
        return instant_time(self.timestamp)


def instant_time(timestamp: str) -> datetime | None:
    """An instant time (yyyyMMddHHmmss[SSS], in UTC as lakewarden reads it) as a datetime."""
    try:
        moment = datetime.strptime(timestamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    millis = timestamp[14:17]
    return moment.replace(microsecond=int(millis) * 1000) if millis.isdigit() else moment


def parse_instant(file_name: str) -> Instant | None:
    """The instant an instant file names; None for any other file of `.hoodie`."""
    if file_name.endswith(".inflight") and file_name.count(".") == 1:  # layout 1's commit inflight
        file_name = file_name.replace(".inflight", ".commit.inflight")
    match = _INSTANT.match(file_name)
    if match is None or match.group(3) not in ACTIONS:
        return None
    timestamp, completion, action, state = match.groups()
    return Instant(timestamp, action, state or COMPLETED, completion)


def timeline_of(file_names: Sequence[str]) -> list[Instant]:
    """Each instant once, in its newest state (completed over inflight over requested), oldest first. A
    compaction or clustering that completed is shown once, as its completed commit."""
    rank = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2}
    newest: dict[str, Instant] = {}
    for name in file_names:
        found = parse_instant(name)
        if found is None:
            continue
        known = newest.get(found.timestamp)
        if known is None or rank[found.state] > rank[known.state]:
            newest[found.timestamp] = found
    return sorted(newest.values())


def timeline_tail(timeline: Sequence[Instant]) -> str:
    """Where the timeline stands: its newest instant and how many instants are not completed. An instant's time
    is when it began, so a commit in flight and the same commit completed share it; the count tells them apart."""
    if not timeline:
        return ""
    pending = sum(1 for i in timeline if i.state != COMPLETED)
    return f"{max(i.timestamp for i in timeline)}+{pending}"


@dataclass(frozen=True)
class FileSlice:
    """A file group's slice: the base file written at `base_instant` (None for a slice of log files only) and
    the log files written on it since."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None
    base_size: int
    log_files: tuple[tuple[str, int], ...] = ()

    @property
    def size(self) -> int:
        return self.base_size + sum(size for _, size in self.log_files)


def slices_of(partition: str, files: Sequence[tuple[str, int]]) -> list[FileSlice]:
    """A partition's file slices from its files (name, size), as Hudi's file-system view groups them: by file id
    and the instant of the base file a log file was written on. Files not of Hudi's names are left out."""
    bases: dict[tuple[str, str], tuple[str, int]] = {}
    logs: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
    for name, size in files:
        if (base := _BASE_FILE.match(name)) is not None:
            bases[(base["id"], base["instant"])] = (name, size)
        elif (log := _LOG_FILE.match(name)) is not None:
            logs.setdefault((log["id"], log["instant"]), []).append((int(log["version"]), name, size))
    slices = []
    for key in sorted(set(bases) | set(logs)):
        base_file, base_size = bases.get(key, (None, 0))
        ordered = tuple((name, size) for _, name, size in sorted(logs.get(key, [])))
        slices.append(FileSlice(partition, key[0], key[1], base_file, base_size, ordered))
    return slices


@dataclass(frozen=True)
class HudiTableState:
    """What was read of a Hudi table."""

    name: str
    table_type: str  # COPY_ON_WRITE or MERGE_ON_READ
    properties: Mapping[str, str]
    timeline: list[Instant]
    slices: list[FileSlice]  # every slice on storage, of every partition
    partitions: list[str]

    @property
    def mor(self) -> bool:
        return self.table_type == "MERGE_ON_READ"

    def completed(self, actions: frozenset[str] = WRITES) -> list[Instant]:
        return [i for i in self.timeline if i.state == COMPLETED and i.action in actions]

    def pending(self, action: str) -> list[Instant]:
        return [i for i in self.timeline if i.state != COMPLETED and i.action == action]

    def configured(self, config: Mapping[str, str]) -> HudiTableState:
        """The table judged by its configuration: its `hoodie.properties` under lakewarden's view of them
        (TableRuntime.config: the catalog's table defaults and the table's own properties)."""
        return replace(self, properties={**self.properties, **config})

    def latest_slices(self) -> list[FileSlice]:
        """Each file group's newest slice whose base instant is completed (or a slice of logs only)."""
        done = {i.timestamp for i in self.completed(WRITES | {"compaction"})}
        pending = {i.timestamp for i in self.pending("compaction")}
        latest: dict[tuple[str, str], FileSlice] = {}
        for s in sorted(self.slices, key=lambda s: s.base_instant):
            if s.base_file is None or s.base_instant in done or s.base_instant in pending:
                latest[(s.partition, s.file_id)] = s
        return sorted(latest.values(), key=lambda s: (s.partition, s.file_id))


def _setting(properties: Mapping[str, str], key: tuple[str, int]) -> int:
    value = properties.get(key[0])
    return int(value) if value is not None and value.isdigit() else key[1]


@dataclass(frozen=True)
class Need:
    """Work one of Hudi's table services would do, and why."""

    service: str  # compaction, clustering, clean, archive
    reason: str
    partition: str | None = None
    procedure: str = ""  # the Spark SQL call that runs it, with Hudi's Spark bundle


@dataclass(frozen=True)
class HudiVerdict:
    needs: list[Need] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [f"{n.service}: {n.reason}" for n in self.needs] or ["nothing for Hudi's table services to do"]


def procedure(service: str, table: str) -> str:
    calls = {
        "compaction": f"CALL run_compaction(op => 'scheduleAndExecute', table => '{table}')",
        "clustering": f"CALL run_clustering(table => '{table}')",
        "clean": f"CALL run_clean(table => '{table}')",
        "archive": f"CALL archive_commits(table => '{table}')",
    }
    return calls[service]


def judge(state: HudiTableState, table: str, now: datetime) -> HudiVerdict:
    """What Hudi's table services would do to the table now (the module's rules), per partition where the
    work is a partition's."""
    p = state.properties
    needs: list[Need] = []

    def need(service: str, reason: str, partition: str | None = None) -> None:
        needs.append(Need(service, reason, partition, procedure(service, table)))

    latest = state.latest_slices()
    if state.mor:
        limit = _setting(p, MAX_DELTA_COMMITS)
        for s in latest:
            if len(s.log_files) >= limit:
                need(
                    "compaction",
                    f"file group {s.file_id} has {len(s.log_files)} log files >= {MAX_DELTA_COMMITS[0]} {limit}",
                    s.partition,
                )
        for waiting in state.pending("compaction"):
            age = "" if waiting.time is None else f", {format_duration(now - waiting.time)} ago"
            need("compaction", f"compaction {waiting.timestamp} is {waiting.state}{age} and has not run")
    small = _setting(p, CLUSTERING_SMALL_FILE_LIMIT)
    clustered = state.completed(frozenset({"replacecommit"}))
    since = clustered[-1].timestamp if clustered else ""
    commits_since = sum(1 for i in state.completed() if i.timestamp > since)
    if commits_since >= _setting(p, CLUSTERING_MAX_COMMITS):
        per_partition: dict[str, int] = {}
        for s in latest:
            if s.base_file is not None and s.base_size < small:
                per_partition[s.partition] = per_partition.get(s.partition, 0) + 1
        for partition, count in sorted(per_partition.items()):
            if count >= SMALL_FILES_FOR_CLUSTERING:
                need(
                    "clustering",
                    f"{count} base files under {CLUSTERING_SMALL_FILE_LIMIT[0]} {_mib(small)}, "
                    f"{commits_since} commits since the last clustering",
                    partition,
                )
    retained = _setting(p, COMMITS_RETAINED)
    writes = state.completed()
    if len(writes) > retained:
        earliest = writes[-retained].timestamp  # the oldest commit retained: queries may read the table as of it
        kept = {(s.partition, s.file_id, s.base_instant) for s in latest}
        per_partition = {}
        for s in state.slices:
            if (s.partition, s.file_id, s.base_instant) in kept:
                continue
            newer = [
                o.base_instant
                for o in state.slices
                if (o.partition, o.file_id) == (s.partition, s.file_id) and o.base_instant > s.base_instant
            ]
            # Hudi's cleaner keeps the last version before the oldest retained commit (a query as of that commit
            # reads it): a slice goes once a newer one was written before that commit
            if newer and min(newer) < earliest:
                per_partition[s.partition] = per_partition.get(s.partition, 0) + 1
        for partition, count in sorted(per_partition.items()):
            need(
                "clean",
                f"{count} file slice(s) superseded before the {retained} commits {COMMITS_RETAINED[0]} keeps",
                partition,
            )
    # Hudi's archiver counts the commits timeline (writes, compactions, clusterings), not cleans and rollbacks
    active = len(state.completed())
    keep_max = _setting(p, KEEP_MAX_COMMITS)
    if active > keep_max:
        need("archive", f"{active} completed commits on the active timeline > {KEEP_MAX_COMMITS[0]} {keep_max}")
    return HudiVerdict(needs)


def _mib(n: int) -> str:
    return f"{n / 1048576:.0f} MiB"
