"""What the Iceberg REST routes (iceberg_rest.py, iceberg_views.py) share: the catalog a prefix names, the
namespace in a path, pages of names, and a client's ask for vended credentials."""

from __future__ import annotations

import base64
import bisect
from typing import Annotated

from fastapi import Depends, Request
from pydantic import Field

from lakewarden.api.auth import caller
from lakewarden.api.schemas import ClientBody
from lakewarden.api.threads import in_thread
from lakewarden.domain.errors import InvalidField
from lakewarden.domain.security import Principal, Privilege
from lakewarden.domain.storage import Access
from lakewarden.services.rest_catalog.loads import Delegation
from lakewarden.services.rest_catalog.served import ServedCatalog
from lakewarden.store import rest_catalog as store


async def served_catalog(prefix: str, request: Request) -> ServedCatalog:
    """The catalog the path's prefix names, for the caller (services/rest_catalog/catalog.py `served`): on the
    event loop once the name is known, else looked up in a thread."""
    svc = request.app.state.context.rest_catalog
    me = caller(request)
    known = svc.served_known(prefix, me)
    return known if known is not None else await in_thread(svc.served, prefix, me)


Served = Annotated[ServedCatalog, Depends(served_catalog)]


class TableRef(ClientBody):
    namespace: list[str] = Field(min_length=1)
    name: str = Field(min_length=1)

    @property
    def key(self) -> tuple[str, str]:
        """The namespace's key and the name."""
        return store.key(self.namespace), self.name


def ns(namespace: str) -> str:
    """A path's namespace (levels joined by 0x1F) as the store's key; a level may not be empty."""
    parts = namespace.split(store.SEP)
    if not all(parts):
        raise InvalidField("namespace", f"{namespace!r} has an empty level")
    return store.key(parts)


def page(items: list[str], token: str | None, size: int | None) -> tuple[list[str], str | None]:
    """A page of sorted names. The token is a keyset cursor (the last name given, encoded): the next page
    starts after it, so names created or dropped meanwhile neither repeat nor skip the others."""
    start = 0
    if token:
        try:
            after = base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4)).decode()
        except (ValueError, UnicodeError):
            raise InvalidField("pageToken", "is not a token this server issued") from None
        start = bisect.bisect_right(items, after)
    if size is None:
        return items[start:], None
    found = items[start : start + size]
    more = start + size < len(items)
    return found, (base64.urlsafe_b64encode(found[-1].encode()).decode().rstrip("=") if more and found else None)


DELEGATION_HEADER = "x-iceberg-access-delegation"
VENDED_CREDENTIALS = "vended-credentials"


def delegation(request: Request, me: Principal, prefix: str, namespace: str, table: str) -> Delegation | None:
    """The client's ask for vended credentials (a comma-separated list of mechanisms; remote signing is not
    offered), with what the caller may do to the table: read-only credentials for a reader."""
    headers = request.headers
    if DELEGATION_HEADER not in headers:  # (not `get`: Starlette's raises and catches a KeyError for a header not sent)
        return None
    if VENDED_CREDENTIALS not in (m.strip().lower() for m in headers[DELEGATION_HEADER].split(",")):
        return None
    return delegation_of(me, prefix, namespace, table)


def delegation_of(me: Principal, prefix: str, namespace: str, table: str) -> Delegation:
    # an optimizer's catalog token reaches only the tables it holds a task on (the router checked), and writes them
    writes = me.may(prefix, tuple(store.levels(namespace)), table, Privilege.WRITE)
    return Delegation(Access.WRITE if writes else Access.READ, me.name)
