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
from datetime import timedelta

from lakewarden.domain.states import TASK_RUNNING, TaskStatus
from lakewarden.services.loop import LoopService
from lakewarden.store import processes as store
from lakewarden.store.database import Database, as_utc, utcnow

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
        """Release what is overdue (and whatever `lost_tokens` hold); returns how many tasks went back to PLANNED."""
        now = utcnow()
        released = 0
        with self.db.write() as session:
            lost = [
                row.token
                for row in store.list_optimizers(session)
                if now - as_utc(row.last_heartbeat_at) > self.heartbeat_timeout or row.token in (lost_tokens or ())
            ]
            for task in store.active_tasks(session):
                status = TaskStatus(task.status)
                if task.optimizer_token in lost:
                    why = "its optimizer was lost"
                elif (
                    status is TaskStatus.SCHEDULED
                    and task.scheduled_at
                    and now - as_utc(task.scheduled_at) > self.ack_timeout
                ):
                    why = "it was not acked in time"
                elif status in TASK_RUNNING and task.acked_at and now - as_utc(task.acked_at) > self.execute_timeout:
                    why = "it ran past the execute timeout"
                else:
                    continue
                if store.transition_task(
                    session,
                    task.process_id,
                    task.task_id,
                    status,
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
                log.warning("lost %d optimizer(s) without a heartbeat for %s", len(lost), self.heartbeat_timeout)
        if released and self.on_released is not None:
            self.on_released()
        return released
