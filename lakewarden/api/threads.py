"""A request's blocking work, in a worker thread: its routes' plain functions (api/handlers.py), a commit, a
metadata file to read.

Starlette's `run_in_threadpool` goes through anyio: a capacity limiter taken and given back, cancel scopes, a
lookup of the running async library, each time, about 90 µs of the event loop's time per hop on this machine
against 55 µs for asyncio's own `run_in_executor` (`bench/rest_catalog.py`; a commit hops there and back). Here
the hop is asyncio's, on the server's own pool of threads, with what anyio's gives a caller kept: the caller's
context variables are the thread's, and a caller that is cancelled (its client gone, the server stopping) still
waits for the thread to finish before it unwinds, so that nothing the work holds (a table's turn to commit) is
released while it runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

WORKERS = 40  # as anyio's default limiter: requests working in threads at once; the others wait their turn
_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="lakewarden-request")

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args, **kwargs)` in a worker thread, awaited; see the module's docstring."""
    context = contextvars.copy_context()
    # the pool's future wrapped for the loop, as the loop's run_in_executor does, without its check that `call`
    # is no coroutine function (inspect unwrapping the partial it is handed: a tenth of the hop)
    work = asyncio.wrap_future(_POOL.submit(functools.partial(context.run, call, *args, **kwargs)))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():  # the thread cannot be stopped: its work ends first, then the cancellation goes on
            try:
                await asyncio.wait([work])
            except asyncio.CancelledError:
                continue
        if not work.cancelled():
            work.exception()  # retrieved: a failure of work nobody awaits any more is not logged as unretrieved
        raise
