"""Which task failures are retried: the rules on plain values, then on real exceptions from the JVM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakewarden.domain.failures import classify, diagnose, is_retryable
from lakewarden.optimizer.failures import cause_chain, describe_failure, diagnose_failure
from lakewarden.protocol.messages import FailureKind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VALIDATION = "org.apache.iceberg.exceptions.ValidationException"
S3A = "org.apache.hadoop.fs.s3a"


CONFLICT, TRANSIENT, FINAL = FailureKind.CONFLICT, FailureKind.TRANSIENT, FailureKind.FINAL


@pytest.mark.parametrize(
    ("chain", "kind"),
    [
        ([(VALIDATION, "Cannot expire snapshots: GC is disabled (deleting files may corrupt other tables)")], FINAL),
        ([("java.lang.IllegalArgumentException", "Cannot remove orphan files with an interval less than 24 h")], FINAL),
        ([("org.apache.iceberg.exceptions.NoSuchTableException", "Table does not exist: db.t")], FINAL),
        ([("python:ValueError", "this optimizer does not know the action 'vacuum'")], FINAL),
        # a commit that lost a race: a retry plans on the new state, soon
        (
            [("org.apache.iceberg.exceptions.CommitFailedException", "Requirement failed: branch main changed")],
            CONFLICT,
        ),
        ([(VALIDATION, "Cannot commit, found new delete for replaced data file: GenericDataFile{…}")], CONFLICT),
        (
            [(VALIDATION, "Cannot commit, found new position delete for replaced data file: GenericDataFile{…}")],
            CONFLICT,
        ),
        ([(VALIDATION, "Found conflicting files that can contain records matching true: [s3://…]")], CONFLICT),
        ([(VALIDATION, "Missing required files to delete: /w/db/t/data/a.parquet")], CONFLICT),
        ([("java.lang.RuntimeException", "x"), (VALIDATION, "Found concurrently added DV for s3://…")], CONFLICT),
        # the state of the commit is not known: not a lost race, retried after a growing back-off
        ([("org.apache.iceberg.exceptions.CommitStateUnknownException", "Service unavailable")], TRANSIENT),
        # storage, network, executors
        ([("java.lang.RuntimeException", "x"), ("java.io.IOException", "No space left on device")], TRANSIENT),
        (
            [("org.apache.spark.SparkException", "Job aborted"), ("java.net.SocketTimeoutException", "timed out")],
            TRANSIENT,
        ),
        ([("python:OSError", "[Errno 28] No space left on device")], TRANSIENT),
        # a SparkException is judged by what it wraps
        ([("org.apache.spark.SparkException", "Job aborted"), ("java.lang.IllegalArgumentException", "bad")], FINAL),
        ([("org.apache.spark.SparkException", "Job aborted due to stage failure: executor lost")], TRANSIENT),
        # storage that refuses the task is final, whatever wraps it; throttling and 5xx are retried
        (
            [
                ("org.apache.iceberg.exceptions.RuntimeIOException", "Failed to open"),
                ("java.nio.file.AccessDeniedException", "s3a://lake/wh/t/x.parquet: getFileStatus: 403 Forbidden"),
            ],
            FINAL,
        ),
        ([("java.io.UncheckedIOException", "x"), (f"{S3A}.UnknownStoreException", "s3a://nobucket/: Bucket")], FINAL),
        ([(f"{S3A}.AWSClientIOException", "put on s3a://lake/x"), ("java.net.ConnectException", "refused")], FINAL),
        ([("java.io.UncheckedIOException", "x"), ("java.net.UnknownHostException", "s3.nowhere.invalid")], FINAL),
        ([(f"{S3A}.AWSServiceThrottledException", "503 SlowDown"), ("java.io.IOException", "x")], TRANSIENT),
        ([(f"{S3A}.AWSStatus500Exception", "s3a://lake/x: 500 InternalError")], TRANSIENT),
        # what is not known is retried: retries are bounded
        ([("java.lang.RuntimeException", "something else")], TRANSIENT),
        ([], TRANSIENT),
    ],
)
def test_failure_kinds(chain: list[tuple[str, str]], kind: FailureKind) -> None:
    assert classify(chain) is kind
    assert is_retryable(chain) is (kind is not FINAL)


def test_python_exceptions_are_described_by_their_classes() -> None:
    try:
        try:
            raise FileNotFoundError("/w/db/t/metadata/v3.metadata.json")
        except OSError as exc:
            raise RuntimeError("reading the table failed") from exc
    except RuntimeError as exc:
        chain = cause_chain(exc)
        assert ("python:FileNotFoundError", "/w/db/t/metadata/v3.metadata.json") in chain
        assert ("python:OSError", "/w/db/t/metadata/v3.metadata.json") in chain  # a subclass counts as its base
        assert describe_failure(exc) == ("RuntimeError: reading the table failed", TRANSIENT)
    assert describe_failure(KeyError("snapshot_id")) == ("KeyError: 'snapshot_id'", FINAL)


def _raised(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.spark
def test_real_jvm_failures(spark: SparkSession, tmp_path: Path) -> None:
    """Exceptions as py4j and PySpark hand them over: the Java cause chain decides, and the message is
    the cause Iceberg or the JVM gave."""
    from lakewarden.optimizer.executor import execute_task
    from tests.helpers import assignment, spark_sql_catalog

    jvm: Any = spark._jvm
    missing = _raised(lambda: jvm.java.io.FileInputStream(str(tmp_path / "nowhere" / "x.parquet")))
    message, kind = describe_failure(missing)
    assert kind is TRANSIENT and message.startswith("FileNotFoundException: ") and "nowhere/x.parquet" in message
    diagnosis = diagnose_failure(missing)
    assert diagnosis.error_class == "java.io.FileNotFoundException"
    assert diagnosis.root_cause is not None and diagnosis.root_cause.startswith("FileNotFoundException: ")
    assert diagnosis.hint is not None and diagnosis.hint.startswith("A file the task read is gone")

    bad_number = _raised(lambda: jvm.java.lang.Long.parseLong("twelve"))
    assert describe_failure(bad_number) == ('NumberFormatException: For input string: "twelve"', FINAL)

    analysis = _raised(lambda: spark.sql("SELECT * FROM no_such_catalog.db.no_such_table"))
    assert describe_failure(analysis)[1] is FINAL

    # Iceberg refusing an action because of a table setting: final, with Iceberg's reason
    spec = spark_sql_catalog(spark, tmp_path, "failcat")
    spark.sql("CREATE TABLE failcat.db.t (id BIGINT) USING iceberg TBLPROPERTIES ('gc.enabled'='false')")
    spark.sql("INSERT INTO failcat.db.t VALUES (1)")
    work = {"action": "expire-snapshots", "table": "db.t", "keep_duration_ms": 0, "min_count": 1}
    refused = _raised(lambda: execute_task(spark, assignment(spec, work), "test"))
    message, kind = describe_failure(refused)
    assert kind is FINAL
    assert message == (
        "ValidationException: Cannot expire snapshots: GC is disabled (deleting files may corrupt other tables)"
    )


IOE = "org.apache.iceberg.exceptions"


@pytest.mark.parametrize(
    ("chain", "root_cause", "hint"),
    [
        (
            [(f"{IOE}.CommitFailedException", "Cannot commit: stale")],
            "CommitFailedException: Cannot commit: stale",
            "A writer",
        ),
        (
            [
                ("org.apache.spark.SparkException", "Job aborted"),
                (f"{IOE}.NotFoundException", "File does not exist: /x"),
            ],
            "NotFoundException: File does not exist: /x",
            "A file the task read is gone",
        ),
        ([("java.lang.OutOfMemoryError", "Java heap space")], "OutOfMemoryError: Java heap space", "Spark ran out"),
        (  # an executor lost to memory: only its message says so
            [("org.apache.spark.SparkException", "Container killed by YARN for exceeding memory limits")],
            "SparkException: Container killed by YARN for exceeding memory limits",
            "Spark ran out of memory",
        ),
        (  # a Python exception is listed with its base classes: its own class is named
            [("python:StalePlan", "snapshot 7 is gone"), ("python:RuntimeError", "snapshot 7 is gone")],
            "StalePlan: snapshot 7 is gone",
            "The table changed under the plan",
        ),
        (
            [("java.lang.IllegalStateException", "something odd\n\tat Foo.bar")],
            "IllegalStateException: something odd",
            None,
        ),
    ],
)
def test_failures_are_diagnosed(chain: list[tuple[str, str]], root_cause: str, hint: str | None) -> None:
    diagnosis = diagnose(chain)
    assert diagnosis["root_cause"] == root_cause
    assert diagnosis["error_class"] is not None and diagnosis["error_class"].endswith(root_cause.split(":")[0])
    if hint is None:
        assert diagnosis["hint"] is None
    else:
        assert (diagnosis["hint"] or "").startswith(hint)
    assert diagnose([]) == {"error_class": None, "root_cause": None, "hint": None}
