"""What the routes need from the running server: its ServerRuntime, handed over through `app.state`."""

from __future__ import annotations

from fastapi import Request

from lakewarden.services.composition import ServerRuntime

ServerContext = ServerRuntime


async def server_context(request: Request) -> ServerRuntime:
    """Async, as every dependency that only looks something up: FastAPI runs a plain function dependency in its
    thread pool, a hop there and back on every request that shows in a commit's time on the event loop."""
    runtime: ServerRuntime = request.app.state.context
    return runtime
