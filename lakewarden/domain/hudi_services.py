"""Which of a Hudi table's services lakewarden runs (pure rules): Hudi's concurrency model — who owns the table's
services, what its writers run inline, the plans they left — and what Hudi itself said on lakewarden's last runs.
domain/hudi.py says what the services would do; docs/formats.md has the table of these rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lakewarden.domain.hudi import INFLIGHT, HudiTableState, HudiVerdict, timeline_tail
from lakewarden.domain.service_runs import LastRun

# who runs the table's services (a lakewarden table property): `writer` (Hudi's default: the writers run them
# inline, and lakewarden runs only the plans they scheduled and left), or `lakewarden` (the writers run none:
# lakewarden schedules and runs each service as the table's properties say)
OWNER = ("hudi.table-services.owner", "writer")
OWNERS = ("writer", "lakewarden")
LOCK_PROVIDER = "hoodie.write.lock.provider"
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
# whether a writer runs a service inline, with the default a Spark writer has (a batch write to a merge-on-read
# table compacts inline; clean and archive follow every commit)
INLINE = {
    "compaction": ("hoodie.compact.inline", True),
    "clustering": ("hoodie.clustering.inline", False),
    "clean": ("hoodie.clean.automatic", True),
    "archive": ("hoodie.archive.automatic", True),
}
# the services that leave a plan (a requested instant) on the timeline for any process to execute
PLANNED_SERVICES = {"compaction": "compaction", "clustering": "clustering"}
# the order one process runs them in: what compaction and clustering replace, clean deletes; archive goes last
SERVICE_ORDER = ("compaction", "clustering", "clean", "archive")


# the table's Hudi settings a service is run with (Hudi's write configuration of the services, their strategies
# and the lock): the table's own layout (`hoodie.table.*` and the like) is Hudi's to read from the table itself
WRITE_OPTION_PREFIXES = (
    "hoodie.compact.",
    "hoodie.compaction.",
    "hoodie.clustering.",
    "hoodie.clean.",
    "hoodie.cleaner.",
    "hoodie.keep.",
    "hoodie.archive.",
    "hoodie.write.lock.",
    "hoodie.write.concurrency.",
    "hoodie.parquet.",
    "hoodie.metadata.",
)
# the layout's own settings under those prefixes, which hoodie.properties holds
TABLE_SETTINGS = frozenset({"hoodie.compaction.payload.class", "hoodie.compaction.record.merger.strategy"})


def write_options(properties: Mapping[str, str]) -> dict[str, str]:
    """The settings of the table's services among its properties (WRITE_OPTION_PREFIXES). The metadata table stays
    as the table has it: Hudi's services enable it by default, and would build one on a table whose writers keep
    none (which those writers then delete again)."""
    options = {
        k: v for k, v in sorted(properties.items()) if k.startswith(WRITE_OPTION_PREFIXES) and k not in TABLE_SETTINGS
    }
    if "hoodie.metadata.enable" not in options:
        has_metadata = bool(properties.get(METADATA_PARTITIONS, "").strip())
        options["hoodie.metadata.enable"] = "true" if has_metadata else "false"
    return options


@dataclass(frozen=True)
class ServiceRun:
    """One of Hudi's table services for lakewarden to run: a plan a writer scheduled (`instant`), or the
    service scheduled and run at once (`instant` None)."""

    service: str
    instant: str | None
    reason: str


@dataclass(frozen=True)
class ServicePlan:
    """What lakewarden runs of the table's needs, and why it leaves the others to the writers."""

    runs: list[ServiceRun] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def _flag(properties: Mapping[str, str], key: tuple[str, bool]) -> bool:
    value = properties.get(key[0])
    return key[1] if value is None else value.strip().lower() == "true"


def owner(properties: Mapping[str, str]) -> str:
    value = properties.get(OWNER[0], OWNER[1]).strip().lower()
    return value if value in OWNERS else OWNER[1]


