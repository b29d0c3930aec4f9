"""Which task failures may pass on a retry, and which never will.

A task is retried only when running it again can change the outcome (a lost commit race, storage or the network
failing for a moment, a lost executor). A refusal that follows from the task's input or the table's settings fails
the same way every time, so the process fails at once with that reason instead of repeating it. A failure is its
chain of causes as (class, message) pairs, built by optimizer/failures.py; the rules here are plain values."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lakewarden.protocol.messages import FailureKind

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

# storage that refuses the task for good, whatever the retry: keys that are wrong, expired or not allowed (a 403,
# a local file's permissions), a bucket that does not exist, a request the store rejects as malformed or sends to
# another region, an endpoint whose name does not resolve. The client has already retried what it retries
STORE_REFUSAL = "io.lakewarden.iceberg.StoreRefusal"  # S3FileIO's refusals (lakewarden/spark/java/…)
STORAGE_REFUSED = frozenset(
    {
        STORE_REFUSAL,
        "java.nio.file.AccessDeniedException",
        "org.apache.hadoop.fs.s3a.UnknownStoreException",
        "org.apache.hadoop.fs.s3a.AWSBadRequestException",
        "org.apache.hadoop.fs.s3a.AWSRedirectException",
        "java.net.UnknownHostException",
    }
)
# a client's failure to reach its endpoint at all, after its own retries: the endpoint is wrong or down for long
# (S3A's; S3FileIO's SDK client). Each pair is (the client's failure, the cause beneath it)
UNREACHABLE_STORE = (
    ("org.apache.hadoop.fs.s3a.AWSClientIOException", "java.net.ConnectException"),
    ("software.amazon.awssdk.core.exception.SdkClientException", "java.net.ConnectException"),
)
# a store silent for the catalog's whole storage timeout (lakewarden/spark/java/…/StoreSilence.java)
SILENT_STORE = "io.lakewarden.iceberg.StoreSilence$StoreSilentError"

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
    """What kind of failure this cause chain is. A stale plan or storage that refuses the task is final; a
    conflict anywhere in the chain makes it a conflict; else an I/O failure anywhere makes it transient (a store's
    throttling and 5xx answers among them); else a known deterministic refusal anywhere makes it final; a failure
    of a kind not known here is transient (the cautious choice: retries are bounded)."""
    names = [name for name, _ in chain]
    if any(name in STALE_PLAN or name in STORAGE_REFUSED for name in names):
        return FailureKind.FINAL
    unreachable = any(all(name in names for name in pair) for pair in UNREACHABLE_STORE)
    if unreachable or SILENT_STORE in names:
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


MAX_ROOT_CAUSE = 1000
# what to do about the common failures, by the classes (and messages) in the chain; the first rule that
# matches gives the hint
_MEMORY = re.compile(r"OutOfMemory|Java heap space|GC overhead limit|Container killed .* memory|exceeding memory")
_HINTS: tuple[tuple[frozenset[str], re.Pattern[str] | None, str], ...] = (
    (
        STALE_PLAN,
        None,
        "The table changed under the plan (a writer rewrote or deleted the planned files): nothing was committed; "
        "the table is evaluated and planned again on its new snapshot.",
    ),
    (
        frozenset({"java.lang.OutOfMemoryError"}),
        _MEMORY,
        "Spark ran out of memory: give the group's optimizers more (spark.driver.memory / spark.executor.memory "
        "in its properties) or plan smaller tasks (self-optimizing.max-task-size-bytes).",
    ),
    (
        frozenset({"org.apache.iceberg.exceptions.NotFoundException", "java.io.FileNotFoundException"})
        | frozenset({"java.nio.file.NoSuchFileException"}),
        None,
        "A file the task read is gone: something else removed it (expire-snapshots or orphan cleanup run by "
        "another tool, or a writer's own rewrite). The retry plans on the table's current state; if it repeats, "
        "check what else deletes files of this table.",
    ),
    (
        frozenset({"java.nio.file.AccessDeniedException", "org.apache.iceberg.exceptions.ForbiddenException"})
        | frozenset({"org.apache.iceberg.exceptions.NotAuthorizedException"}),
        re.compile(r"the store refused the request \((401|403) "),  # StoreRefusal's (S3FileIO's)
        "Permission denied: the optimizer's credentials cannot read or write the table's storage or catalog "
        "(for S3: the catalog's keys or role, or the credentials it vends, are wrong, expired or not allowed "
        "the table's prefix). Not retried: fix the catalog's storage settings.",
    ),
    (
        frozenset({"org.apache.hadoop.fs.s3a.UnknownStoreException"}),
        re.compile(r"the store refused the request \(404 the bucket does not exist"),
        "The bucket does not exist (or not in this endpoint and region): check the catalog's warehouse and "
        "s3.endpoint / s3.region. Not retried.",
    ),
    (
        frozenset({"java.net.UnknownHostException", "org.apache.hadoop.fs.s3a.AWSRedirectException"})
        | frozenset({"org.apache.hadoop.fs.s3a.AWSBadRequestException"}),
        re.compile(r"the store refused the request \((301|307|400) "),
        "The storage's endpoint is wrong (its name does not resolve, or it belongs to another region): check the "
        "catalog's s3.endpoint and s3.region. Not retried.",
    ),
    (
        frozenset({SILENT_STORE}),
        None,
        "The storage's endpoint did not answer for the catalog's lakewarden.storage.timeout-ms: check the "
        "catalog's s3.endpoint and that the optimizers reach it. Not retried.",
    ),
    (
        frozenset({UNREACHABLE_STORE[0][0]}),
        re.compile(r"Unable to execute HTTP request: Connect to \S+ .*failed"),  # the SDK's (S3FileIO's)
        "The storage's endpoint did not answer, after the client's own retries: check the catalog's s3.endpoint "
        "and that the optimizers reach it. Not retried.",
    ),
    (
        frozenset({"java.net.ConnectException", "java.net.SocketTimeoutException", "python:Py4JNetworkError"})
        | frozenset({"org.apache.iceberg.exceptions.ServiceUnavailableException", "python:ConnectionError"}),
        None,
        "Storage, the catalog or the Spark JVM could not be reached: retried with back-off; if it repeats, "
        "check the optimizer's network and its Spark driver.",
    ),
    (
        frozenset({"org.apache.iceberg.exceptions.NoSuchTableException"}),
        None,
        "The table is gone from its catalog (dropped or renamed): the explorer disposes of it at its next listing.",
    ),
)
_CONFLICT_HINT = (
    "A writer committed a conflicting change while the task ran: retried after the base back-off. If it repeats, "
    "tasks run longer than the gap between the writer's commits: plan smaller tasks "
    "(self-optimizing.max-task-size-bytes) or more threads, so each finishes sooner."
)


def diagnose(chain: Sequence[tuple[str, str]]) -> dict[str, str | None]:
    """The failure's class (its innermost cause's), its root cause as one line, and a hint for the common ones."""
    if not chain:
        return {"error_class": None, "root_cause": None, "hint": None}
    java = [(name, message) for name, message in chain if not name.startswith("python:")]
    if java:
        name, message = java[-1]
    else:  # a Python exception is listed with its base classes after it: the innermost one's own class
        at = len(chain) - 1
        while at > 0 and chain[at - 1][1] == chain[at][1]:
            at -= 1
        name, message = chain[at]
    name = name.removeprefix("python:")
    line = next((part.strip() for part in (message or "").splitlines() if part.strip()), "")
    hint = _CONFLICT_HINT if classify(chain) is FailureKind.CONFLICT else None
    if hint is None:
        for names, pattern, text in _HINTS:
            named = any(n in names for n, _ in chain)
            if named or (pattern is not None and any(pattern.search(m or "") for _, m in chain)):
                hint = text
                break
    root_cause = f"{name.rsplit('.', 1)[-1]}: {line}"[:MAX_ROOT_CAUSE]
    return {"error_class": name, "root_cause": root_cause, "hint": hint}
