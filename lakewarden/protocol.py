"""The protocol between the server and its optimizers: what a task asks for and what it reports.

Each action has its own task input and its own result, frozen pydantic models discriminated by
`action` (the shape of pyiceberg's TableUpdate models). The planner and the process factories build
inputs, the server stores them (as JSON) and hands them out, the optimizer runs them and reports a
result of the same action, and the factories merge results into a process summary field by field.
The server and the optimizer both import this module; it imports nothing of lakewarden's.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_LISTED = 100  # paths a maintenance result or summary lists
# paths of each kind an optimizing task reports (its counts cover every file): even a task of tiny files stays
# far below the server's largest request body
MAX_FILES = 20_000
# the totals of maintenance results that the overview and /metrics add up over processes
MAINTENANCE_TOTALS = (
    "files_deleted",
    "bytes_freed",
    "snapshots_expired",
    "delete_files_removed",
    "data_files_deleted",
    "records_deleted",
    "tags_created",
    "manifests_rewritten",
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartitionRef(_Model):
    """One partition of a table: its spec, its path as Iceberg prints it (`cat=a`; '' when
    unpartitioned) and its values in the spec's field order."""

    spec_id: int
    path: str
    values: list[Any]

    @property
    def key(self) -> str:
        return f"{self.spec_id}:{self.path}"


# ---- task inputs


class ClusteringInput(_Model):
    """How a clustering rewrite orders a group's rows (domain/clustering.py)."""

    kind: Literal["sort", "z-order"]
    label: str = Field(description="The clustering as the table's record of clustered partitions names it")
    sort_order_id: int | None = Field(None, description="sort: the table's sort order the rows are sorted by")
    columns: list[str] = Field(default_factory=list, description="z-order: the columns interleaved")


class FileGroupInput(_Model):
    """Files of one partition optimized together, named by path as planned on the task's snapshot."""

    partition: PartitionRef
    rewrite: list[str] = Field(description="Data files rewritten, their deletes applied, into new files")
    rewrite_pos: list[str] = Field(description="Data files whose deletes become a position-delete file of their own")
    deletes: list[str] = Field(description="Every delete file that applies to those data files")
    split_size: int = Field(description="Bytes read per Spark split; each split becomes one file")
    max_file_size: int = Field(description="Where the writer rolls over to a new file")
    expected_files: int = Field(1, description="How many files a clustering rewrite writes (its sort's partitions)")
    clustering: ClusteringInput | None = Field(
        None, description="Rows sorted or z-ordered across the group's output files (a full optimizing's clustering)"
    )


class StagedFiles(_Model):
    """Files a task wrote and did not commit, for its process's one commit: each as Iceberg's ContentFileParser
    writes a content file (its path, partition, metrics)."""

    groups: list[list[dict[str, Any]]] = Field(
        default_factory=list, description="Per file group of the task, in order: the data files it was rewritten into"
    )
    deletes: list[dict[str, Any]] = Field(default_factory=list, description="The position deletes written")
    vectors: bool = Field(False, description="The deletes are deletion vectors (format version 3)")


class OptimizingInput(_Model):
    """Rewrite exactly the planned files of some partitions, as planned on `snapshot_id`, and commit them
    with the removal of `remove_deletes` in one snapshot. In a process of several tasks each task only stages
    what it wrote (`stage_only`) and the process's last task (`commit_staged`) commits every task's files at
    once, with the delete files the tasks shared."""

    action: Literal["optimizing"] = "optimizing"
    table: str = Field(description="database.table in the task's catalog")
    snapshot_id: int | None
    type: Literal["minor", "major", "full"]
    partitions: list[PartitionRef]
    filter: str = Field(description="The partitions as an Iceberg ExpressionParser JSON expression")
    groups: list[FileGroupInput] = Field(default_factory=list)
    remove_deletes: list[str] = Field(default_factory=list, description="Delete files the commit removes")
    reasons: list[str] = Field(default_factory=list)
    branch: str | None = Field(None, description="The branch planned and committed to; none is main")
    stage_only: bool = Field(False, description="Write the files and return them staged: the process commits them")
    commit_staged: bool = Field(False, description="Commit the files the process's tasks staged, in one snapshot")
    staged: StagedFiles | None = Field(
        None, description="commit_staged: what the tasks staged, their groups in `groups` (completed at hand-out)"
    )


WEEK_MS = 7 * 24 * 3_600_000


class ExpireSnapshotsInput(_Model):
    action: Literal["expire-snapshots"] = "expire-snapshots"
    table: str
    keep_duration_ms: int
    min_count: int
    # how long a Flink job's last checkpoint snapshot, and a snapshot staged by write-audit-publish, are kept
    flink_retention_ms: int = WEEK_MS
    wap_retention_ms: int = WEEK_MS
    # completed at hand-out: the bases of running optimizing processes (and everything newer) are kept
    protected_snapshot_ids: list[int] = Field(default_factory=list)


