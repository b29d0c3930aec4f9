"""The process framework: everything lakewarden does to a table is an Action carried out by a process.

A ProcessFactory, one per action and table format, plans a process's tasks from the table's current metadata,
completes a task's input when it is handed out, says whether a task may run now, what the process's end means for
the table, and how to recover after a restart. Processes and tasks are persisted, so a restart finds them as they
were; the engine and the dispatcher treat every action alike."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from sqlalchemy.orm import Session

from lakewarden.domain.errors import InvalidField
from lakewarden.domain.processes import Action, ProcessPlan
from lakewarden.domain.states import ProcessStatus
from lakewarden.protocol.inputs import TaskInput
from lakewarden.protocol.results import TaskResult
from lakewarden.store.models import ProcessRow
from lakewarden.store.tables import TableRecord


class ProcessFactory:
    """Creates and recovers the processes of one action for tables of the given formats."""

    action: ClassVar[Action]
    formats: ClassVar[frozenset[str]] = frozenset({"iceberg"})

    def create(self, rec: TableRecord, table: Any, trigger: str, options: dict[str, Any]) -> ProcessPlan:
        """Plan a process for the table (a loaded pyiceberg Table); raises NothingToDo."""
        raise NotImplementedError

    def may_dispatch(self, session: Session, process: ProcessRow) -> bool:
        """Whether the process's tasks may be handed out now (e.g. not beside a conflicting process)."""
        return True

    def dispatch_input(self, session: Session, process: ProcessRow, task_input: TaskInput) -> TaskInput:
        """The task's input as sent to the optimizer, completed with what is only known at hand-out."""
        return task_input

    def summarize(self, results: Sequence[TaskResult]) -> dict[str, Any]:
        """The process's result from its successful tasks' results, merged as the action's result
        model says (its totals added up, lists joined, the rest from the last task)."""
        return type(results[0]).summarize(results) if results else {}

    def on_end(self, session: Session, process: ProcessRow, status: ProcessStatus) -> None:
        """What the end of a process means for its table (nothing, unless the action says so)."""

    def recover_tables(self, session: Session, running: set[int]) -> list[str]:
        """At start-up, once: heal table state a dead server left behind, given the ids of the
        processes still running; says what was done. Processes and tasks themselves survive in the
        database as they were, and the keeper takes back the tasks of optimizers that are gone."""
        return []


class ProcessRegistry:
    """The installed factories, by action and table format."""

    def __init__(self, factories: Iterable[ProcessFactory] = ()) -> None:
        self._factories: dict[tuple[Action, str], ProcessFactory] = {}
        for factory in factories:
            self.install(factory)

    def install(self, factory: ProcessFactory) -> None:
        for table_format in factory.formats:
            self._factories[(factory.action, table_format)] = factory

    def factory(self, action: str, table_format: str = "iceberg") -> ProcessFactory:
        try:
            return self._factories[(Action(action), table_format)]
        except (ValueError, KeyError):
            known = ", ".join(sorted({a.value for a, f in self._factories if f == table_format}))
            raise InvalidField("action", f"{action!r} is not an action for {table_format} tables ({known})") from None

    def actions(self) -> list[Action]:
        return sorted({action for action, _ in self._factories})
