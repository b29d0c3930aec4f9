"""Which of a Paimon table's services lakewarden runs (pure rules). Paimon's writers compact and expire inline
unless the table is `write-only`, Paimon's setup for a dedicated compaction job: then its writers only write, and
a job of its own compacts, expires snapshots and drops expired partitions. lakewarden is that job for a write-only
table, and leaves a table whose writers do it themselves alone: a second compactor beside them would make their
commits conflict. domain/paimon.py says what the services would do; docs/formats.md has the table of these rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from lakewarden.domain.paimon import PaimonTableState, PaimonVerdict
from lakewarden.domain.service_runs import LastRun

WRITE_ONLY = "write-only"
# the order one process runs them in: compaction first, since its commit adds a snapshot the expiry counts
SERVICE_ORDER = ("compaction", "expire-partitions", "expire-snapshots")
# the table's options a service is run with: retention and the partition expiry's reading of values (compaction
# reads its own from the table)
EXPIRY_OPTIONS = (
    "snapshot.num-retained.min",
    "snapshot.num-retained.max",
    "snapshot.time-retained",
    "partition.expiration-time",
    "partition.timestamp-formatter",
    "partition.timestamp-pattern",
)


@dataclass(frozen=True)
class ServiceRun:
    service: str
    reason: str


@dataclass(frozen=True)
class ServicePlan:
    """What lakewarden runs of the table's needs, and why it leaves the others."""

    runs: list[ServiceRun] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def timeline_tail(state: PaimonTableState) -> str:
    """Where the table stands: its latest snapshot."""
    return str(state.latest.id) if state.latest is not None else ""


def plan_services(state: PaimonTableState, verdict: PaimonVerdict, last: LastRun | None = None) -> ServicePlan:
    """Of the verdict's needs, what lakewarden runs: every one on a write-only table, once per process, in
    SERVICE_ORDER, except a service Paimon found nothing to do for on lakewarden's last run while no snapshot
    came since (`last`)."""
    if not verdict.needs:
        return ServicePlan()
    if state.options.get(WRITE_ONLY, "false").strip().lower() != "true":
        services = sorted({n.service for n in verdict.needs}, key=SERVICE_ORDER.index)
        return ServicePlan(
            [],
            [
                f"{service}: the writers run it with their commits; with the table's {WRITE_ONLY} true (Paimon's "
                "dedicated compaction) lakewarden runs it"
                for service in services
            ],
        )
    idle = last.idle(timeline_tail(state)) if last is not None else frozenset()
    runs: dict[str, ServiceRun] = {}
    left: dict[str, str] = {}
    for need in verdict.needs:
        if need.service in runs or need.service in left:
            continue
        if need.service in idle:
            left[need.service] = (
                f"{need.service}: Paimon found nothing to do when lakewarden last ran it, and no snapshot came since"
            )
            continue
        runs[need.service] = ServiceRun(need.service, need.reason)
    return ServicePlan([runs[s] for s in SERVICE_ORDER if s in runs], list(left.values()))