class CleanOrphanFilesInput(_Model):
    action: Literal["clean-orphan-files"] = "clean-orphan-files"
    table: str
    min_existing_ms: int
    dry_run: bool = False
    location: str


class CleanDanglingDeleteFilesInput(_Model):
    action: Literal["clean-dangling-delete-files"] = "clean-dangling-delete-files"
    table: str


class ExpireDataInput(_Model):
    action: Literal["expire-data"] = "expire-data"
    table: str
    field: str
    field_type: str
    retention_ms: int
    level: Literal["partition", "file"]
    string_pattern: str
    number_format: Literal["TIMESTAMP_MS", "TIMESTAMP_S"]
    base_on_rule: Literal["LAST_COMMIT_TIME", "CURRENT_TIME"]


class AutoCreateTagsInput(_Model):
    action: Literal["auto-create-tags"] = "auto-create-tags"
    table: str
    tag: str
    snapshot_id: int
    max_age_ms: int = -1


class RewriteManifestsInput(_Model):
    action: Literal["rewrite-manifests"] = "rewrite-manifests"
    table: str


# what a database BIGINT holds: larger numbers can name no process, task or attempt (and would not fit a query)
Id = Annotated[int, Field(ge=0, le=2**63 - 1)]

TaskInput = Annotated[
    OptimizingInput
    | ExpireSnapshotsInput
    | CleanOrphanFilesInput
    | CleanDanglingDeleteFilesInput
    | ExpireDataInput
    | AutoCreateTagsInput
    | RewriteManifestsInput,
    Field(discriminator="action"),
]
TASK_INPUT: TypeAdapter[TaskInput] = TypeAdapter(TaskInput)


# ---- task results


class _Result(_Model):
    duration_ms: int = 0
    # the result's fields that a process summary adds up over its tasks; the others are kept from one task
    TOTALS: ClassVar[tuple[str, ...]] = ()
    # lists of every file of a kind the task changed: kept apart from the process's summary, listed a page at a
    # time (the server's `GET /processes/{id}/files`)
    FILES: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def summarize(cls, results: Sequence[_Result]) -> dict[str, Any]:
        """The process summary from its successful tasks' results: the totals added up, list fields
        joined (at most MAX_LISTED entries), any other field as the last task reported it."""
        summary: dict[str, Any] = {}
        for result in results:
            for name, value in result.model_dump(mode="json", exclude={"action", "duration_ms"}).items():
                if name in cls.TOTALS:
                    summary[name] = summary.get(name, 0) + value
                elif isinstance(value, list):
                    summary[name] = [*summary.get(name, []), *value][:MAX_LISTED]
                else:
                    summary[name] = value
        return summary


class OptimizingResult(_Result):
    action: Literal["optimizing"] = "optimizing"
    files_in: int = 0
    bytes_in: int = 0
    files_out: int = 0
    bytes_out: int = 0
    # data files whose deletes were rewritten into position-delete files of their own
    rewrite_pos_files: int = 0
    delete_files_removed: int = 0
    delete_bytes_removed: int = 0
    delete_files_added: int = 0
    delete_bytes_added: int = 0
    snapshot_id: int | None = None
    rewritten_files: list[str] = Field(default_factory=list, description=f"Data files replaced (<= {MAX_FILES})")
    added_files: list[str] = Field(default_factory=list, description=f"Data files written (<= {MAX_FILES})")
    removed_delete_files: list[str] = Field(default_factory=list, description=f"Delete files removed (<= {MAX_FILES})")
    added_delete_files: list[str] = Field(
        default_factory=list, description=f"Position-delete files written (<= {MAX_FILES})"
    )
    unreduced: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per partition ('<spec id>:<path>'), the files written by a rewrite that could not reduce "
        "its files: the partition is not planned again until its files change",
    )
    clustered: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per partition ('<spec id>:<path>'), the files a clustering rewrite wrote: the partition is "
        "clustered while they are its files",
    )
    staged: StagedFiles | None = Field(None, description="stage_only: the files written, for the process to commit")
    process_commit: bool = Field(False, description="The process's one commit: its counts are the process's")
    TOTALS: ClassVar[tuple[str, ...]] = (
        "files_in",
        "bytes_in",
        "files_out",
        "bytes_out",
        "rewrite_pos_files",
        "delete_files_removed",
        "delete_bytes_removed",
        "delete_files_added",
        "delete_bytes_added",
    )
    FILES: ClassVar[tuple[str, ...]] = ("rewritten_files", "added_files", "removed_delete_files", "added_delete_files")

    @classmethod
    def summarize(cls, results: Sequence[_Result]) -> dict[str, Any]:
        """The totals: a process rewrote these files and bytes, whatever its tasks' snapshots (the files themselves
        are listed apart)."""
        # a process committed once counts what its commit committed; files staged and not committed do not count
        mine = [r for r in results if isinstance(r, OptimizingResult)]
        committed = [r for r in mine if r.process_commit] or [r for r in mine if r.staged is None]
        merged = super().summarize(committed)
        return {name: int(merged.get(name, 0)) for name in cls.TOTALS}


