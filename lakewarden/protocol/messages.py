"""The messages between an optimizer and the server: registration, polls, heartbeats and completions."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from lakewarden.protocol.base import Id, ProtocolModel
from lakewarden.protocol.inputs import TaskInput
from lakewarden.protocol.results import TaskResult


class CatalogConnection(ProtocolModel):
    """How the optimizer reaches the table's catalog (Spark catalog properties)."""

    name: str
    type: str
    properties: dict[str, str]


class Assignment(ProtocolModel):
    """A task handed to an optimizer thread by poll."""

    process_id: int
    task_id: int
    attempt: int = Field(description="Name it in ack and complete: a superseded attempt is refused")
    type: str
    input: TaskInput
    catalog: CatalogConnection


class SparkApplication(ProtocolModel):
    """The Spark application an optimizer is: where its tasks' jobs run."""

    application_id: str = Field(max_length=256)
    master: str = Field(max_length=1024)
    ui_url: str | None = Field(None, max_length=1024)


class Registration(ProtocolModel):
    group: str
    parallelism: int = Field(ge=1, le=1024)
    resource_id: str | None = Field(None, description="Set by a container that started this optimizer")
    host: str | None = None
    spark: SparkApplication | None = None
    # the engines of other table formats its Spark session carries besides Iceberg (hudi, paimon)
    engines: list[str] = Field(default_factory=list, max_length=8)


class Registered(ProtocolModel):
    token: str
    heartbeat_seconds: float


class TokenRef(ProtocolModel):
    token: str


class PollRequest(TokenRef):
    thread_id: int = Field(ge=0, le=1024)
    timeout_seconds: float = Field(3.0, ge=0, le=3.0)


class TaskRef(TokenRef):
    process_id: Id
    task_id: Id
    attempt: Id


class TaskKey(ProtocolModel):
    process_id: Id
    task_id: Id
    attempt: Id


class Touch(TokenRef):
    """A heartbeat, with the tasks the optimizer is running."""

    running: list[TaskKey] = Field(default_factory=list)


class Touched(ProtocolModel):
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


class SparkUsage(ProtocolModel):
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


class FailureDiagnosis(ProtocolModel):
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
