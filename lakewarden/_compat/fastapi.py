"""FastAPI's private names, as the REST catalog's fast path (api/fast_path/) uses them.

The fast path answers the catalog's hottest requests with FastAPI's own pieces, without the work FastAPI repeats
per request; each name below is what FastAPI itself calls at that point, so values, errors and scope stay
FastAPI's. tests/test_compat.py checks each contract against the installed FastAPI."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lakewarden._compat._check import broken

LIBRARY = "fastapi"
SUPPORTED = ">=0.165,<0.166"  # pyproject.toml pins the same

try:
    # the body limit FastAPI applies around the application (the fast path is off when one is set), and its error
    from fastapi._body_limit import AppBodyLimitMiddleware, get_body_limit_error

    # FastAPI's test of a parameter's annotation: a sequence takes every value sent under its key
    from fastapi._compat import field_annotation_is_sequence

    # how FastAPI tells a dependency it calls on the loop from one it runs in its thread pool or as a generator
    from fastapi.dependencies.models import _is_async_gen_callable as is_async_gen_callable
    from fastapi.dependencies.models import _is_coroutine_callable as is_coroutine_callable
    from fastapi.dependencies.models import _is_gen_callable as is_gen_callable

    # fastapi.dependencies.utils.request_params_to_args, taken apart: a field's request keys, whether it is a model of
    # parameters or a JSON field, and the validation of one value (the errors are FastAPI's own)
    from fastapi.dependencies.utils import _get_param_aliases as param_aliases
    from fastapi.dependencies.utils import _get_param_model as param_model
    from fastapi.dependencies.utils import _is_json_field as is_json_field
    from fastapi.dependencies.utils import _validate_value_with_model_field as validate_value_with_model_field

    # the scope's part FastAPI keeps for itself (the included router and the route chosen), the context variable
    # set while an included route's handler is built, and what FastAPI does to the scope when it chooses a route
    from fastapi.routing import _FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY as EFFECTIVE_ROUTE
    from fastapi.routing import _FASTAPI_INCLUDED_ROUTER_KEY as INCLUDED_ROUTER
    from fastapi.routing import _FASTAPI_SCOPE_KEY as FASTAPI_SCOPE
    from fastapi.routing import _effective_route_context_var as effective_route_context

    # a route as included (its prefixes and dependencies), which FastAPI matches and handles; tests count its tries
    from fastapi.routing import _EffectiveRouteContext as EffectiveRouteContext

    # the endpoint's source file and line, which FastAPI reads (tokenizing its module) on an endpoint's first request,
    # and keeps (the tests check that the server reads every endpoint's at start)
    from fastapi.routing import _endpoint_context_cache as endpoint_context_cache
    from fastapi.routing import _extract_endpoint_context as extract_endpoint_context
    from fastapi.routing import _update_scope as update_scope

    # FastAPI's telemetry told of the route chosen, and its layer around the application (off in lakewarden)
    from fastapi.telemetry._api import _route_selected as route_selected
    from fastapi.telemetry._asgi import ExceptionTelemetryMiddleware
except ImportError as exc:
    raise broken(LIBRARY, SUPPORTED, exc) from exc

__all__ = [
    "EFFECTIVE_ROUTE",
    "FASTAPI_SCOPE",
    "INCLUDED_ROUTER",
    "AppBodyLimitMiddleware",
    "EffectiveRouteContext",
    "ExceptionTelemetryMiddleware",
    "effective_route_context",
    "endpoint_context_cache",
    "extract_endpoint_context",
    "field_annotation_is_sequence",
    "get_body_limit_error",
    "is_async_gen_callable",
    "is_coroutine_callable",
    "is_gen_callable",
    "is_json_field",
    "param_aliases",
    "param_model",
    "route_selected",
    "update_scope",
    "validate_value_with_model_field",
]


def routes_version(router: Any) -> int:
    """A router's count of its own changes (a route added, a router included): FastAPI's `_routes_version`, which
    its `_get_routes_version` sums over a tree; an index of the router's routes stands while it is unchanged."""
    return int(router._routes_version)


def embeds_body_fields(route: Any) -> bool:
    """Whether a route's body is a field of the JSON object rather than the object itself (`_embed_body_fields`)."""
    return bool(route._embed_body_fields)


def native_telemetry_on(app: Any) -> bool:
    """Whether FastAPI's own telemetry layer does anything (`_native_telemetry`; the fast path is off when it does)."""
    return bool(app._native_telemetry.enabled())


# an effective route context (FastAPI's `_EffectiveRouteContext`) and an included router (`_IncludedRouter`), as
# the fast path reads them: public attributes of private classes, checked by tests/test_compat.py
ROUTE_CONTEXT_ATTRIBUTES = ("original_route", "path_format", "path_regex", "param_convertors", "endpoint", "methods")
INCLUDED_ROUTER_ATTRIBUTES = ("original_router", "include_context", "effective_route_contexts", "effective_candidates")

CONTRACT: Mapping[str, Callable[..., Any]] = {
    "get_body_limit_error": get_body_limit_error,
    "field_annotation_is_sequence": field_annotation_is_sequence,
    "is_async_gen_callable": is_async_gen_callable,
    "is_coroutine_callable": is_coroutine_callable,
    "is_gen_callable": is_gen_callable,
    "param_aliases": param_aliases,
    "param_model": param_model,
    "is_json_field": is_json_field,
    "validate_value_with_model_field": validate_value_with_model_field,
    "update_scope": update_scope,
    "extract_endpoint_context": extract_endpoint_context,
    "route_selected": route_selected,
}
# the parameters lakewarden passes to each function above, by name or position (tests/test_compat.py)
PARAMETERS = {
    "get_body_limit_error": ["exc"],
    "field_annotation_is_sequence": ["annotation"],
    "is_async_gen_callable": ["call"],
    "is_coroutine_callable": ["call"],
    "is_gen_callable": ["call"],
    "param_aliases": ["field"],
    "param_model": ["field"],
    "is_json_field": ["field"],
    "validate_value_with_model_field": ["field", "value", "values", "loc"],
    "update_scope": ["scope", "child_scope"],
    "extract_endpoint_context": ["func"],
    "route_selected": ["scope", "path"],
}
