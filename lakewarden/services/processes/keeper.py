"""The keeper: takes work back from optimizers that went silent or too slow, so nothing stays stuck.

- an optimizer without a heartbeat for heart-beat-timeout is lost: it is forgotten, and its
  SCHEDULED and ACKED tasks go back to PLANNED;
- a task SCHEDULED but not acked within task-ack-timeout goes back to PLANNED;
- a task ACKED for longer than task-execute-timeout goes back to PLANNED.
Each is a compare-and-swap on the task's status and attempt; the next hand-out bumps the attempt, so
a late ack or completion from the old one is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from lakewarden.domain.states import TASK_RUNNING, TaskStatus
from lakewarden.services.loop import LoopService
from lakewarden.store import processes as store
from lakewarden.store.database import Database, as_utc, utcnow
from lakewarden.store.models import TaskRow

log = logging.getLogger(__name__)


class OptimizerKeeper(LoopService):
    name = "optimizer-keeper"

    def __init__(
        self,
        db: Database,
        heartbeat_timeout: timedelta,
        ack_timeout: timedelta,
        execute_timeout: timedelta,
        interval_seconds: float = 5.0,
        on_released: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(interval_seconds)
        self.db = db
        self.heartbeat_timeout = heartbeat_timeout
        self.ack_timeout = ack_timeout
        self.execute_timeout = execute_timeout
        self.on_released = on_released

    def run_once(self) -> None:
        self.release()

    def release(self, lost_tokens: set[str] | None = None) -> int:
        """Release what is overdue (and whatever `lost_tokens` hold); returns how many tasks went back to PLANNED.
        The usual pass finds nothing and takes no write lock (which would queue behind other writers)."""
        now = utcnow()
        with self.db.read() as session:
            overdue = bool(self._lost(session, now, lost_tokens)) or any(
                self._why(task, [], now) for task in store.active_tasks(session)
            )
        if not overdue:
            return 0
        released = 0
        with self.db.write() as session:
            lost = self._lost(session, now, lost_tokens)
            for task in store.active_tasks(session):
                why = self._why(task, lost, now)
                if why is None:
                    continue
                if store.transition_task(
                    session,
                    task.process_id,
                    task.task_id,
                    TaskStatus(task.status),
                    TaskStatus.PLANNED,
                    expected_attempt=task.attempt,
                    optimizer_token=None,
                    thread_id=None,
                ):
                    released += 1
                    log.warning(
                        "task %s.%s (attempt %s) back to planned: %s", task.process_id, task.task_id, task.attempt, why
                    )
            if lost:
                store.forget_optimizers(session, lost)
                silent = [t for t in lost if t not in (lost_tokens or ())]
                if silent:
                    log.warning("lost %d optimizer(s) without a heartbeat for %s", len(silent), self.heartbeat_timeout)
        if released and self.on_released is not None:
            self.on_released()
        return released

    def _lost(self, session: Session, now: datetime, lost_tokens: set[str] | None) -> list[str]:
        """The optimizers that missed their heartbeat, and those `lost_tokens` names."""
        return [
            row.token
            for row in store.list_optimizers(session)
            if now - as_utc(row.last_heartbeat_at) > self.heartbeat_timeout or row.token in (lost_tokens or ())
        ]

    def _why(self, task: TaskRow, lost: list[str], now: datetime) -> str | None:
        """Why an active task goes back to PLANNED now, if it does."""
        status = TaskStatus(task.status)
        if task.optimizer_token in lost:
            return "its optimizer was lost"
        if status is TaskStatus.SCHEDULED and task.scheduled_at and now - as_utc(task.scheduled_at) > self.ack_timeout:
            return "it was not acked in time"
        if status in TASK_RUNNING and task.acked_at and now - as_utc(task.acked_at) > self.execute_timeout:
            return "it ran past the execute timeout"
        return None
