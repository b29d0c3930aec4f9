"""What the routes need from the running server: its ServerRuntime, handed over through `app.state`."""

from __future__ import annotations

from fastapi import Request

from lakewarden.services.composition import ServerRuntime

ServerContext = ServerRuntime


def server_context(request: Request) -> ServerRuntime:
    runtime: ServerRuntime = request.app.state.context
    return runtime