def archive_waits(state: HudiTableState, clusters: bool) -> str | None:
    """Why archive may not run yet, if it may not: Hudi's cleaner finds the file groups a clustering replaced
    through the clustering's instant on the active timeline, so a writer's cycle cleans before it archives. Where a
    clustering completed after the table's last clean (or runs in this same process), archiving it could leave
    its replaced files to no clean at all."""
    if clusters:
        return "archive: waits for the clustering run now to be cleaned first"
    cleans = state.completed(frozenset({"clean"}))
    last_clean = cleans[-1].timestamp if cleans else ""
    replaced = [i.timestamp for i in state.completed(frozenset({"replacecommit"})) if i.timestamp > last_clean]
    if replaced:
        return f"archive: waits for a clean after the clustering {replaced[-1]}, which finds its replaced files"
    return None


def _plans(state: HudiTableState) -> bool:
    return any(state.pending(action) for action in PLANNED_SERVICES.values())


def plan_services(state: HudiTableState, verdict: HudiVerdict, last: LastRun | None = None) -> ServicePlan:
    """Of the verdict's needs, what lakewarden may run under Hudi's concurrency model:
    - a compaction or clustering plan a writer requested and then went on writing without running (Hudi's async
      pattern: a writer running it inline would have run it before its next commit) is executed;
    - a service is scheduled by lakewarden only where the table allows another process to: lakewarden owns the
      table's services (`hudi.table-services.owner`), or the table names a lock provider and its writers do not
      run that service inline;
    - a plan in flight is left alone (another process runs it), as is anything a writer runs inline;
    - a service Hudi found nothing to do for on lakewarden's last run is not scheduled again until the timeline
      moves (`last`);
    - archive waits for a clean past the newest clustering (`archive_waits`);
    - nothing runs on a table that keeps a metadata table and names no lock provider: every commit, a service's
      too, writes the metadata table, and two processes doing so unlocked race (Hudi's multi-writer rule).
    Each service is run once per process, in SERVICE_ORDER."""
    p = state.properties
    if p.get(METADATA_PARTITIONS, "").strip() and not p.get(LOCK_PROVIDER) and (verdict.needs or _plans(state)):
        return ServicePlan(
            [],
            [
                f"the table keeps a metadata table and names no {LOCK_PROVIDER}: Hudi's services in a process "
                "beside its writers need one, or their commits race on the metadata table"
            ],
        )
    idle = last.idle(timeline_tail(state.timeline)) if last is not None else frozenset()
    owned = owner(p) == "lakewarden"
    locked = bool(p.get(LOCK_PROVIDER))
    writes = state.completed()
    last_write = writes[-1].timestamp if writes else ""
    runs: dict[str, ServiceRun] = {}
    left: list[str] = []
    for service, action in PLANNED_SERVICES.items():
        for waiting in state.pending(action):
            if service in runs:
                break
            if waiting.state == INFLIGHT:
                left.append(f"{service} {waiting.timestamp} is inflight: the process running it finishes it")
            elif owned or waiting.timestamp < last_write or not _flag(p, INLINE[service]):
                runs[service] = ServiceRun(service, waiting.timestamp, f"{service} {waiting.timestamp} was requested")
            else:
                left.append(f"{service} {waiting.timestamp} was requested just now: its writer may run it inline")
    for need in verdict.needs:
        service = need.service
        if service in runs or any(r.startswith(f"{service} ") for r in left):
            continue
        if service in PLANNED_SERVICES and state.pending(PLANNED_SERVICES[service]):
            continue  # the plans above are the work
        if service == "archive" and (waits := archive_waits(state, "clustering" in runs)):
            left.append(waits)
            continue
        if service in idle:
            left.append(f"{service}: Hudi found nothing to do when lakewarden last ran it, and the timeline is as then")
            continue
        inline = INLINE[service]
        # owning the services, lakewarden runs any the table does not say its writers run inline; beside writers
        # that hold a lock, any they do not run inline by Hudi's defaults
        said_inline = p.get(inline[0], "").strip().lower() == "true"
        if (owned and not said_inline) or (locked and not _flag(p, inline)):
            runs[service] = ServiceRun(service, None, need.reason)
        elif owned or locked:
            left.append(f"{service}: the writers run it inline ({inline[0]})")
        else:
            left.append(
                f"{service}: the writers own the table's services; lakewarden runs it when {OWNER[0]} is "
                f"lakewarden or the table names a {LOCK_PROVIDER} and {inline[0]} is false"
            )
    ordered = [runs[s] for s in SERVICE_ORDER if s in runs]
    return ServicePlan(ordered, list(dict.fromkeys(left)))
