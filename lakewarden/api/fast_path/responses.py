"""Answers whose body is already JSON bytes (a loadTable or commit answer, serialised once per metadata file):
their headers made in one step. Starlette's `Response` builds them from a mapping on every answer (each name
lowered and encoded, the list searched for a length and a type), a share of a cached load's own work on the
event loop."""

from __future__ import annotations

from starlette.responses import Response


class JSONBytes(Response):
    """200 with `body` (JSON, as bytes), its length and type, and its `etag` when given: the headers Starlette's
    `Response(body, media_type="application/json", headers={"ETag": etag})` sends."""

    media_type = "application/json"

    def __init__(self, body: bytes, etag: str | None = None) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
        if etag is not None:
            headers.insert(0, (b"etag", etag.encode("latin-1")))
        self.raw_headers = headers
