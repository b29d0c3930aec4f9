"""Who may do what: roles for the management API, grants for the Iceberg REST catalog.

A principal has one role for `/api/v1`: viewer (reads), operator (also runs actions, cancels, scales, registers
optimizers) or admin (also changes catalogs, groups, principals and grants). Grants give `read` or `write` on an
internal catalog or a namespace of it for `/iceberg`; an admin has every catalog. Table-scoped grants live only in
short-lived tokens the server issues (an optimizer's task). docs/operations.md covers security."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from lakewarden.domain.errors import InvalidField


def optimizer_id(token: str) -> str:
    """How an optimizer is shown (API, dashboard, CLI): a digest of its token, never the token itself,
    which is the credential of its protocol calls."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def includes(self, other: Role) -> bool:
        return self.rank >= other.rank


_RANKS = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


class Privilege(StrEnum):
    READ = "read"
    WRITE = "write"


class PrincipalKind(StrEnum):
    USER = "user"  # a person: may also have a password (the dashboard's login)
    SERVICE = "service"  # a job or a tool: tokens only


@dataclass(frozen=True)
class Grant:
    """`privilege` on `catalog`, or on `namespace` in it (and below), or on one `table` of that namespace."""

    catalog: str
    privilege: Privilege
    namespace: tuple[str, ...] = ()
    table: str | None = None

    def covers(self, catalog: str, namespace: tuple[str, ...] | None, table: str | None, need: Privilege) -> bool:
        """Whether this grant allows `need` on the object: the catalog itself (namespace None), a namespace,
        or a table in it."""
        if catalog != self.catalog or (need is Privilege.WRITE and self.privilege is Privilege.READ):
            return False
        if not self.namespace:
            return True
        if namespace is None or namespace[: len(self.namespace)] != self.namespace:
            return False
        if self.table is None:
            return True
        return namespace == self.namespace and table == self.table

    def reaches(self, catalog: str, namespace: tuple[str, ...] | None) -> bool:
        """Whether the object lies on the way to what this grant covers (a parent namespace, the catalog):
        enough to see it in a listing, not to read what is in it."""
        if catalog != self.catalog:
            return False
        if namespace is None:
            return True
        return self.namespace[: len(namespace)] == namespace or namespace[: len(self.namespace)] == self.namespace

    def describe(self) -> str:
        target = ".".join((self.catalog, *self.namespace, *((self.table,) if self.table else ())))
        return f"{self.privilege} on {target}"

    @classmethod
    def parse(cls, target: str, privilege: str) -> Grant:
        """`catalog` or `catalog.namespace[.level…]` and `read`/`write`, as the CLI and API take them."""
        try:
            level = Privilege(privilege)
        except ValueError:
            raise InvalidField("privilege", f"{privilege!r} is not one of read, write") from None
        parts = target.split(".")
        if not all(parts):
            raise InvalidField("target", f"{target!r} is not `catalog` or `catalog.namespace`")
        return cls(parts[0], level, tuple(parts[1:]))


@dataclass(frozen=True)
class Principal:
    """An authenticated caller, as the routes see it."""

    name: str
    role: Role | None  # None: a caller with grants only (a table-scoped catalog token)
    grants: tuple[Grant, ...] = ()
    kind: str = PrincipalKind.USER
    # the optimizer token of a registered optimizer (its own calls), or the group a registration token is for
    optimizer_token: str | None = None
    register_group: str | None = None
    expires_at: float | None = None  # seconds since the epoch; None: until revoked
    # an optimizer's catalog token: its grants reach a table only while this optimizer (by optimizer_id)
    # holds a task on it
    task_holder: str | None = None
    token_id: str | None = None  # the API token the caller presented, or was issued a token from
    attributes: dict[str, str] = field(default_factory=dict)

    def has_role(self, need: Role) -> bool:
        return self.role is not None and self.role.includes(need)

    def may(self, catalog: str, namespace: tuple[str, ...] | None, table: str | None, need: Privilege) -> bool:
        """Whether this caller may `need` the catalog object (REST catalog access)."""
        if self.role is Role.ADMIN:
            return True
        return any(g.covers(catalog, namespace, table, need) for g in self.grants)

    def sees(self, catalog: str, namespace: tuple[str, ...] | None) -> bool:
        """Whether a listing may show this object to the caller."""
        return self.role is Role.ADMIN or any(g.reaches(catalog, namespace) for g in self.grants)


# the caller when authentication is turned off (`ams.auth.enabled: false`): the server's own user, an admin
NOBODY = Principal(name="anonymous", role=Role.ADMIN)