class KeptSnapshot(_Model):
    """A snapshot an expiry kept because a writer needs it (domain/retention.py)."""

    snapshot_id: int
    need: Literal["optimizing-base", "flink-checkpoint", "last-commit", "wap-staged"]
    detail: str


class ExpireSnapshotsResult(_Result):
    action: Literal["expire-snapshots"] = "expire-snapshots"
    snapshots_expired: int = 0
    data_files_deleted: int = 0
    delete_files_deleted: int = 0
    manifests_deleted: int = 0
    manifest_lists_deleted: int = 0
    statistics_files_deleted: int = 0
    files_deleted: int = 0
    bytes_freed: int = 0
    skipped_outside_location: int = Field(0, description="Unreferenced files left alone: outside the table location")
    cutoff_ms: int | None = None
    protected_snapshot_ids: list[int] = Field(default_factory=list)
    kept: list[KeptSnapshot] = Field(
        default_factory=list, description="Snapshots kept, with everything newer, because a writer needs them"
    )
    refs_expired: list[str] = Field(default_factory=list, description="Branches and tags dropped for their age")
    blocked: list[KeptSnapshot] = Field(
        default_factory=list,
        description="Snapshots a writer needs that a branch's own retention would expire: then nothing is expired",
    )
    TOTALS: ClassVar[tuple[str, ...]] = (
        "snapshots_expired",
        "data_files_deleted",
        "delete_files_deleted",
        "manifests_deleted",
        "manifest_lists_deleted",
        "statistics_files_deleted",
        "files_deleted",
        "bytes_freed",
        "skipped_outside_location",
    )


class CleanOrphanFilesResult(_Result):
    action: Literal["clean-orphan-files"] = "clean-orphan-files"
    dry_run: bool = False
    orphan_files_found: int = 0
    orphan_bytes_found: int = 0
    files_deleted: int = 0
    bytes_freed: int = 0
    skipped_outside_location: int = 0
    skipped_too_young: int = 0
    skipped_flink_manifests: int = Field(
        0, description="Unreferenced files left alone: manifests of a Flink job's checkpoints not yet committed"
    )
    files: list[str] = Field(default_factory=list, description=f"The orphans found (at most {MAX_LISTED})")
    TOTALS: ClassVar[tuple[str, ...]] = (
        "orphan_files_found",
        "orphan_bytes_found",
        "files_deleted",
        "bytes_freed",
        "skipped_outside_location",
        "skipped_too_young",
        "skipped_flink_manifests",
    )


class CleanDanglingDeleteFilesResult(_Result):
    action: Literal["clean-dangling-delete-files"] = "clean-dangling-delete-files"
    delete_files_removed: int = 0
    bytes_freed: int = 0
    files: list[str] = Field(default_factory=list)
    TOTALS: ClassVar[tuple[str, ...]] = ("delete_files_removed", "bytes_freed")


class ExpireDataResult(_Result):
    action: Literal["expire-data"] = "expire-data"
    data_files_deleted: int = 0
    records_deleted: int = 0
    bytes_freed: int = 0
    cutoff_ms: int | None = None
    TOTALS: ClassVar[tuple[str, ...]] = ("data_files_deleted", "records_deleted", "bytes_freed")


class AutoCreateTagsResult(_Result):
    action: Literal["auto-create-tags"] = "auto-create-tags"
    tags_created: int = 0
    tags: list[str] = Field(default_factory=list)
    snapshot_id: int | None = None
    TOTALS: ClassVar[tuple[str, ...]] = ("tags_created",)


class RewriteManifestsResult(_Result):
    action: Literal["rewrite-manifests"] = "rewrite-manifests"
    manifests_rewritten: int = 0
    manifests_added: int = 0
    TOTALS: ClassVar[tuple[str, ...]] = ("manifests_rewritten", "manifests_added")


TaskResult = Annotated[
    OptimizingResult
    | ExpireSnapshotsResult
    | CleanOrphanFilesResult
    | CleanDanglingDeleteFilesResult
    | ExpireDataResult
    | AutoCreateTagsResult
    | RewriteManifestsResult,
    Field(discriminator="action"),
]
TASK_RESULT: TypeAdapter[TaskResult] = TypeAdapter(TaskResult)


# ---- the messages


class CatalogConnection(_Model):
    """How the optimizer reaches the table's catalog (Spark catalog properties)."""

    name: str
    type: str
    properties: dict[str, str]


