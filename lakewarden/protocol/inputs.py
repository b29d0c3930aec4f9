"""What a task asks for: one input model per action, discriminated by `action`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from lakewarden.protocol.base import ProtocolModel


class PartitionRef(ProtocolModel):
    """One partition of a table: its spec, its path as Iceberg prints it (`cat=a`; '' when
    unpartitioned) and its values in the spec's field order."""

    spec_id: int
    path: str
    values: list[Any]

    @property
    def key(self) -> str:
        return f"{self.spec_id}:{self.path}"


# ---- task inputs


class ClusteringInput(ProtocolModel):
    """How a clustering rewrite orders a group's rows (domain/clustering.py)."""

    kind: Literal["sort", "z-order"]
    label: str = Field(description="The clustering as the table's record of clustered partitions names it")
    sort_order_id: int | None = Field(None, description="sort: the table's sort order the rows are sorted by")
    columns: list[str] = Field(default_factory=list, description="z-order: the columns interleaved")


class PlannedFile(ProtocolModel):
    """A data file as the plan found it in its snapshot's manifests: what reading it takes."""

    path: str
    format: Literal["parquet", "orc", "avro"]
    spec_id: int
    partition: list[Any] = Field(description="Its partition values in the spec's order, as Iceberg's JSON writes them")
    size: int = Field(description="Bytes")
    records: int


class FileGroupInput(ProtocolModel):
    """Files of one partition optimized together, named by path as planned on the task's snapshot."""

    partition: PartitionRef
    rewrite: list[str] = Field(description="Data files rewritten, their deletes applied, into new files")
    files: list[PlannedFile] = Field(
        default_factory=list,
        description="The data files of `rewrite`, in order, as the plan found them: sent when no delete file can apply "
        "to them, so that the optimizer need not read the planned snapshot's manifests again to find them",
    )
    rewrite_pos: list[str] = Field(description="Data files whose deletes become a position-delete file of their own")
    deletes: list[str] = Field(description="Every delete file that applies to those data files")
    split_size: int = Field(description="Bytes read per Spark split; each split becomes one file")
    max_file_size: int = Field(description="Where the writer rolls over to a new file")
    expected_files: int = Field(1, description="How many files a clustering rewrite writes (its sort's partitions)")
    clustering: ClusteringInput | None = Field(
        None, description="Rows sorted or z-ordered across the group's output files (a full optimizing's clustering)"
    )


class StagedFiles(ProtocolModel):
    """Files a task wrote and did not commit, for its process's one commit: each as Iceberg's ContentFileParser
    writes a content file (its path, partition, metrics)."""

    groups: list[list[dict[str, Any]]] = Field(
        default_factory=list, description="Per file group of the task, in order: the data files it was rewritten into"
    )
    deletes: list[dict[str, Any]] = Field(default_factory=list, description="The position deletes written")
    vectors: bool = Field(False, description="The deletes are deletion vectors (format version 3)")


class OptimizingInput(ProtocolModel):
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


class ExpireSnapshotsInput(ProtocolModel):
    action: Literal["expire-snapshots"] = "expire-snapshots"
    table: str
    keep_duration_ms: int
    min_count: int
    # how long a Flink job's last checkpoint snapshot, and a snapshot staged by write-audit-publish, are kept
    flink_retention_ms: int = WEEK_MS
    wap_retention_ms: int = WEEK_MS
    # how long the base of each of lakewarden's own commits is kept (0: not kept for that)
    yield_window_ms: int = 0
    # completed at hand-out: the bases of running optimizing processes (and everything newer) are kept
    protected_snapshot_ids: list[int] = Field(default_factory=list)


class CleanOrphanFilesInput(ProtocolModel):
    action: Literal["clean-orphan-files"] = "clean-orphan-files"
    table: str
    min_existing_ms: int
    dry_run: bool = False
    location: str


class CleanDanglingDeleteFilesInput(ProtocolModel):
    action: Literal["clean-dangling-delete-files"] = "clean-dangling-delete-files"
    table: str


class ExpireDataInput(ProtocolModel):
    action: Literal["expire-data"] = "expire-data"
    table: str
    field: str
    field_type: str
    retention_ms: int
    level: Literal["partition", "file"]
    string_pattern: str
    number_format: Literal["TIMESTAMP_MS", "TIMESTAMP_S"]
    base_on_rule: Literal["LAST_COMMIT_TIME", "CURRENT_TIME"]


class AutoCreateTagsInput(ProtocolModel):
    action: Literal["auto-create-tags"] = "auto-create-tags"
    table: str
    tag: str
    snapshot_id: int
    max_age_ms: int = -1


class RewriteManifestsInput(ProtocolModel):
    action: Literal["rewrite-manifests"] = "rewrite-manifests"
    table: str


class HudiServiceInput(ProtocolModel):
    """One of Hudi's table services, run on the table with Hudi's own code (its Spark procedures)."""

    action: Literal["hudi-service"] = "hudi-service"
    table: str  # database.table, as the catalog lists it
    location: str  # the table's base path
    service: Literal["compaction", "clustering", "clean", "archive"]
    # the plan a writer requested, executed as planned; None: the service schedules its plan and runs it
    instant: str | None = None
    # Hudi write settings for the service (the table's own `hoodie.*` properties), as Hudi's procedures take them
    options: dict[str, str] = Field(default_factory=dict)


class PaimonServiceInput(ProtocolModel):
    """One of Paimon's table services, run on the table with Paimon's own code (its Spark procedures)."""

    action: Literal["paimon-service"] = "paimon-service"
    table: str  # database.table, as the catalog lists it
    warehouse: str  # the Paimon warehouse holding the table (the procedures open it through a catalog)
    service: Literal["compaction", "expire-partitions", "expire-snapshots"]
    # the table's own retention and partition-expiry options, which the expiry procedures take as arguments
    options: dict[str, str] = Field(default_factory=dict)


TaskInput = Annotated[
    OptimizingInput
    | ExpireSnapshotsInput
    | CleanOrphanFilesInput
    | CleanDanglingDeleteFilesInput
    | ExpireDataInput
    | AutoCreateTagsInput
    | RewriteManifestsInput
    | HudiServiceInput
    | PaimonServiceInput,
    Field(discriminator="action"),
]
TASK_INPUT: TypeAdapter[TaskInput] = TypeAdapter(TaskInput)
