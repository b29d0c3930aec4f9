"""Which task failures may pass on a retry, and which never will.

A task that fails is retried (with back-off) only when running it again can change the outcome: a
commit that lost a race with another writer, storage or the network failing for a moment, a lost
executor. A refusal that follows from the task's own input or the table's settings (an invalid
argument, a validation, a forbidden setting, a table that is gone) fails the same way every time:
the process fails at once with that reason instead of repeating it `execute.num-retries` times.

A failure is described by its chain of causes, outermost first, each as (exception class, message):
Java class names as the JVM reports them, Python ones prefixed with `python:`. The optimizer builds
the chain (optimizer/failures.py); the rules here are plain values, testable without Spark.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lakewarden.protocol import FailureKind

# may pass on a retry: conflicts with concurrent commits, I/O, lost executors and JVMs, timeouts
RETRYABLE = frozenset(
    {
        "org.apache.iceberg.exceptions.CommitFailedException",
        "org.apache.iceberg.exceptions.CommitStateUnknownException",
        "org.apache.iceberg.exceptions.RuntimeIOException",
        "org.apache.iceberg.exceptions.NotFoundException",  # a file gone meanwhile: the next run reads the new state
        "org.apache.iceberg.exceptions.ServiceFailureException",
        "org.apache.iceberg.exceptions.ServiceUnavailableException",
        "java.io.IOException",
        "java.io.UncheckedIOException",
        "java.io.FileNotFoundException",
        "java.nio.file.NoSuchFileException",
        "java.nio.file.AccessDeniedException",
        "java.net.SocketTimeoutException",
        "java.net.ConnectException",
        "java.util.concurrent.TimeoutException",
        "java.lang.OutOfMemoryError",
        "python:OSError",
        "python:ConnectionError",
        "python:TimeoutError",
        "python:Py4JNetworkError",
        "python:HTTPError",
    }
)

# fail the same way every time
DETERMINISTIC = frozenset(
    {
        "java.lang.IllegalArgumentException",
        "java.lang.NumberFormatException",
        "java.lang.UnsupportedOperationException",
        "org.apache.iceberg.exceptions.ValidationException",
        "org.apache.iceberg.exceptions.NoSuchTableException",
        "org.apache.iceberg.exceptions.NoSuchNamespaceException",
        "org.apache.iceberg.exceptions.BadRequestException",
        "org.apache.iceberg.exceptions.ForbiddenException",
        "org.apache.spark.sql.AnalysisException",
        "org.apache.spark.sql.catalyst.parser.ParseException",
        "python:ValueError",
        "python:KeyError",
        "python:TypeError",
        "python:NotImplementedError",
        "python:AnalysisException",
        "python:ParseException",
        "python:IllegalArgumentException",
    }
)

# Iceberg reports a commit that conflicts with a concurrent one as a ValidationException too
# (MergingSnapshotProducer, ManifestFilterManager): those messages are conflicts, and a retry plans anew
_CONFLICT = re.compile(
    r"conflicting|concurrently|Cannot commit, (found new|missing)|Missing required files to delete|"
    r"Cannot determine history"
)


# a commit that lost a race: a writer committed meanwhile. Waiting longer does not make winning likelier
# (the writer keeps its pace), so these retry after the base back-off; other failures back off further
# each time, as a sign of load or an outage
CONFLICTS = frozenset({"org.apache.iceberg.exceptions.CommitFailedException"})


# an optimizing task names its files as planned on one snapshot: when the table changed so that they cannot
# be committed (a writer deleted rows of a file being rewritten), running the same task again fails the same
# way. The process ends, and the table is evaluated and planned again on its new snapshot
STALE_PLAN = frozenset({"python:StalePlan", "python:PlanMismatch"})


def classify(chain: Sequence[tuple[str, str]]) -> FailureKind:
    """What kind of failure this cause chain is. A stale plan is final; a conflict anywhere in the chain makes it
    a conflict; else an I/O failure anywhere makes it transient; else a known deterministic refusal anywhere
    makes it final; a failure of a kind not known here is transient (the cautious choice: retries are bounded)."""
    names = [name for name, _ in chain]
    if any(name in STALE_PLAN for name in names):
        return FailureKind.FINAL
    for name, message in chain:
        if name in CONFLICTS or (
            name == "org.apache.iceberg.exceptions.ValidationException" and _CONFLICT.search(message or "")
        ):
            return FailureKind.CONFLICT
    if any(name in RETRYABLE for name in names):
        return FailureKind.TRANSIENT
    return FailureKind.FINAL if any(name in DETERMINISTIC for name in names) else FailureKind.TRANSIENT


def is_retryable(chain: Sequence[tuple[str, str]]) -> bool:
    """Whether a failure with this cause chain may pass on a retry."""
    return classify(chain) is not FailureKind.FINAL