class Assignment(_Model):
    """A task handed to an optimizer thread by poll."""

    process_id: int
    task_id: int
    attempt: int = Field(description="Name it in ack and complete: a superseded attempt is refused")
    type: str
    input: TaskInput
    catalog: CatalogConnection


class SparkApplication(_Model):
    """The Spark application an optimizer is: where its tasks' jobs run."""

    application_id: str = Field(max_length=256)
    master: str = Field(max_length=1024)
    ui_url: str | None = Field(None, max_length=1024)


class Registration(_Model):
    group: str
    parallelism: int = Field(ge=1, le=1024)
    resource_id: str | None = Field(None, description="Set by a container that started this optimizer")
    host: str | None = None
    spark: SparkApplication | None = None


class Registered(_Model):
    token: str
    heartbeat_seconds: float


class TokenRef(_Model):
    token: str


class PollRequest(TokenRef):
    thread_id: int = Field(ge=0, le=1024)
    timeout_seconds: float = Field(3.0, ge=0, le=3.0)


class TaskRef(TokenRef):
    process_id: Id
    task_id: Id
    attempt: Id


class TaskKey(_Model):
    process_id: Id
    task_id: Id
    attempt: Id


class Touch(TokenRef):
    """A heartbeat, with the tasks the optimizer is running."""

    running: list[TaskKey] = Field(default_factory=list)


class Touched(_Model):
    """Of the tasks a heartbeat named, those that are no longer the optimizer's to run (their process was
    canceled, or they were taken back): the optimizer cancels their Spark jobs and commits nothing of them."""

    revoked: list[TaskKey] = Field(default_factory=list)
    # the server asks the optimizer to leave (its container releases it): it finishes its running tasks,
    # unregisters and stops its Spark application; how optimizers whose driver runs on a cluster are released
    leave: bool = False


class FailureKind(StrEnum):
    """What a task's failure says about running it again (the rules: domain/failures.py)."""

    CONFLICT = "conflict"  # lost a race with a concurrent commit: retried after the base back-off
    TRANSIENT = "transient"  # storage, network, a lost executor, an unknown kind: retried after a growing back-off
    FINAL = "final"  # fails the same way every time (an invalid argument, a forbidden setting): not retried


class SparkUsage(_Model):
    """What Spark measured of one task's jobs (those of its job group), from the driver's status store — the
    figures the Spark UI shows for the same stages."""

    jobs: int = Field(0, ge=0)
    tasks: int = Field(0, ge=0, description="Spark tasks run, failed ones included")
    cpu_ms: int = Field(0, ge=0, description="Executor CPU time")
    whole_cpu_ms: int = Field(
        0,
        ge=0,
        description="All the CPU the attempt cost (optimizer/cpu.py): the optimizer's own processes while it ran "
        "(its Python, its Spark driver and a local master's executors), plus a cluster's executors' CPU time; "
        "0 from optimizers that do not measure it",
    )
    run_ms: int = Field(0, ge=0, description="Executor run time: how long Spark tasks held a core")
    read_bytes: int = Field(0, ge=0)
    read_records: int = Field(0, ge=0)
    written_bytes: int = Field(0, ge=0)
    written_records: int = Field(0, ge=0)
    shuffle_bytes: int = Field(0, ge=0, description="Shuffle bytes written")
    spilled_bytes: int = Field(0, ge=0, description="Bytes spilled to disk")
    peak_memory_bytes: int = Field(0, ge=0, description="The largest peak execution memory of one Spark task")

    def plus(self, other: SparkUsage) -> SparkUsage:
        """Both together: the figures added up, the peak the larger of the two."""
        mine, theirs = self.model_dump(), other.model_dump()
        summed = {k: v + theirs[k] for k, v in mine.items()}
        summed["peak_memory_bytes"] = max(self.peak_memory_bytes, other.peak_memory_bytes)
        return SparkUsage(**summed)


class FailureDiagnosis(_Model):
    """A failure as an operator reads it (domain/failures.diagnose)."""

    error_class: str | None = Field(None, max_length=256, description="The innermost cause's exception class")
    root_cause: str | None = Field(None, max_length=1000, description="The innermost cause, as one line")
    hint: str | None = Field(None, max_length=1000, description="What usually causes it and what to do")


class Completion(TaskRef):
    """A task's result, or its error."""

    usage: SparkUsage | None = Field(
        None, description="What Spark measured of the attempt, whether it succeeded or failed (its cost)"
    )
    output: TaskResult | None = None
    error: str | None = None
    diagnosis: FailureDiagnosis | None = Field(None, description="With an error: its class, root cause and a hint")
    failure: FailureKind = Field(
        FailureKind.TRANSIENT,
        description="With an error: a conflict with a concurrent commit and a transient failure are retried (a "
        "conflict soon, a transient failure after a growing back-off); a final one fails the process at once",
    )
