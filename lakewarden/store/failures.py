"""How a failure of the system database is told apart: a statement or COMMIT whose answer was lost (it may have
taken effect: CommitStateUnknown), or a database away or busy (nothing written: the API answers 503)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from lakewarden.domain.errors import CommitStateUnknown


def answer_lost(exc: DBAPIError) -> bool:
    """Whether a statement or COMMIT that failed so may have taken effect: the connection broke (the answer was
    lost) rather than the database refusing it (a constraint, a bad value, which commit nothing)."""
    return exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)


def database_unavailable(exc: DBAPIError) -> bool:
    """Whether the system database failed as a database does when it is away or busy (a connection dropped or
    refused, a statement canceled, SQLite's file locked), not because of the statement: nothing was written,
    and the request may be tried again (the API answers 503)."""
    if exc.connection_invalidated:
        return True
    if type(exc.orig).__module__.startswith("psycopg"):  # PostgreSQL's driver: its OperationalError is that
        return isinstance(exc, OperationalError)
    return isinstance(exc, OperationalError) and "database is locked" in str(exc.orig)


def first_line(driver_error: BaseException | None) -> str:
    """The first line of a driver's error message (PostgreSQL's go on with DETAIL and HINT lines)."""
    return (str(driver_error).strip().splitlines() or [""])[0]


def state_unknown(driver_error: BaseException | None, what: str) -> CommitStateUnknown:
    return CommitStateUnknown(
        f"{what} to the system database failed with no answer to rely on ({type(driver_error).__name__}: "
        f"{first_line(driver_error)}); whether it took effect is unknown"
    )
