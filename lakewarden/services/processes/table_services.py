"""What the processes of other formats' table services (Hudi's, Paimon's) share: what the table's last runs
found, and how one ending leaves its table."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain.processes import Action
from lakewarden.domain.service_runs import LAST_RUNS, LastRun
from lakewarden.domain.states import OPTIMIZING_STATUS, ProcessStatus
from lakewarden.domain.tables import TableStatus
from lakewarden.services.processes.factories import ProcessFactory
from lakewarden.store import processes as process_store
from lakewarden.store import runtime as runtime_store
from lakewarden.store import tables as table_store
from lakewarden.store.database import Database, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.tables import TableRecord

LAST_RUN = {"minor": "last_minor_optimizing_at", "major": "last_major_optimizing_at"}


class TableServicesFactory(ProcessFactory):
    """A format's table services as self-optimizing processes: the format's factory plans them (`create`)."""

    action = Action.OPTIMIZING

    def __init__(self, db: Database) -> None:
        self.db = db  # what the table's last runs found (LastRun): a service found idle is not planned again

    def last_run(self, rec: TableRecord) -> LastRun:
        with self.db.read() as session:
            done = process_store.recent_summaries(session, rec.runtime.table_id, Action.OPTIMIZING.value, LAST_RUNS)
        return LastRun.of(done)

    def on_end(self, session: Session, process: ProcessRow, status: ProcessStatus) -> None:
        end_services(session, process, status)


def end_services(session: Session, process: ProcessRow, status: ProcessStatus) -> None:
    """The end of a process of a format's table services: the table goes IDLE and is judged again at once; a
    success records when its services ran (as an optimizing of the same type would)."""
    runtime = table_store.runtime_of(session, process.table_id)
    if runtime is None:
        return
    fields: dict[str, Any] = {"optimizing_process_id": None, "next_evaluation_at": utcnow()}
    if status is ProcessStatus.SUCCESS and process.type in LAST_RUN:
        fields[LAST_RUN[process.type]] = utcnow()
    current = TableStatus(runtime.status_code)
    if current in (*OPTIMIZING_STATUS.values(), TableStatus.COMMITTING):
        runtime_store.transition_table(session, process.table_id, current, TableStatus.IDLE, **fields)
    else:
        for key, value in fields.items():
            setattr(runtime, key, value)
