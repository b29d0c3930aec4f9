"""Starlette's private names, as the REST catalog's fast path (api/fast_path/) uses them: the path a route is
matched against, and the lookup of an exception's handler, exactly as Starlette's own layers do them.
tests/test_compat.py checks each contract here against the installed Starlette."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lakewarden._compat._check import broken

LIBRARY = "starlette"
SUPPORTED = ">=1.10,<1.11"  # pyproject.toml pins the same

try:
    # ExceptionMiddleware's lookup of the handler of an exception (by its class's method resolution order)
    from starlette._exception_handler import _lookup_exception_handler as lookup_exception_handler

    # get_route_path: what Starlette and FastAPI match a route against (the path without the root path);
    # is_async_callable: how Starlette tells an async handler from one it runs in its thread pool
    from starlette._utils import get_route_path, is_async_callable
except ImportError as exc:
    raise broken(LIBRARY, SUPPORTED, exc) from exc

__all__ = ["get_route_path", "is_async_callable", "lookup_exception_handler"]


def exception_handlers(middleware: Any) -> tuple[dict[Any, Any], dict[int, Any]]:
    """An ExceptionMiddleware's handlers by exception class and by status code (`_exception_handlers`,
    `_status_handlers`): the fast path answers an exception with the application's own handlers."""
    return middleware._exception_handlers, middleware._status_handlers


CONTRACT: Mapping[str, Callable[..., Any]] = {
    "lookup_exception_handler": lookup_exception_handler,
    "get_route_path": get_route_path,
    "is_async_callable": is_async_callable,
}
PARAMETERS = {
    "lookup_exception_handler": ["exc_handlers", "exc"],
    "get_route_path": ["scope"],
    "is_async_callable": ["obj"],
}
