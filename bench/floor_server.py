"""The static-body floors of bench/rest_catalog.py: uvicorn + Starlette, as lakewarden runs, answering a route
of a loadTable's shape with a body of a given size held in memory. Nothing else. With `fastapi`, the same route
is a FastAPI application's (an APIRoute declaring the path's parameters): what FastAPI itself adds to a request.

    python bench/floor_server.py PORT BODY_BYTES [fastapi]
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def main() -> None:
    port, size = int(sys.argv[1]), int(sys.argv[2])
    body = b'{"metadata": "' + b"x" * max(size - 16, 0) + b'"}'

    async def load(request: Request) -> Response:
        return Response(body, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(b"ok")

    path = "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    if sys.argv[3:] == ["fastapi"]:
        app = FastAPI()

        @app.get(path)
        async def load_table(prefix: str, namespace: str, table: str) -> Response:
            return Response(body, media_type="application/json")

        app.add_api_route("/health", health)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return
    routes = [Route(path, load), Route("/health", health)]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
