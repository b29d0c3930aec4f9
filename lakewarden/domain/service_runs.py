"""What lakewarden's last runs of another format's table services found (Hudi's, Paimon's): the services the
engine itself found nothing to do for, and where the table stood then. The format's rules and the engine's can
disagree; the engine's decide, so such a service is not asked again until the table moves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# the table's last successful processes whose idle services count: each service can have been run by one of them
LAST_RUNS = 4


@dataclass(frozen=True)
class LastRun:
    """The services found idle, and the table's tail then: where its timeline stood (a Hudi table's
    domain/hudi.timeline_tail, a Paimon table's latest snapshot)."""

    idle_services: frozenset[str] = frozenset()
    timeline_tail: str = ""

    @staticmethod
    def of(summaries: Sequence[Mapping[str, Any] | None]) -> LastRun:
        """From the summaries of the table's last processes, newest first (each its tasks' results merged): the
        services found idle by any of them on the tail the newest one left."""
        known = [s for s in summaries if s and s.get("timeline_tail")]
        if not known:
            return LastRun()
        tail = str(known[0]["timeline_tail"])
        idle = {service for s in known if s["timeline_tail"] == tail for service in s.get("idle_services") or ()}
        return LastRun(frozenset(idle), tail)

    def idle(self, tail: str) -> frozenset[str]:
        """The services not to schedule again on a table whose tail is `tail` now: found idle at the same tail."""
        return self.idle_services if self.timeline_tail and tail == self.timeline_tail else frozenset()
