"""CPU-seconds of processes by kind of thread, from the kernel's accounting of each thread (/proc/<pid>/task).

A JVM's threads are named for what they do (the JIT's compiler threads, the garbage collector, Spark's task
threads, Iceberg's worker pool), so a difference between two JVMs doing the same work can be placed: in the work,
in compiling it, or in collecting after it. A Python process counts whole, as `python`. And because a JVM goes on
compiling what it just ran after the call that ran it has returned, `settle()` waits until the processes idle, so
that each side's count holds the whole cost of its work.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import TICK, stat_cpu_seconds, tree_cpu

# thread names as the kernel keeps them (15 characters), by prefix, most specific first
KINDS = (
    ("C2 CompilerThre", "jit_c2"),
    ("C1 CompilerThre", "jit_c1"),
    ("iceberg-worker", "iceberg_worker"),
    ("Executor task", "spark_tasks"),
    ("GC Thread", "gc"),
    ("G1 ", "gc"),
    ("VM Thread", "gc"),  # the safepoint operations, the collector's pauses among them
)


def _kind(thread: str) -> str:
    for prefix, kind in KINDS:
        if thread.startswith(prefix):
            return kind
    return re.sub(r"[-#\s]*\d+$", "", thread) or "other"  # a pool's threads by their pool: "Thread-12" as "Thread"


def by_thread(pids: list[int]) -> dict[str, float]:
    """CPU-seconds so far of these processes, by kind of thread (a process gone meanwhile counts nothing)."""
    found: dict[str, float] = defaultdict(float)
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            if (proc / "comm").read_text().strip() != "java":
                found["python"] += stat_cpu_seconds(proc / "stat")
                continue
            live = 0.0
            for task in (proc / "task").iterdir():
                seconds = stat_cpu_seconds(task / "stat")
                found[_kind((task / "comm").read_text().strip())] += seconds
                live += seconds
            # the process's own count keeps what its ended threads spent (a pool shut down after a task)
            found["ended_threads"] += max(0.0, stat_cpu_seconds(proc / "stat") - live)
        except OSError:
            continue
    return found


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU-seconds by kind of thread between two readings, rounded. A thread that ended in between leaves its kind's
    count and enters `ended_threads` with all it ever spent: what its kind lost is taken off `ended_threads`, so the
    kinds add up to what the processes spent between the readings."""
    differences = {kind: after.get(kind, 0.0) - before.get(kind, 0.0) for kind in sorted({*before, *after})}
    lost = sum(seconds for seconds in differences.values() if seconds < 0)
    differences["ended_threads"] = differences.get("ended_threads", 0.0) + lost
    return {kind: round(seconds, 3) for kind, seconds in differences.items() if seconds > 0}


def settle(pids: list[int], interval: float = 0.5, quiet_ticks: int = 1, limit: float = 15.0) -> float:
    """Wait until the processes use at most `quiet_ticks` of CPU in each of two intervals in a row (what they
    started, the JIT's queue among it, is done); returns the seconds waited."""
    started = time.monotonic()
    quiet = 0
    last = tree_cpu(pids)  # the processes' own counts: every thread, ended ones too
    while quiet < 2 and time.monotonic() - started < limit:
        time.sleep(interval)
        now = tree_cpu(pids)
        quiet = quiet + 1 if now - last <= quiet_ticks / TICK + 1e-9 else 0
        last = now
    return round(time.monotonic() - started, 2)


def settled_cost(waited: float, before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """A run's CPU-seconds from its start until its processes settled, in all and by kind of thread."""
    threads = spent(before, after)
    return {"cpu_settled_s": round(sum(threads.values()), 2), "settle_s": waited, "threads": threads}
