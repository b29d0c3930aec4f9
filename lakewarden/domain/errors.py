"""Domain errors: each names what was wrong so the API and CLI can say it in one line."""

from __future__ import annotations


class LakewardenError(Exception):
    """Base of the errors lakewarden reports to users rather than crashing on."""


class InvalidField(LakewardenError):
    """A value given by the user is not acceptable; `field` names it (dotted path)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class NotFound(LakewardenError):
    """The named thing does not exist."""


class AlreadyExists(LakewardenError):
    """A thing with that name exists already."""


class Conflict(LakewardenError):
    """The request conflicts with the current state (e.g. a group still in use)."""
