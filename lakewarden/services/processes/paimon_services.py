"""Paimon's table services as lakewarden's self-optimizing of a Paimon table: a pending write-only Paimon table is
planned into one process whose tasks are the services its verdict needs (domain/paimon_services.plan_services),
one task per service, each a stage of its own in order, run by an optimizer whose Spark carries Paimon's engine
(optimizer/paimon_services.py).

A process that compacts a primary-key table is a major one (sorted runs merged, as a major optimizing merges
delete files); any other a minor one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from lakewarden.domain import paimon as rules
from lakewarden.domain import paimon_services as services
from lakewarden.domain.errors import NothingToDo
from lakewarden.domain.processes import Action, ProcessPlan, TaskSpec
from lakewarden.domain.service_runs import LAST_RUNS, LastRun
from lakewarden.domain.states import ProcessStatus
from lakewarden.metadata import paimon
from lakewarden.protocol.inputs import PaimonServiceInput
from lakewarden.services.processes.factories import ProcessFactory
from lakewarden.services.processes.table_services import end_services
from lakewarden.store import processes as process_store
from lakewarden.store.database import Database, utcnow
from lakewarden.store.models import ProcessRow
from lakewarden.store.tables import TableRecord


class PaimonServicesFactory(ProcessFactory):
    action = Action.OPTIMIZING
    formats = frozenset({"paimon"})

    def __init__(self, db: Database) -> None:
        self.db = db  # what the table's last run found (LastRun): a service Paimon found idle is not planned again

    def _last_run(self, rec: TableRecord) -> LastRun:
        with self.db.read() as session:
            done = process_store.recent_summaries(session, rec.runtime.table_id, Action.OPTIMIZING.value, LAST_RUNS)
        return LastRun.of(done)

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        location = (rec.runtime.summary or {}).get("location")
        if location is None:
            raise NothingToDo("the table has not been read yet")
        name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
        state = paimon.read_table(Path(str(location)))
        plan = services.plan_services(state, rules.judge(state, name, utcnow()), self._last_run(rec))
        if not plan.runs:
            raise NothingToDo("; ".join(plan.left) or "nothing for Paimon's table services to do")
        settings = {k: state.options[k] for k in services.EXPIRY_OPTIONS if state.options.get(k)}
        warehouse = str(paimon.warehouse_of(Path(str(location))))
        tasks = [
            TaskSpec(
                run.service,
                PaimonServiceInput(table=name, warehouse=warehouse, service=run.service, options=settings),
                stage=stage,
            )
            for stage, run in enumerate(plan.runs)
        ]
        compacts = any(run.service == "compaction" for run in plan.runs)
        kind = "major" if compacts and state.primary_keys else "minor"
        summary = {
            "reasons": [f"{run.service}: {run.reason}" for run in plan.runs],
            "services": [run.service for run in plan.runs],
            "left": plan.left,
        }
        return ProcessPlan(kind, None, tasks, summary)

    def on_end(self, session: Session, process: ProcessRow, status: ProcessStatus) -> None:
        end_services(session, process, status)
