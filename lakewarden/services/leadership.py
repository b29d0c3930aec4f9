"""High availability: several server processes on one PostgreSQL system database, one of them the leader.

Every node serves the REST catalog, the API's reads, the dashboard and /metrics; the leader alone runs the loops,
hands out tasks and makes the API's changes, and followers forward those to it. Leadership is a lease row whose
epoch is the fencing token: a leader's writes are checked against it in their own transaction, so one deposed
without noticing has its late writes refused, and a node that cannot renew in time steps down by itself (a
watchdog sees to it). With `ams.ha` off there is one node, always the leader."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from lakewarden.domain.errors import NotLeader
from lakewarden.services.loop import LoopService
from lakewarden.store import leadership as store
from lakewarden.store.database import Database, utcnow

log = logging.getLogger(__name__)
FOLLOWER_LOOK_SECONDS = 1.0  # how often a follower looks whether the lease expired
VALID_SHARE = 0.8  # a leader counts on its lease for this share of it after a renewal began (clock drift)


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    url: str
    leader: bool
    started_at: str
    last_seen_at: str


class Leadership(LoopService):
    """This node's part in the election: `run_once` renews or takes the lease; `on_elected(epoch)` and
    `on_deposed()` start and stop the leader's work (called from the election thread, never concurrently)."""

    name = "leader-election"

    def __init__(
        self,
        db: Database | None,
        url: str,
        lease: timedelta,
        on_elected: Callable[[int], None],
        on_deposed: Callable[[], None],
    ) -> None:
        super().__init__(FOLLOWER_LOOK_SECONDS)
        self.db = db  # None: a single node, always the leader
        self.node_id = uuid.uuid4().hex[:16]
        self.url = url
        self.lease = lease
        self.started_at = utcnow()
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.epoch: int | None = None
        self._valid_until = 0.0  # by this node's monotonic clock: past it, it cannot know it still leads
        self._lock = threading.Lock()  # transitions: the election thread, and a write that found itself fenced

    @property
    def enabled(self) -> bool:
        return self.db is not None

    @property
    def is_leader(self) -> bool:
        return not self.enabled or self.epoch is not None

    def run_once(self) -> None:
        assert self.db is not None
        began = time.monotonic()
        try:
            with self.db.write(any_node=True) as session:
                store.announce(session, self.node_id, self.url, self.started_at)
                epoch = store.acquire_or_renew(session, self.node_id, self.epoch, self.lease)
        except Exception as exc:  # the database is away: keep leading only while the lease surely holds
            log.warning("lease renewal failed: %s", exc)
            if self.epoch is not None and time.monotonic() > self._valid_until:
                self._step_down("the lease could not be renewed in time")
            return
        if epoch is None:
            if self.epoch is not None:
                self._step_down("another node holds the lease")
            return
        # renewed or taken: the lease holds for `lease` from when this pass began, less a margin for clock drift
        self._valid_until = began + self.lease.total_seconds() * VALID_SHARE
        if self.epoch != epoch:
            with self._lock:
                self.epoch = epoch
            log.info("node %s (%s) leads, epoch %d", self.node_id, self.url, epoch)
            self.on_elected(epoch)
        if time.monotonic() > self._valid_until:  # the pass itself took too long to count on it
            self._step_down("the lease renewal took longer than the lease")

    def _loop(self) -> None:
        """The election's loop: a leader renews every third of the lease, a follower looks every second."""
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("election pass failed; continuing")
            self._wake.wait(self.lease.total_seconds() / 3 if self.epoch is not None else self.interval_seconds)
            self._wake.clear()

    def _watch(self) -> None:
        """Steps down when the lease can no longer be counted on, even while a renewal hangs."""
        while not self._stop.wait(0.2):
            if self.epoch is not None and time.monotonic() > self._valid_until:
                self._step_down("the lease was not renewed in time (the database does not answer)")

    def fence(self, session: Session) -> None:
        """Database.fence: this node's leader writes carry its epoch; anything else is refused."""
        epoch = self.epoch
        if epoch is None:
            raise NotLeader(f"node {self.url} is not the leader{self._leader_hint()}")
        current = store.fencing_epoch(session, self.lease)
        if current != epoch:
            threading.Thread(target=self._step_down, args=(f"fenced: epoch {current} is not ours ({epoch})",)).start()
            raise NotLeader(f"node {self.url} is no longer the leader (epoch {epoch}, now {current})")

    def _step_down(self, why: str) -> None:
        with self._lock:
            if self.epoch is None:
                return
            log.warning("node %s steps down: %s", self.node_id, why)
            self.epoch = None
        self.on_deposed()

    def _leader_hint(self) -> str:
        url = self.leader_url()
        return f"; the leader is {url}" if url else "; no leader is elected right now"

    def leader_url(self) -> str | None:
        """The URL of the node that holds a live lease (this one's own when it leads)."""
        if self.is_leader:
            return self.url
        assert self.db is not None
        with self.db.read() as session:
            lease = store.current_lease(session)
            if lease is None or not lease.live:
                return None
            return store.node_url(session, lease.holder)

    def nodes(self) -> list[NodeInfo]:
        if self.db is None:
            started = self.started_at.isoformat()
            return [NodeInfo(self.node_id, self.url, True, started, utcnow().isoformat())]
        with self.db.read() as session:
            lease = store.current_lease(session)
            leader = lease.holder if lease is not None and lease.live else None
            rows = store.nodes(session, self.lease * 3)
            return [
                NodeInfo(r.node_id, r.url, r.node_id == leader, r.started_at.isoformat(), r.last_seen_at.isoformat())
                for r in rows
            ]

    def start(self) -> None:
        if not self.enabled:
            self.epoch = 0
            self.on_elected(0)
            return
        self.db.fence = self.fence  # type: ignore[union-attr]
        super().start()
        threading.Thread(target=self._watch, name="lakewarden-lease-watchdog", daemon=True).start()

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        epoch = self.epoch
        if self.db is None:  # one node: nothing to hand over
            if epoch is not None:
                self.epoch = None
                self.on_deposed()
            return
        self._step_down("the server stops")
        try:
            with self.db.write(any_node=True) as session:
                if epoch is not None:
                    store.release(session, self.node_id, epoch)  # the next leader need not wait
                store.leave(session, self.node_id)
        except Exception as exc:
            log.warning("could not give the lease up: %s", exc)
