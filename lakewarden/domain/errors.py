"""Domain errors: each names what was wrong so the API and CLI can say it in one line."""

from __future__ import annotations

from datetime import datetime
from typing import Any


class LakewardenError(Exception):
    """Base of the errors lakewarden reports to users rather than crashing on."""


class InvalidField(LakewardenError):
    """A value given by the user is not acceptable; `field` names it (dotted path)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem

    @classmethod
    def of_validation(cls, exc: Any, document: str, nested: bool = False) -> InvalidField:
        """The first problem of a pydantic ValidationError, naming its field (`document` for the whole; with
        `nested`, the document is a field itself and the names start with it)."""
        first = exc.errors()[0]
        path = [document] if nested else []
        return cls(".".join([*path, *(str(part) for part in first["loc"])]) or document, first["msg"])


class Unprocessable(InvalidField):
    """Well-formed, but contradicting itself (the REST spec's 422: a key both updated and removed)."""


class Unsupported(LakewardenError):
    """An operation this server does not offer (the REST spec's 406)."""


class NotFound(LakewardenError):
    """The named thing does not exist."""


class AlreadyExists(LakewardenError):
    """A thing with that name exists already."""


class Conflict(LakewardenError):
    """The request conflicts with the current state (e.g. a group still in use)."""


class NotAuthorized(LakewardenError):
    """No credentials, or credentials the server does not accept (401)."""


class Forbidden(LakewardenError):
    """Known caller, but without the right to this (403); the message names the right missing."""


class NotLeader(LakewardenError):
    """High availability: this node does not lead (any more), and the work belongs to the leader (503)."""


class StorageUnavailable(LakewardenError):
    """The storage behind a catalog cannot give what was asked (STS refused or unreachable) (503)."""


class CommitStateUnknown(LakewardenError):
    """A write was sent to the system database and its answer lost (the connection dropped during the COMMIT, or
    during a commit that is one statement): whether it took effect is not known. A REST commit answers 500, which
    Iceberg's clients read as CommitStateUnknownException (they neither retry it nor delete its files), and
    lakewarden keeps the metadata file it wrote for it: the pointer may name it."""


class Overloaded(LakewardenError):
    """More work is waiting than the server takes on; nothing of this request was done: retry later (503)."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class TooManyRequests(LakewardenError):
    """Too many failed attempts from this client; try again later (429)."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


# ---- lakewarden's REST catalog (the Iceberg REST spec's error types, by the API's mapping)


class NoSuchWarehouse(NotFound):
    """No internal catalog by that name (the REST catalog's prefix)."""


class NoSuchNamespace(NotFound):
    pass


class NoSuchTable(NotFound):
    pass


class NoSuchView(NotFound):
    pass


class NoSuchPlan(NotFound):
    """No scan plan by that id here (never made, cancelled, fetched whole or expired)."""


class NoSuchPlanTask(NotFound):
    pass


class NamespaceNotEmpty(Conflict):
    pass


class CommitFailed(Conflict):
    """A requirement of the commit does not hold against the table's current metadata."""


class WouldWait(Exception):
    """Work asked to run without waiting (on the event loop) would have to wait: for a lock, another writer, a
    file or database across a network, work too large to hold the loop for. Nothing was left behind; the caller
    runs it again where waiting is allowed (a worker thread)."""


# ---- processes


class NothingToDo(Exception):
    """The action has no work on this table now; the message says why (not an error: no process). `on_change`:
    only a change of the table (a snapshot, its configuration) can bring work, or the time `at` when given;
    otherwise work may come at any time (the scheduled trigger looks again after its interval)."""

    def __init__(self, message: str, *, on_change: bool = False, at: datetime | None = None) -> None:
        super().__init__(message)
        self.on_change = on_change
        self.at = at


class ActionForbidden(NothingToDo):
    """The table's own settings forbid the action (e.g. gc.enabled=false for snapshot expiry); the
    message names the setting. No process is created for it, not even on a manual run."""

    def __init__(self, message: str) -> None:
        super().__init__(message, on_change=True)  # until its settings change


class IllegalTransition(Exception):
    """A transition a state machine does not have: a bug, never user input."""
