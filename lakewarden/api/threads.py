"""A request's blocking work, in a worker thread: plain route functions, a commit, a metadata file to read.

Starlette's `run_in_threadpool` goes through anyio (a capacity limiter, cancel scopes, a library lookup) on every
hop, which costs the event loop more than a future handed back from the server's own pool. This keeps what anyio
gives a caller: its context variables, and a cancelled caller still waits for its work to finish, so nothing the
work holds (a table's turn to commit) is released, and nothing it writes (an audit record) is dropped, mid-run."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

WORKERS = 40  # as anyio's default limiter: requests working in threads at once; the others wait their turn
_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="lakewarden-request")

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args, **kwargs)` in a worker thread, awaited; see the module's docstring."""
    loop = asyncio.get_running_loop()
    running = _POOL.submit(functools.partial(contextvars.copy_context().run, call, *args, **kwargs))
    # the pool's future handed back to the loop one way only: not asyncio.wrap_future, whose cancellation
    # would cancel work no thread has taken yet, under asyncio.shield, which keeps it running but costs every
    # hop a third future and its callbacks (nor run_in_executor, which also unwraps `call` to check that it is
    # no coroutine function, every time)
    answer: asyncio.Future[T] = loop.create_future()
    running.add_done_callback(functools.partial(_hand_back, loop, answer))
    try:
        return await answer
    except asyncio.CancelledError:
        if not running.done():  # the work cannot be stopped: it ends first, then the cancellation goes on
            ended: asyncio.Future[T] = loop.create_future()
            running.add_done_callback(functools.partial(_hand_back, loop, ended))
            while not ended.done():
                try:
                    await asyncio.wait([ended])
                except asyncio.CancelledError:
                    continue
            if not ended.cancelled():
                ended.exception()  # retrieved: a failure of work nobody awaits any more is not logged as lost
        raise


def _hand_back(loop: asyncio.AbstractEventLoop, answer: asyncio.Future[T], done: Future[T]) -> None:
    """In the worker thread (or the loop's, if the work had ended already): the work's outcome to the loop."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, answer, done)


def _settle(answer: asyncio.Future[T], done: Future[T]) -> None:
    """On the loop: the outcome set on the future the caller awaits (unless the caller is gone)."""
    if answer.cancelled():
        return
    if done.cancelled():  # the pool was shut down with the work still waiting for a thread
        answer.cancel()
        return
    failure = done.exception()
    if failure is None:
        answer.set_result(done.result())
    elif isinstance(failure, StopIteration):  # a future refuses it (as a coroutine would end on it): PEP 479's way
        error = RuntimeError(f"the work raised StopIteration: {failure!r}")
        error.__cause__ = failure
        answer.set_exception(error)
    else:
        answer.set_exception(failure)
