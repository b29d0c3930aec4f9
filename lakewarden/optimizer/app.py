"""`lakewarden optimizer`: a PySpark application whose N threads pull tasks from the server and run them.

One SparkSession (local[N] by default, any master via --spark-master or spark-submit), a heartbeat
thread, and N worker threads each looping poll -> ack -> execute -> complete. SIGTERM or SIGINT
stops polling; tasks already running are finished and reported before the process exits, for at most the drain
timeout: past it their Spark jobs are canceled and the optimizer unregisters, which hands them out again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

from lakewarden.optimizer.client import OptimizerClient, PollLater, ProtocolError
from lakewarden.optimizer.cpu import CpuShares, process_cpu_seconds
from lakewarden.optimizer.failures import describe_failure, diagnose_failure
from lakewarden.optimizer.rewrite import TaskRevoked
from lakewarden.protocol.messages import (
    Assignment,
    FailureDiagnosis,
    FailureKind,
    SparkApplication,
    SparkUsage,
    TaskKey,
)
from lakewarden.protocol.results import TaskResult
from lakewarden.spark.session import submitted

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 10.0
# The optimizer's JVM runs batches nobody waits on between their steps, so it takes the throughput collector:
# G1's barriers and concurrent work cost a rewrite's many short-lived metadata objects more CPU, and its short
# pauses buy an optimizer nothing (its heartbeats come from Python). bench/BENCHMARKS.md has the measurements.
JAVA_OPTIONS = "-XX:+UseParallelGC"
# how long a stopping optimizer lets its running tasks finish; a task waiting on a store that stopped answering
# fails within the catalog's storage timeout, which is no longer by default
DRAIN_TIMEOUT_SECONDS = 120.0
# after its jobs are canceled, how long a task's thread gets to notice before the process leaves without it
CANCEL_GRACE_SECONDS = 5.0


class Optimizer:
    def __init__(
        self,
        server: str,
        group: str,
        parallelism: int,
        spark_master: str | None = None,
        resource_id: str | None = None,
        driver_memory: str = "2g",
        spark: Any = None,
        credential: str | None = None,
        java_options: str = JAVA_OPTIONS,
        drain_timeout: float = DRAIN_TIMEOUT_SECONDS,
        engines: tuple[str, ...] = (),
    ) -> None:
        self.client = OptimizerClient(server, credential)
        self.engines = engines  # other table formats' engines its session carries (spark/session.py)
        self.drain_timeout = drain_timeout
        self.group = group
        self.parallelism = parallelism
        # under spark-submit the master is the one submitted to; otherwise local[parallelism] unless given
        self.spark_master = spark_master or (None if submitted() else f"local[{parallelism}]")
        self.resource_id = resource_id
        self.driver_memory = driver_memory
        self.java_options = java_options
        self.stop = threading.Event()
        # SIGTERM/SIGINT only raise this plain flag; the main loop turns it into `stop`. A handler must not call
        # `Event.set`: a second signal landing inside it (a container's release, then the parent's death
        # signal) re-enters `set` on its non-reentrant lock and the process hangs for good.
        self.signalled = False
        self.token = ""
        self._token_lock = threading.Lock()
        self.completed = 0
        self.spark = spark  # an existing SparkSession to use (and leave running); None builds one
        self.heartbeat_seconds = HEARTBEAT_SECONDS  # what the server asks for when we register
        self.application: SparkApplication | None = None
        # the tasks the threads run, and those the server revoked (their process was canceled)
        self._running: dict[TaskKey, str] = {}
        self._revoked: set[TaskKey] = set()
        self._tasks_lock = threading.Lock()
        self._cpu: CpuShares | None = None  # once Spark is up (run)

    def _register(self) -> str:
        with self._token_lock:
            registered = self.client.register(
                self.group, self.parallelism, self.resource_id, socket.gethostname(), self.application, self.engines
            )
            self.token = registered.token
            self.heartbeat_seconds = registered.heartbeat_seconds
            log.info("registered with group %s", self.group)
            return self.token

    def _heartbeat(self, spark: Any) -> None:
        while not self.stop.wait(self.heartbeat_seconds):
            try:
                with self._tasks_lock:
                    running = list(self._running)
                touched = self.client.touch(self.token, running)
                for key in touched.revoked:
                    self._revoke(spark, key)
                if touched.leave:
                    log.info("the server asks this optimizer to leave: finishing running tasks")
                    self.stop.set()
            except ProtocolError as exc:
                if exc.status in (401, 404):  # the server declared us lost: start over with a new token
                    self._register()
                else:
                    log.warning("heartbeat failed: %s", exc)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)

    def _follow_spark(self, gone: Callable[[], bool], what: str, stopped: Callable[[], bool]) -> None:
        """Exits once `gone()` says this process's Spark JVM died (killed, out of memory; under spark-submit the
        JVM is the parent, otherwise PySpark's child), or `stopped()` says its SparkContext stopped while the
        optimizer was not stopping (its application killed or failed on the cluster: YARN ended it, the standalone
        master removed it). Nothing this process holds can run or commit without them: it leaves the server at once
        (which hands its tasks out again, no retry counted against them) and exits with an error, so that its
        container starts a fresh optimizer, rather than failing every task it polls."""
        while True:
            if gone():
                log.warning("the Spark JVM (%s) is gone: exiting", what)
                break
            if not self.stop.is_set() and stopped():
                log.warning("the SparkContext stopped (its application ended on the cluster): exiting")
                break
            time.sleep(1.0)
        with contextlib.suppress(Exception):
            self.client.unregister(self.token)
        os._exit(1)

    @staticmethod
    def _jvm_exited(spark: Any) -> bool:
        """Whether the Spark JVM PySpark started for this process exited (False when PySpark did not start it)."""
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        return proc is not None and proc.poll() is not None

    @staticmethod
    def _context_stopped(spark: Any) -> bool:
        """Whether the SparkContext stopped though its JVM lives (False when that cannot be asked)."""
        try:
            return bool(spark.sparkContext._jsc.sc().isStopped())
        except Exception:  # the JVM is going: _jvm_exited says so
            return False

    @classmethod
    def _jvm_exits_soon(cls, spark: Any, within: float = 2.0) -> bool:
        """Whether the Spark JVM has exited, or does within `within` seconds: a task fails on the JVM's closed
        socket a moment before the JVM's exit can be seen, and reporting that as the task's failure would count a
        retry against it (a task that really failed is reported that much later)."""
        deadline = time.monotonic() + within
        while not cls._jvm_exited(spark):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _revoke(self, spark: Any, key: TaskKey) -> None:
        """The server took the task back (its process was canceled): stop its Spark jobs; it commits nothing."""
        with self._tasks_lock:
            group = self._running.get(key)
            if group is None:
                return
            self._revoked.add(key)
        log.info("task %s.%s was revoked: canceling its Spark jobs", key.process_id, key.task_id)
        spark.sparkContext.cancelJobGroup(group)

    def _gate(self, token: str, task: Assignment, key: TaskKey) -> Callable[[], None]:
        """Asked right before the task commits: the server grants the commit unless the task was revoked."""

        def gate() -> None:
            with self._tasks_lock:
                if key in self._revoked:
                    raise TaskRevoked(f"task {key.process_id}.{key.task_id} was revoked before it committed")
            try:
                self.client.commit(token, task)
            except ProtocolError as exc:
                # 409: canceled or taken back; 401/404: the server declared this optimizer lost, and its tasks
                # went to others
                if exc.status in (401, 404, 409):
                    raise TaskRevoked(str(exc)) from exc
                raise

        return gate

    def _work(self, spark: Any, thread_id: int) -> None:
        from lakewarden.optimizer.executor import execute_task, job_group

        while not self.stop.is_set():
            token = self.token
            try:
                task = self.client.poll(token, thread_id)
            except PollLater as later:  # the server's long polls are all taken: no task now, come back later
                self.stop.wait(later.seconds)
                continue
            except Exception as exc:
                log.warning("thread %d: poll failed: %s", thread_id, exc)
                self.stop.wait(2.0)
                continue
            if task is None:
                continue
            try:
                self.client.ack(token, task)
            except Exception as exc:  # refused, or the server is away: the keeper re-plans the task
                log.warning("thread %d: ack of %s.%s failed: %s", thread_id, task.process_id, task.task_id, exc)
                continue
            log.info(
                "thread %d: running %s task %s.%s on %s",
                thread_id,
                task.type,
                task.process_id,
                task.task_id,
                task.input.table,
            )
            output: TaskResult | None = None
            error: str | None = None
            diagnosis: FailureDiagnosis | None = None
            failure = FailureKind.TRANSIENT
            key = TaskKey(process_id=task.process_id, task_id=task.task_id, attempt=task.attempt)
            with self._tasks_lock:
                self._running[key] = job_group(task, token)
            if self._cpu is not None:
                self._cpu.start(key)
            try:
                output = execute_task(spark, task, token, gate=self._gate(token, task, key))
            except Exception as exc:
                error, failure = describe_failure(exc)
                diagnosis = diagnose_failure(exc)
                log.warning(
                    "thread %d: task failed (%s): %s\n%s",
                    thread_id,
                    failure,
                    error,
                    traceback.format_exc(limit=3),
                )
            finally:
                own_cpu = self._cpu.stop(key) if self._cpu is not None else 0.0
                with self._tasks_lock:
                    self._running.pop(key, None)
                    revoked = key in self._revoked
                    self._revoked.discard(key)
            if revoked:  # the server no longer expects a report of it
                log.info("thread %d: task %s.%s stopped: it was revoked", thread_id, task.process_id, task.task_id)
                continue
            lost = error is not None and self.spark is None and self._context_stopped(spark)
            if error is not None and (lost or self._jvm_exits_soon(spark)):  # not the task's: the process exits
                log.warning(
                    "thread %d: task %s.%s not reported: Spark is gone", thread_id, task.process_id, task.task_id
                )
                return
            usage = self._usage(spark, task, token)
            if usage is not None:
                executors_elsewhere = 0 if spark.sparkContext.master.startswith("local") else usage.cpu_ms
                usage = usage.model_copy(update={"whole_cpu_ms": int(own_cpu * 1000) + executors_elsewhere})
            try:
                self.client.complete(token, task, output, error, failure, usage=usage, diagnosis=diagnosis)
                self.completed += 1
            except ProtocolError as exc:
                log.warning("thread %d: completion refused: %s", thread_id, exc)
            except Exception as exc:  # the server stayed away: the keeper will hand the task out again
                log.warning("thread %d: could not report task %s.%s: %s", thread_id, task.process_id, task.task_id, exc)

    @staticmethod
    def _usage(spark: Any, task: Assignment, token: str) -> SparkUsage | None:
        """What Spark measured of the attempt; None when it cannot be read (the report goes without it)."""
        from lakewarden.optimizer.executor import job_group
        from lakewarden.optimizer.usage import job_group_usage

        try:
            return job_group_usage(spark, job_group(task, token))
        except Exception as exc:
            log.warning("could not read the Spark usage of task %s.%s: %s", task.process_id, task.task_id, exc)
            return None

    def on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self.signalled = True  # nothing more: see `signalled`

    def run(self) -> None:
        from lakewarden.spark.session import build_spark_session

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.on_signal)
            signal.signal(signal.SIGINT, self.on_signal)
        spark = self.spark or build_spark_session(
            master=self.spark_master,
            app_name=f"lakewarden-optimizer-{self.resource_id or self.group}",
            driver_memory=self.driver_memory,
            extra_conf={"spark.scheduler.mode": "FAIR"},
            jvm_options=self.java_options,
            engines=self.engines,
        )
        sc = spark.sparkContext
        self.application = SparkApplication(application_id=sc.applicationId, master=sc.master, ui_url=sc.uiWebUrl)
        jvm: Any = sc._jvm
        pids = [os.getpid(), int(jvm.java.lang.ProcessHandle.current().pid())]
        self._cpu = CpuShares(lambda: process_cpu_seconds(pids))
        self._register()  # once Spark is up: the server records which application this optimizer is
        threads = [threading.Thread(target=self._heartbeat, args=(spark,), name="heartbeat", daemon=True)]
        if submitted():  # spark-submit's JVM is this process's parent: when it dies, so does the optimizer
            parent = os.getppid()
            watch: tuple[Callable[[], bool], str] = (lambda: os.getppid() != parent, f"the parent, pid {parent}")
        else:
            watch = (lambda: self._jvm_exited(spark), "PySpark's child")
        # a session of its own only: a caller's session (tests) is the caller's to stop
        stopped: Callable[[], bool] = (lambda: self._context_stopped(spark)) if self.spark is None else (lambda: False)
        threading.Thread(target=self._follow_spark, args=(*watch, stopped), name="spark-watch", daemon=True).start()
        threads += [
            threading.Thread(target=self._work, args=(spark, i), name=f"optimizer-{i}") for i in range(self.parallelism)
        ]
        for thread in threads:
            thread.start()
        try:
            while not self.stop.is_set() and not self.signalled:
                time.sleep(0.5)
            if self.signalled:
                log.info("stopping: finishing running tasks (for at most %.0f s)", self.drain_timeout)
        finally:
            self.stop.set()
            drained = self._drain(spark, threads[1:])
            try:
                self.client.unregister(self.token)
            except Exception as exc:  # the server may be gone; it will declare us lost
                log.info("could not unregister: %s", exc)
            self.client.close()
            if self.spark is None and drained:
                spark.stop()  # a thread still inside a JVM call could hold it: the process leaves without it
            log.info("optimizer stopped after %d task(s)", self.completed)

    def _drain(self, spark: Any, workers: list[threading.Thread]) -> bool:
        """Wait for the worker threads for at most the drain timeout; past it, cancel the Spark jobs of the tasks
        still running and give them a moment. Whether every thread ended: one that did not is stuck in a call
        Spark cannot cancel (a driver-side listing waiting on its store), and its task is left to the server,
        which hands it out again once this optimizer unregisters."""
        deadline = time.monotonic() + self.drain_timeout
        for thread in workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        running = [thread for thread in workers if thread.is_alive()]
        if not running:
            return True
        with self._tasks_lock:
            groups = dict(self._running)
            self._revoked.update(groups)  # not reported: the server hands them out again
        log.warning(
            "%d task(s) still running after the drain timeout (%.0f s): canceling them: %s",
            len(groups),
            self.drain_timeout,
            ", ".join(f"{key.process_id}.{key.task_id}" for key in groups),
        )
        for group in groups.values():
            with contextlib.suppress(Exception):
                spark.sparkContext.cancelJobGroup(group)
        grace = time.monotonic() + CANCEL_GRACE_SECONDS
        for thread in running:
            thread.join(max(0.0, grace - time.monotonic()))
        return not any(thread.is_alive() for thread in running)


def leave(code: int = 0) -> NoReturn:
    """Ends an optimizer's process after `Optimizer.run` returned: it has unregistered and stopped Spark, so
    nothing is left to release but the interpreter itself. Python's own teardown of the modules an optimizer
    loads (PySpark, pyiceberg, pyarrow) is most of the CPU an idle optimizer spends on leaving, and a group that
    follows demand pays it at every drain; the logs are flushed and the process leaves without it (its Spark JVM
    sees its stdin close and exits as before)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
