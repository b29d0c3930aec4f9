"""The REST spec's `Idempotency-Key` on the catalog's mutating requests: a client that lost an answer sends
again with the same key and gets the first answer, with nothing done twice.

The key is claimed in the system database before the request runs; a final answer (2xx, 400, 404, 406, 409, 422)
is kept for the lifetime `/v1/config` advertises and replayed to the same caller; other answers drop the claim.
A key whose request still runs is a 503 with Retry-After, not the IETF draft's 409: to Iceberg's clients a 409 on a
commit is a conflict to refresh and retry. docs/rest-catalog.md has the details."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

from starlette.requests import Request

from lakewarden.api.auth import caller
from lakewarden.api.errors import error_response
from lakewarden.api.threads import in_thread
from lakewarden.domain.catalogs import IDEMPOTENCY_LIFETIME
from lakewarden.domain.errors import LakewardenError
from lakewarden.store import idempotency as store

HEADER = b"idempotency-key"
ABANDONED_AFTER = timedelta(minutes=2)  # a claim with no answer this old was left by a dead server
FINAL = frozenset({400, 404, 406, 409, 422})  # terminal 4xx (beside 2xx) that a retry would get again
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
EXPIRE_EVERY = 60.0  # seconds between sweeps of expired keys


class IdempotencyKeys:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._swept = 0.0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("POST", "DELETE")
            or not scope["path"].startswith("/iceberg/v1/")
        ):
            await self.app(scope, receive, send)
            return
        key = dict(scope.get("headers") or []).get(HEADER)
        if key is None:
            await self.app(scope, receive, send)
            return
        text = key.decode("latin-1")
        if not UUID.match(text):
            await error_response(400, f"Idempotency-Key: {text!r} is not a UUID")(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            principal = (await in_thread(caller, request)).name
        except LakewardenError:  # not signed in: the route answers (401) and nothing is claimed
            await self.app(scope, receive, send)
            return
        db = scope["app"].state.context.db
        method, path = scope["method"], scope["path"]

        def claim() -> tuple[int | None, str | None, str | None, bool] | None:
            with db.write(any_node=True) as session:
                if time.monotonic() - self._swept > EXPIRE_EVERY:
                    self._swept = time.monotonic()
                    store.expire(session, IDEMPOTENCY_LIFETIME)
                row = store.claim(session, text, principal, method, path, ABANDONED_AFTER)
                if row is None:
                    return None
                same = (row.principal, row.method, row.path) == (principal, method, path)
                return row.status, row.content_type, row.body, same

        found = await in_thread(claim)
        if found is not None:
            status, content_type, body, same = found
            if not same:
                message = "Idempotency-Key: this key was used for another request; use a new key per operation"
                await error_response(400, message)(scope, receive, send)
            elif status is None:
                message = "Idempotency-Key: a request with this key is still running; retry shortly"
                response = error_response(503, message)
                response.headers["Retry-After"] = "1"
                await response(scope, receive, send)
            else:
                await _replay(send, status, content_type, body or "")
            return
        await self._run(scope, receive, send, db, text)

    async def _run(self, scope: Any, receive: Any, send: Any, db: Any, key: str) -> None:
        """Run the request, keeping what it answers; the key is finalized with the answer (or the claim
        dropped) before the answer's last part goes out, so a retry that follows at once finds it."""
        answer: dict[str, Any] = {"status": 500, "content_type": None, "body": []}
        settled = False

        def settle() -> None:
            status = int(answer["status"])
            body = b"".join(answer["body"]).decode("utf-8", "replace")
            with db.write(any_node=True) as session:
                if 200 <= status < 300 or status in FINAL:
                    store.finalize(session, key, status, answer["content_type"], body)
                else:
                    store.release(session, key)

        async def keep(message: Any) -> None:
            nonlocal settled
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                kind = dict(message.get("headers") or []).get(b"content-type")
                answer["content_type"] = kind.decode("latin-1") if kind else None
            elif message["type"] == "http.response.body":
                answer["body"].append(message.get("body", b""))
                if not message.get("more_body", False):
                    await in_thread(settle)
                    settled = True
            await send(message)

        try:
            await self.app(scope, receive, keep)
        finally:
            if not settled:  # the request failed before its answer ended: a retry runs it again
                answer["status"] = 500
                await in_thread(settle)


async def _replay(send: Any, status: int, content_type: str | None, body: str) -> None:
    data = body.encode()
    headers = [(b"content-length", str(len(data)).encode()), (b"idempotent-replayed", b"true")]
    if content_type:
        headers.append((b"content-type", content_type.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
