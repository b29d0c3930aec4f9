"""What an optimizer's tasks cost in CPU, wherever the work ran.

Spark's task metrics see executors only, but an optimizer also works on its driver (planning, manifests, commits)
and with a `local` master its executors are threads of the same JVM. So each attempt is charged the CPU of the
optimizer's own processes while it ran, shared equally between attempts running side by side; time with no
attempt running is nobody's. A cluster's executors add Spark's figures."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU of the processes (Linux's /proc; the calling process alone where that is missing)."""
    total = 0.0
    for pid in pids:
        try:
            stat = open(f"/proc/{pid}/stat", "rb").read()  # noqa: SIM115 - one read of a tiny file
        except OSError:
            if pid == os.getpid():
                total += sum(os.times()[:2])
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()  # after the command name, which may hold spaces
        total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: fields 14 and 15 of stat(5)
    return total


class CpuShares:
    """Shares a clock of CPU-seconds among the attempts running while it advanced."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._shares: dict[Hashable, float] = {}

    def _advance(self) -> None:
        now = self.clock()
        spent, self._last = max(0.0, now - self._last), now
        if self._shares:
            each = spent / len(self._shares)
            for key in self._shares:
                self._shares[key] += each

    def start(self, key: Hashable) -> None:
        with self._lock:
            self._advance()
            self._shares[key] = 0.0

    def stop(self, key: Hashable) -> float:
        """The attempt's share since it started, in CPU-seconds (0 for one never started)."""
        with self._lock:
            self._advance()
            return self._shares.pop(key, 0.0)
