"""AWS Glue for the tests: moto's server on loopback, in a thread of the test process, checking a table update's
`VersionId` as Glue does.

Glue refuses an `UpdateTable` whose `VersionId` is not the table's current version
(ConcurrentModificationException): it is how Iceberg's and pyiceberg's Glue catalogs make a commit
compare-and-swap. moto stores every version but does not check the one named, which would turn a conflict into
a lost update; the check is added here, on moto's own request handler.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

REGION = "us-east-1"


@dataclass(frozen=True)
class GlueServer:
    endpoint: str

    def properties(self, warehouse: str) -> dict[str, str]:
        """A `glue` catalog's properties for this server (pyiceberg's names)."""
        return {
            "glue.endpoint": self.endpoint,
            "glue.region": REGION,
            "glue.access-key-id": "testing",
            "glue.secret-access-key": "testing",
            "warehouse": warehouse,
        }


def _checking_version_ids() -> Any:
    from moto.core.exceptions import JsonRESTError
    from moto.glue.responses import GlueResponse

    original = GlueResponse.update_table

    def update_table(self: Any) -> Any:
        version = self.parameters.get("VersionId")
        if version is not None:
            table_input = self.parameters.get("TableInput") or {}
            table = self.glue_backend.get_table(self.parameters.get("DatabaseName"), table_input.get("Name"))
            current = table.as_dict()["VersionId"]
            if str(version) != str(current):
                raise JsonRESTError(
                    "ConcurrentModificationException", f"version {version} is not the table's current {current}"
                )
        return original(self)

    GlueResponse.update_table = update_table  # type: ignore[method-assign]
    return original


@contextmanager
def glue_server() -> Iterator[GlueServer]:
    from moto.glue.responses import GlueResponse
    from moto.server import ThreadedMotoServer

    original = _checking_version_ids()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        yield GlueServer(endpoint)
    finally:
        httpx.post(f"{endpoint}/moto-api/reset", timeout=10)
        server.stop()
        GlueResponse.update_table = original  # type: ignore[method-assign]
