"""What snapshot expiry keeps, and why: Iceberg's own rules, and the snapshots writers still need.

Iceberg's `RemoveSnapshots` rules (refs by age, each branch's ancestors by count and age, tags) are ported so that
lakewarden can say beforehand what an expiry removes and why a snapshot stays. lakewarden lowers the expiry's
bounds to the oldest snapshot a writer still needs: a running process's base, each Flink job's checkpoint snapshot,
the newest snapshot lakewarden did not make, a staged write-audit-publish snapshot. A branch's own retention is
never lowered: the plan says it is blocked instead. docs/maintenance.md has the rules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

OWN_COMMIT = "lakewarden.process-id"  # in the summary of every snapshot lakewarden commits
FLINK_JOB_ID = "flink.job-id"
FLINK_OPERATOR_ID = "flink.operator-id"
FLINK_CHECKPOINT = "flink.max-committed-checkpoint-id"
WAP_ID = "wap.id"
PUBLISHED_WAP_ID = "published-wap-id"
LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    summary: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ref:
    """A branch or a tag, with its own retention where it sets one (None: the table's default)."""

    name: str
    snapshot_id: int
    branch: bool = True
    min_snapshots_to_keep: int | None = None
    max_snapshot_age_ms: int | None = None
    max_ref_age_ms: int | None = None


class Need(StrEnum):
    """Why a writer still needs a snapshot that its age alone would let go."""

    OPTIMIZING_BASE = "optimizing-base"
    FLINK_CHECKPOINT = "flink-checkpoint"
    LAST_COMMIT = "last-commit"
    WAP_STAGED = "wap-staged"
    YIELD_BASE = "yield-base"


@dataclass(frozen=True)
class Kept:
    snapshot_id: int
    need: Need
    detail: str

    def __str__(self) -> str:
        return f"{self.snapshot_id}: {self.detail}"


@dataclass(frozen=True)
class Policy:
    """The table's retention for an expiry (its properties, read by domain/maintenance.py)."""

    keep_ms: int  # snapshot.keep.duration
    min_count: int  # snapshot.keep.min-count (Iceberg's retainLast: at least 1)
    max_ref_age_ms: int = LONG_MAX  # history.expire.max-ref-age-ms
    flink_retention_ms: int = 7 * 24 * 3_600_000  # snapshot.keep.flink.checkpoint-retention
    wap_retention_ms: int = 7 * 24 * 3_600_000  # snapshot.keep.wap.staged-retention
    # lakewarden.commit.yield-window (0 when lakewarden.commit.maintenance-yields is false): how long the base of
    # each of lakewarden's own commits is kept, with the files lakewarden's work removed from it
    yield_window_ms: int = 0


@dataclass(frozen=True)
class ExpiryPlan:
    cutoff_ms: int  # the expiry's expireOlderThan
    expired: list[int]  # the snapshots it removes, oldest first
    expired_refs: list[str]  # branches and tags dropped for their age
    needed: list[Kept]  # snapshots a writer needs, and so kept with everything newer
    blocked: list[Kept]  # of those, the ones a branch's own retention would still remove


def plan_expiry(
    snapshots: Sequence[Snapshot],
    refs: Sequence[Ref],
    policy: Policy,
    now_ms: int,
    optimizing_bases: Mapping[int, str] | None = None,
) -> ExpiryPlan:
    """What an expiry run now removes and keeps. `snapshots` in the table's metadata order (commit order);
    `optimizing_bases`: snapshot id -> the process planned on it (as the plan's reasons name it)."""
    by_id = {s.snapshot_id: s for s in snapshots}
    needed = writers_needs(snapshots, refs, policy, now_ms, optimizing_bases or {})
    cutoff = min([now_ms - policy.keep_ms, *(by_id[k.snapshot_id].timestamp_ms for k in needed)])
    retained_refs = [r for r in refs if _ref_retained(r, by_id, policy, now_ms)]
    retained = {r.snapshot_id for r in retained_refs}
    reached: set[int] = set()
    for ref in retained_refs:
        if ref.branch:
            retained |= _branch_retained(ref, by_id, policy, cutoff, now_ms)
            reached.update(s.snapshot_id for s in _ancestors(ref.snapshot_id, by_id))
        else:
            reached.add(ref.snapshot_id)
    retained |= {s.snapshot_id for s in snapshots if s.snapshot_id not in reached and s.timestamp_ms >= cutoff}
    expired = sorted((s for s in snapshots if s.snapshot_id not in retained), key=lambda s: s.timestamp_ms)
    gone = {s.snapshot_id for s in expired}
    return ExpiryPlan(
        cutoff_ms=cutoff,
        expired=[s.snapshot_id for s in expired],
        expired_refs=sorted(r.name for r in refs if r not in retained_refs),
        needed=needed,
        blocked=[k for k in needed if k.snapshot_id in gone],
    )


def writers_needs(
    snapshots: Sequence[Snapshot],
    refs: Sequence[Ref],
    policy: Policy,
    now_ms: int,
    optimizing_bases: Mapping[int, str],
) -> list[Kept]:
    """The snapshots writers still need (module docstring), each once, with its first reason."""
    by_id = {s.snapshot_id: s for s in snapshots}
    found: dict[int, Kept] = {}

    def need(snapshot_id: int, kind: Need, detail: str) -> None:
        if snapshot_id in by_id and snapshot_id not in found:
            found[snapshot_id] = Kept(snapshot_id, kind, detail)

    for snapshot_id, process in sorted(optimizing_bases.items()):
        need(snapshot_id, Need.OPTIMIZING_BASE, f"the base of {process}")
    newest_by_job: dict[tuple[str, str], Snapshot] = {}
    for s in snapshots:  # commit order: the last one seen is the newest
        if FLINK_CHECKPOINT in s.summary:
            newest_by_job[(s.summary.get(FLINK_JOB_ID, ""), s.summary.get(FLINK_OPERATOR_ID, ""))] = s
    for (job, operator), s in sorted(newest_by_job.items(), key=lambda item: item[1].timestamp_ms):
        if now_ms - s.timestamp_ms <= policy.flink_retention_ms:
            who = f"Flink job {job or '?'}" + (f" (operator {operator})" if operator else "")
            need(s.snapshot_id, Need.FLINK_CHECKPOINT, f"{who} restores from checkpoint {s.summary[FLINK_CHECKPOINT]}")
    if policy.yield_window_ms > 0:
        # the base of each of lakewarden's recent commits: a writer that planned on it may still commit, and the
        # commit that yields to it puts back the files this snapshot references (metadata/conflicts.py)
        for s in snapshots:
            if (
                OWN_COMMIT in s.summary
                and s.parent_id is not None
                and now_ms - s.timestamp_ms <= policy.yield_window_ms
            ):
                need(
                    s.parent_id,
                    Need.YIELD_BASE,
                    f"a writer may commit against it until lakewarden's snapshot {s.snapshot_id} is older than the "
                    "yield window",
                )
    last = latest_external_commit(snapshots)
    if last is not None:
        need(last.snapshot_id, Need.LAST_COMMIT, "the last commit lakewarden did not make (data expiration's base)")
    on_branches = {a.snapshot_id for r in refs if r.branch for a in _ancestors(r.snapshot_id, by_id)}
    published = {s.summary[PUBLISHED_WAP_ID] for s in snapshots if PUBLISHED_WAP_ID in s.summary}
    for s in snapshots:
        wap_id = s.summary.get(WAP_ID)
        if wap_id is None or wap_id in published or s.snapshot_id in on_branches:
            continue
        if now_ms - s.timestamp_ms <= policy.wap_retention_ms:
            need(s.snapshot_id, Need.WAP_STAGED, f"staged by write-audit-publish as {wap_id}, not yet published")
    return sorted(found.values(), key=lambda k: by_id[k.snapshot_id].timestamp_ms)


def next_expiry_at(
    snapshots: Sequence[Snapshot], refs: Sequence[Ref], policy: Policy, now_ms: int, within_ms: int
) -> int | None:
    """The first moment (epoch ms) after `now_ms`, and at most `within_ms` later, at which an expiry would remove
    a snapshot with no change to the table; None if there is none in that time. What an expiry removes only grows
    as time passes (cutoffs advance, refs age, writers' needs lapse), so the moments where it can change are
    searched by halves."""
    moments = {s.timestamp_ms + policy.keep_ms + 1 for s in snapshots}  # `older than`: strictly
    moments |= {s.timestamp_ms + policy.flink_retention_ms + 1 for s in snapshots}
    moments |= {s.timestamp_ms + policy.wap_retention_ms + 1 for s in snapshots}
    if policy.yield_window_ms > 0:
        moments |= {s.timestamp_ms + policy.yield_window_ms + 1 for s in snapshots if OWN_COMMIT in s.summary}
    by_id = {s.snapshot_id: s for s in snapshots}
    for ref in refs:
        head = by_id.get(ref.snapshot_id)
        if head is not None:
            moments.add(
                head.timestamp_ms
                + (ref.max_ref_age_ms if ref.max_ref_age_ms is not None else policy.max_ref_age_ms)
                + 1
            )
            if ref.max_snapshot_age_ms is not None:
                moments |= {s.timestamp_ms + ref.max_snapshot_age_ms + 1 for s in snapshots}
    candidates = sorted(m for m in moments if now_ms < m <= now_ms + within_ms)
    low, high = 0, len(candidates)  # the first candidate at which something expires lies in [low, high)
    while low < high:
        middle = (low + high) // 2
        plan = plan_expiry(snapshots, refs, policy, candidates[middle])
        if plan.expired and not plan.blocked:
            high = middle
        else:
            low = middle + 1
    return candidates[low] if low < len(candidates) else None


def flink_jobs(snapshots: Sequence[Snapshot]) -> tuple[str, ...]:
    """The prefixes (`<job id>-`) of the files Flink jobs that committed to the table write before they commit
    them: a job's sink writes each checkpoint's manifest as `<job id>-<operator>-…avro` beside the table's
    metadata and commits it only when the checkpoint completes (or, restored, at its first checkpoint), so until
    then no snapshot names it. Apache Amoro spares the newest job's; every job a snapshot still names is spared
    here."""
    return tuple(sorted({f"{s.summary[FLINK_JOB_ID]}-" for s in snapshots if s.summary.get(FLINK_JOB_ID)}))


def latest_external_commit(snapshots: Sequence[Snapshot]) -> Snapshot | None:
    """The newest snapshot (in commit order) that lakewarden did not make: data expiration's last commit."""
    return next((s for s in reversed(snapshots) if OWN_COMMIT not in s.summary), None)


def _ancestors(snapshot_id: int, by_id: Mapping[int, Snapshot]) -> Iterator[Snapshot]:
    """The snapshot and its ancestors, newest first, as far as the metadata holds them."""
    current = by_id.get(snapshot_id)
    seen: set[int] = set()
    while current is not None and current.snapshot_id not in seen:
        seen.add(current.snapshot_id)
        yield current
        current = by_id.get(current.parent_id) if current.parent_id is not None else None


def _ref_retained(ref: Ref, by_id: Mapping[int, Snapshot], policy: Policy, now_ms: int) -> bool:
    if ref.name == "main":
        return True
    head = by_id.get(ref.snapshot_id)
    if head is None:  # Iceberg drops a ref whose snapshot is gone
        return False
    max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else policy.max_ref_age_ms
    return now_ms - head.timestamp_ms <= max_age


def _branch_retained(ref: Ref, by_id: Mapping[int, Snapshot], policy: Policy, cutoff_ms: int, now_ms: int) -> set[int]:
    older_than = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else cutoff_ms
    at_least = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else max(policy.min_count, 1)
    kept: set[int] = set()
    for ancestor in _ancestors(ref.snapshot_id, by_id):
        if len(kept) < at_least or ancestor.timestamp_ms >= older_than:
            kept.add(ancestor.snapshot_id)
        else:
            break
    return kept
