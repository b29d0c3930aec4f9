"""Hudi's table services as lakewarden's self-optimizing of a Hudi table: a pending Hudi table is planned into one
process whose tasks are the services lakewarden may run now (domain/hudi_services.plan_services: the plans its writers
requested and left, and what the table lets another process schedule), one task per service, each a stage of its
own in Hudi's order, run by an optimizer whose Spark carries Hudi's engine (optimizer/hudi_services.py).

A process that compacts is a major one (log files merged into base files, as a major optimizing removes delete
files); one that only clusters, cleans or archives is a minor one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakewarden.domain import hudi as rules
from lakewarden.domain import hudi_services as services
from lakewarden.domain.errors import NothingToDo
from lakewarden.domain.processes import ProcessPlan, TaskSpec
from lakewarden.metadata import hudi
from lakewarden.protocol.inputs import HudiServiceInput
from lakewarden.services.processes.table_services import TableServicesFactory
from lakewarden.store.database import utcnow
from lakewarden.store.tables import TableRecord


class HudiServicesFactory(TableServicesFactory):
    formats = frozenset({"hudi"})

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        location = (rec.runtime.summary or {}).get("location")
        if location is None:
            raise NothingToDo("the table has not been read yet")
        name = f"{rec.identifier.db_name}.{rec.identifier.table_name}"
        state = hudi.read_table(Path(str(location))).configured(dict(rec.runtime.config or {}))
        plan = services.plan_services(state, rules.judge(state, name, utcnow()), self.last_run(rec))
        if not plan.runs:
            raise NothingToDo("; ".join(plan.left) or "nothing for Hudi's table services to do")
        settings = services.write_options(state.properties)
        if state.properties.get("hoodie.table.name"):  # Hudi's write client checks it against the table's
            settings["hoodie.table.name"] = state.properties["hoodie.table.name"]
        tasks = [
            TaskSpec(
                run.service,
                HudiServiceInput(
                    table=name, location=str(location), service=run.service, instant=run.instant, options=settings
                ),
                stage=stage,
            )
            for stage, run in enumerate(plan.runs)
        ]
        kind = "major" if any(run.service == "compaction" for run in plan.runs) else "minor"
        summary = {
            "reasons": [f"{run.service}: {run.reason}" for run in plan.runs],
            "services": [run.service for run in plan.runs],
            "left_to_writers": plan.left,
        }
        return ProcessPlan(kind, None, tasks, summary)
