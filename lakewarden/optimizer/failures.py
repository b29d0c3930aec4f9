"""What went wrong in a task, as the server is told: a one-line message, and whether a retry may pass.

A failure inside the JVM reaches Python as a py4j `Py4JJavaError` (a call on an Iceberg action) or as
one of PySpark's captured exceptions (`spark.sql`); either way its Java cause chain is walked, so that
an Iceberg ValidationException three causes deep is seen as such. The rules are in domain/failures.py.
"""

from __future__ import annotations

import re
from typing import Any

from lakewarden.domain.failures import SILENT_STORE, classify, diagnose
from lakewarden.protocol.messages import FailureDiagnosis, FailureKind

MAX_MESSAGE = 4000
_LOCATION = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s:;,)]+")  # s3a://bucket/key, file:/… is a path, hdfs://…
MAX_CAUSES = 20


def cause_chain(exc: BaseException) -> list[tuple[str, str]]:
    """(class, message) of the exception and its causes, outermost first; Java throwables by their JVM
    class name, Python exceptions as `python:<name>` (with their base classes, so an OSError subclass
    counts as an OSError)."""
    chain: list[tuple[str, str]] = []
    seen: set[int] = set()  # a Java throwable reached twice (py4j's error and PySpark's wrapper of it) counts once
    current: BaseException | None = exc
    while current is not None and len(chain) < MAX_CAUSES:
        java = _java_throwable(current)
        if java is not None:
            chain += _java_chain(java, seen)
        for klass in type(current).__mro__:
            if klass not in (BaseException, Exception, object):
                chain.append((f"python:{klass.__name__}", str(current)))
        current = current.__cause__ or current.__context__
    return chain


def _java_throwable(exc: BaseException) -> Any:
    """The Java throwable behind a py4j or PySpark exception, if any."""
    java = getattr(exc, "java_exception", None)  # py4j.protocol.Py4JJavaError
    if java is None:
        java = getattr(exc, "_origin", None)  # pyspark.errors.exceptions.captured.CapturedException
    return java


def _java_chain(throwable: Any, seen: set[int]) -> list[tuple[str, str]]:
    chain: list[tuple[str, str]] = []
    try:
        while throwable is not None and len(chain) < MAX_CAUSES:
            identity = int(throwable.hashCode())  # Throwable keeps Object's identity hash
            if identity in seen:
                break
            seen.add(identity)
            chain.append((str(throwable.getClass().getName()), str(throwable.getMessage() or "")))
            throwable = throwable.getCause()
    except Exception:  # the JVM is gone: what was read so far is all there is
        pass
    return chain


def describe_failure(exc: BaseException) -> tuple[str, FailureKind]:
    """The message the server records (the innermost Java cause's, which says what Iceberg refused, led
    by the outer exception's type) and the kind of failure (whether and when a retry may pass)."""
    chain = cause_chain(exc)
    java = [(name, message) for name, message in chain if not name.startswith("python:")]
    silent = next((message for name, message in java if name == SILENT_STORE), None)
    if silent is not None:  # its own message names the store, its endpoint and the timeout; its causes do not
        return f"{silent} (last: {java[-1][0].rsplit('.', 1)[-1]}: {java[-1][1]})"[:MAX_MESSAGE], classify(chain)
    if java:
        name, message = java[-1]
        text = f"{name.rsplit('.', 1)[-1]}: {message}"
        if len(java) > 1:
            text = f"{java[0][0].rsplit('.', 1)[-1]} caused by {text}"
        # a store's own error (an S3 403) names no object: the outer one that does says where it happened
        where = next((found.group(0) for _, m in java if (found := _LOCATION.search(m or ""))), None)
        if where is not None and where not in message:
            text += f" (at {where})"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text[:MAX_MESSAGE], classify(chain)


def diagnose_failure(exc: BaseException) -> FailureDiagnosis:
    """The failure's class, its root cause line and, for the common ones, a hint (domain/failures.diagnose)."""
    return FailureDiagnosis(**diagnose(cause_chain(exc)))
