"""Background loop services: one `run_once()` called on an interval from a daemon thread.

A pass that raises is logged and the loop goes on; a pass that overruns its interval is
warned about; `stop()` interrupts the sleep at once; `wake()` runs the next pass now.
Tests call `run_once()` directly instead of sleeping.

Each service counts the CPU time it spends (`cpu_seconds`, exported as
`lakewarden_service_cpu_seconds_total`): its passes, and the work its thread pools or other threads do for it
inside `charged()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


class LoopService:
    name = "loop"

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_seconds = 0.0
        self._cpu_lock = threading.Lock()

    @contextmanager
    def charged(self) -> Iterator[None]:
        """Counts the CPU time the calling thread spends in the block as this service's."""
        started = time.thread_time()
        try:
            yield
        finally:
            spent = time.thread_time() - started
            with self._cpu_lock:
                self.cpu_seconds += spent

    def run_once(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"lakewarden-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%s did not stop within %.0fs", self.name, timeout)
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def woken(self) -> bool:
        """Whether `wake()` was called since the last pass began or the last look (nothing is consumed)."""
        return self._wake.is_set()

    def take_wake(self) -> bool:
        """Whether `wake()` was called since the last pass began or the last look, consuming it: a pass that
        looks for what woke it handles that now instead of in the next pass."""
        if not self._wake.is_set():
            return False
        self._wake.clear()
        return True

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with self.charged():
                    self.run_once()
            except Exception:
                log.exception("%s pass failed; continuing", self.name)
            elapsed = time.monotonic() - started
            if elapsed > self.interval_seconds:
                log.warning(
                    "%s pass took %.1fs, longer than its %.1fs interval", self.name, elapsed, self.interval_seconds
                )
            self._wake.wait(max(0.0, self.interval_seconds - elapsed))
            self._wake.clear()


class WakeSignal:
    """A signal that something may be ready: `notify()` from any thread wakes every `wait()` at once.

    Built before the services it connects, so that one can be handed to the other at construction
    (the evaluator notifies when a table turns pending; the dispatcher's long polls wait on it)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()

    def notify(self) -> None:
        with self._condition:
            self._condition.notify_all()

    def wait(self, timeout: float) -> None:
        with self._condition:
            self._condition.wait(timeout)
