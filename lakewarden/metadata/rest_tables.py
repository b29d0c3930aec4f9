"""Iceberg tables behind a REST catalog, with every table's metadata location learned by conditional loads: each
`loadTable` carries the entity tag its last answer had (`If-None-Match`), and a server that keeps the table
unchanged answers 304 with no body. A REST catalog has no call listing its tables' locations, so a watch pass
costs a listing and one small request per table, and reads a body only for the tables that moved.

Servers that send no `ETag` (the spec makes it optional) answer in full each time: the pass then reads every
table's metadata, as a plain sweep would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from pyiceberg.catalog.rest import Endpoints, RestCatalog

from lakewarden._compat.pyiceberg import rest_session, rest_table_path

# (catalog name, its URI) -> table identifier -> (entity tag, metadata location): what the last answers were,
# kept across passes (a reader is opened for each pass)
_seen: dict[tuple[str, str], dict[tuple[str, ...], tuple[str, str]]] = {}
_seen_lock = threading.Lock()
MAX_TABLES_KEPT = 1_000_000


class RestTables(RestCatalog):
    """pyiceberg's RestCatalog, and the watch pass's conditional loads."""

    def table_locations(self) -> list[tuple[str, str, str]]:
        """(database, table, metadata location) of every table the catalog lists."""
        return list(self._locations())

    def _identifiers(self) -> Iterator[tuple[str, ...]]:
        pending: list[tuple[str, ...]] = [()]
        seen: set[tuple[str, ...]] = set()
        while pending:
            parent = pending.pop()
            for namespace in self.list_namespaces(parent) if parent else self.list_namespaces():
                namespace = tuple(namespace)
                if namespace in seen or namespace == parent or len(namespace) > 8:
                    continue
                seen.add(namespace)
                pending.append(namespace)
                for identifier in self.list_tables(namespace):
                    yield tuple(identifier)

    def _locations(self) -> Iterator[tuple[str, str, str]]:
        key = (self.name, self.uri)
        with _seen_lock:
            known = dict(_seen.get(key, {}))
        now: dict[tuple[str, ...], tuple[str, str]] = {}
        session = rest_session(self)
        for identifier in self._identifiers():
            url = self.url(Endpoints.load_table, prefixed=True, **rest_table_path(self, identifier))
            previous = known.get(identifier)
            headers = {"If-None-Match": previous[0]} if previous else {}
            response = session.get(url, headers=headers)
            if response.status_code == 404:
                continue  # dropped while listed
            if response.status_code == 304 and previous is not None:
                now[identifier] = previous
            else:
                response.raise_for_status()
                location = _metadata_location(response.json())
                now[identifier] = (response.headers.get("ETag", ""), location)
            yield ".".join(identifier[:-1]), identifier[-1], now[identifier][1]
        if len(now) <= MAX_TABLES_KEPT:
            with _seen_lock:
                _seen[key] = {k: v for k, v in now.items() if v[0]}  # without a tag there is nothing to send


def _metadata_location(body: Any) -> str:
    location = body.get("metadata-location") if isinstance(body, dict) else None
    if not isinstance(location, str) or not location:
        raise ValueError(f"a loadTable answer without a metadata-location: {json.dumps(body)[:200]}")
    return location
