"""High availability: a node that does not lead forwards the leader's requests to the leader.

The leader's requests are the API's changes (any POST, PUT, PATCH or DELETE under /api/v1) and the whole
optimizer protocol: they act on the loops, the dispatcher and the local containers, which run on the
leader alone. Everything else (the REST catalog, reads, the dashboard, /metrics) is served where it
arrives. The request goes on as it came (method, path, query, headers with the caller's credential, body),
and the leader's answer comes back as it is, so the CLI, the dashboard and optimizers may talk to any
node. With no leader elected (an election under way) the answer is 503 with Retry-After.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lakewarden.api.errors import error_response
from lakewarden.api.threads import in_thread
from lakewarden.services.leadership import Leadership

FORWARDED = "x-lakewarden-forwarded-by"  # set on a forwarded request: a node never forwards one again
CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-authorization", "host", "content-length"}
)
LEADER_URL_TTL = 1.0  # seconds the leader's URL is remembered between lookups


def leaders_request(method: str, path: str) -> bool:
    return path.startswith("/api/v1/optimizer/") or (path.startswith("/api/v1/") and method in CHANGES)


class LeaderForwarding:
    def __init__(self, app: ASGIApp, leadership_of: Callable[[], Leadership | None], verify: str | bool = True) -> None:
        self.app = app
        self.leadership_of = leadership_of
        self.verify = verify  # nodes serving TLS: their own certificate (the nodes share it), or the system's CAs
        self._client: httpx.AsyncClient | None = None
        self._leader: tuple[float, str | None] = (0.0, None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not leaders_request(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        leadership = self.leadership_of()
        if leadership is None or leadership.is_leader:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        leader = await self._leader_url(leadership)
        if leader is None or leader == leadership.url or FORWARDED in headers:
            response = error_response(
                503, f"node {leadership.url} is not the leader, and no leader is elected right now; try again"
            )
            response.headers["Retry-After"] = "1"
            await response(scope, receive, send)
            return
        body = await _body(receive)
        forwarded = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
        forwarded[FORWARDED] = leadership.url
        client = scope.get("client")
        if client:
            forwarded["x-forwarded-for"] = ", ".join(x for x in (headers.get("x-forwarded-for"), client[0]) if x)
        url = leader.rstrip("/") + scope["path"]
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        try:
            answer = await self._http().request(scope["method"], url, headers=forwarded, content=body)
        except httpx.HTTPError as exc:
            self._leader = (0.0, None)  # look it up again next time
            response = error_response(503, f"the leader {leader} cannot be reached from {leadership.url}: {exc}")
            response.headers["Retry-After"] = "1"
            await response(scope, receive, send)
            return
        out = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in answer.headers.multi_items()
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-encoding"
        ]
        out.append((b"content-length", str(len(answer.content)).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        await send({"type": "http.response.body", "body": answer.content})

    async def _leader_url(self, leadership: Leadership) -> str | None:
        at, url = self._leader
        if url is None or time.monotonic() - at > LEADER_URL_TTL:
            url = await in_thread(leadership.leader_url)
            self._leader = (time.monotonic(), url)
        return url

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # a long poll waits a few seconds; a commit may wait on the table's lock: generous, but bounded
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=5.0), verify=self.verify)
        return self._client


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
