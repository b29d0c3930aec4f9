"""What a task reports: one result model per action, discriminated by `action`, and how a process's summary
adds its tasks' results up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, TypeAdapter

from lakewarden.protocol.base import ProtocolModel
from lakewarden.protocol.inputs import StagedFiles

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


class _Result(ProtocolModel):
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
    groups_yielded: int = Field(
        0,
        description="File groups left out of the commit because a writer changed their files since the planned "
        "snapshot (the others committed): their partitions are planned again",
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
        "groups_yielded",
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


class KeptSnapshot(ProtocolModel):
    """A snapshot an expiry kept because a writer needs it (domain/retention.py)."""

    snapshot_id: int
    need: Literal["optimizing-base", "flink-checkpoint", "last-commit", "wap-staged", "yield-base"]
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


class HudiServiceResult(_Result):
    """What one of Hudi's table services did: the instants it completed on the timeline."""

    action: Literal["hudi-service"] = "hudi-service"
    service: str = ""
    instants: list[str] = Field(default_factory=list)  # completed by this task, oldest first
    services_run: int = 0  # 1 when the service found work, 0 when Hudi planned nothing
    files_deleted: int = 0  # clean: the superseded files it deleted
    instants_archived: int = 0  # archive: instants moved off the active timeline
    # the services that found nothing to do, and where the timeline stood before the task (domain/hudi.timeline_tail):
    # Hudi's own word that its service has no work on the timeline as it is (domain/hudi_services.plan_services)
    idle_services: list[str] = Field(default_factory=list)
    timeline_tail: str = ""
    TOTALS: ClassVar[tuple[str, ...]] = ("services_run", "files_deleted", "instants_archived")


class PaimonServiceResult(_Result):
    """What one of Paimon's table services did: the snapshots it committed, what it expired."""

    action: Literal["paimon-service"] = "paimon-service"
    service: str = ""
    snapshots: list[int] = Field(default_factory=list)  # committed by this task, oldest first
    services_run: int = 0  # 1 when the service found work, 0 when Paimon did nothing
    snapshots_expired: int = 0
    partitions_expired: int = 0
    # the services that found nothing to do, and the latest snapshot before the task (domain/service_runs.LastRun)
    idle_services: list[str] = Field(default_factory=list)
    timeline_tail: str = ""
    TOTALS: ClassVar[tuple[str, ...]] = ("services_run", "snapshots_expired", "partitions_expired")


TaskResult = Annotated[
    OptimizingResult
    | ExpireSnapshotsResult
    | CleanOrphanFilesResult
    | CleanDanglingDeleteFilesResult
    | ExpireDataResult
    | AutoCreateTagsResult
    | RewriteManifestsResult
    | HudiServiceResult
    | PaimonServiceResult,
    Field(discriminator="action"),
]
TASK_RESULT: TypeAdapter[TaskResult] = TypeAdapter(TaskResult)
