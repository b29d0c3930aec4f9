"""Row-level writes a client planned and has not committed yet, per table: a Spark DELETE, UPDATE or MERGE
scans the `_file` and `_pos` metadata columns and reports that scan before it writes; its commit, which names
its application, ends the flight. lakewarden plans no rewrite of a table while a write is in flight there, and
its commits wait for the flights (TaskDispatcher), for at most a hold learned from the table's recent writes."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table.update import AddSnapshotUpdate

from lakewarden.domain.retention import OWN_COMMIT

TableKey = tuple[str, str, str]  # catalog, namespace (levels joined by 0x1F), table
# Iceberg's reserved field ids of the `_file` and `_pos` metadata columns: a row-level operation's scan reads them
ROW_LEVEL_COLUMNS = frozenset({2147483646, 2147483645})
APP_ID = "app-id"  # Iceberg's EnvironmentContext key, in a scan report's metadata and a snapshot's summary
MAX_HOLD_SECONDS = 20.0  # under the optimizer client's HTTP timeout: the grant it holds back answers first
MIN_HOLD_SECONDS = 2.0
# a pending table is planned beside writes in flight once it waited this long: a job that writes without a
# pause would otherwise keep it waiting until the job ends. Short, because a rewrite that races a write loses
# only the file groups the write touched (the others commit)
MAX_DEFERRAL_SECONDS = 15.0
_KEPT_DURATIONS = 20


def own_snapshot(updates: Iterable[Any]) -> bool:
    """Whether a commit's updates add a snapshot of lakewarden's own (its summary names the process)."""
    return any(
        isinstance(u, AddSnapshotUpdate)
        and u.snapshot.summary is not None
        and OWN_COMMIT in u.snapshot.summary.additional_properties
        for u in updates
    )


def plans_a_write(projected_field_ids: Iterable[int]) -> bool:
    """Whether a scan with this projection is the scan of a row-level write."""
    return not ROW_LEVEL_COLUMNS.isdisjoint(projected_field_ids)


@dataclass
class _Table:
    flights: dict[str, float] = field(default_factory=dict)  # application -> when its write was planned
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=_KEPT_DURATIONS))


class WritesInFlight:
    """Thread-safe; one per server node (a scan report and the commit grant it holds back may reach different
    nodes of several: there a flight holds only the node that saw it)."""

    def __init__(
        self,
        max_hold: float = MAX_HOLD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_deferral: float = MAX_DEFERRAL_SECONDS,
    ) -> None:
        self.max_hold = max_hold
        self.max_deferral = max_deferral
        self._clock = clock
        self._tables: dict[TableKey, _Table] = {}
        self._changed = threading.Condition()

    def planned(self, table: TableKey, metadata: Mapping[str, str]) -> None:
        """A row-level write's scan was reported (its report's metadata names its application)."""
        app = metadata.get(APP_ID) or "unknown"
        with self._changed:
            self._tables.setdefault(table, _Table()).flights[app] = self._clock()

    def committed(self, table: TableKey, summary: Mapping[str, str]) -> None:
        """A client's snapshot landed on the table: its application's write, if one was in flight, is done."""
        app = summary.get(APP_ID)
        with self._changed:
            known = self._tables.get(table)
            started = known.flights.pop(app, None) if known is not None and app is not None else None
            if known is not None and started is not None:
                known.durations.append(self._clock() - started)
                self._changed.notify_all()

    def landed(self, table: TableKey, updates: Iterable[Any]) -> None:
        """A commit's updates landed on the table: the snapshots of clients (not lakewarden's own) end their
        applications' writes."""
        for update in updates:
            summary = update.snapshot.summary if isinstance(update, AddSnapshotUpdate) else None
            if summary is not None and OWN_COMMIT not in summary.additional_properties:
                self.committed(table, summary.additional_properties)

    def hold(self, table: TableKey) -> float:
        """How long a write planned on the table may be waited for: twice the longest of its recent writes,
        bounded; the bound itself while none is known."""
        with self._changed:
            known = self._tables.get(table)
            if known is None or not known.durations:
                return self.max_hold
            return min(self.max_hold, max(MIN_HOLD_SECONDS, 2 * max(known.durations)))

    def in_flight(self, table: TableKey) -> list[str]:
        """The applications whose writes to the table are in flight (within their hold)."""
        hold = self.hold(table)
        now = self._clock()
        with self._changed:
            known = self._tables.get(table)
            if known is None:
                return []
            for app in [a for a, started in known.flights.items() if now - started > hold]:
                del known.flights[app]
            return sorted(known.flights)

    def wait_clear(self, table: TableKey, timeout: float) -> bool:
        """Wait, up to `timeout` seconds, until no write is in flight on the table; whether none is."""
        deadline = self._clock() + timeout
        while True:
            flying = self.in_flight(table)
            left = deadline - self._clock()
            if not flying or left <= 0:
                return not flying
            with self._changed:
                self._changed.wait(min(left, 0.5))
