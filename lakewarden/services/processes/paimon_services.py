"""Paimon's table services as lakewarden's self-optimizing of a Paimon table: a pending write-only Paimon table is
planned into one process whose tasks are the services its verdict needs (domain/paimon_services.plan_services),
one task per service, each a stage of its own in order, run by an optimizer whose Spark carries Paimon's engine
(optimizer/paimon_services.py).

A process that compacts a primary-key table is a major one (sorted runs merged, as a major optimizing merges
delete files); any other a minor one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakewarden.domain import paimon as rules
from lakewarden.domain import paimon_services as services
from lakewarden.domain.errors import NothingToDo
from lakewarden.domain.processes import ProcessPlan, TaskSpec
from lakewarden.metadata import paimon
from lakewarden.protocol.inputs import PaimonServiceInput
from lakewarden.services.processes.table_services import TableServicesFactory
from lakewarden.store.database import utcnow
from lakewarden.store.tables import TableRecord


class PaimonServicesFactory(TableServicesFactory):
    formats = frozenset({"paimon"})

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        location = (rec.runtime.summary or {}).get("location")
        if location is None:
            raise NothingToDo("the table has not been read yet")
        name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
        state = paimon.read_table(Path(str(location)))
        plan = services.plan_services(state, rules.judge(state, name, utcnow()), self.last_run(rec))
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
