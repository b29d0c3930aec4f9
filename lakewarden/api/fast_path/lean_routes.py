"""Request handling planned once per route: what FastAPI works out again for every request, worked out at start.

A `LeanRoute` (FastAPI's own `route_class` hook) plans its handler when built: dependencies in FastAPI's order,
each parameter's request key and default. Per request it validates with FastAPI's own functions, so values and
errors stay FastAPI's. Only routes whose handling is all of that are planned (an endpoint answering its own
`Response`, plain or coroutine dependencies, no cookies, forms or files); every other route, and every route
while `app.dependency_overrides` is set, keeps FastAPI's handler."""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from fastapi import params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies import utils as dependency_utils
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.routing import APIRoute
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined as Undefined
from starlette.datastructures import Headers, ImmutableMultiDict
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from lakewarden._compat.fastapi import (
    EFFECTIVE_ROUTE,
    FASTAPI_SCOPE,
    effective_route_context,
    embeds_body_fields,
    field_annotation_is_sequence,
    get_body_limit_error,
    is_async_gen_callable,
    is_coroutine_callable,
    is_gen_callable,
    is_json_field,
    param_aliases,
    param_model,
    validate_value_with_model_field,
)
from lakewarden.api.threads import in_thread

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
IMMUTABLE = (type(None), bool, int, float, str, bytes)


class LeanRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        fallback = super().get_route_handler()
        # FastAPI builds an included route's handler with the inclusion's context (its prefix, its dependencies)
        # set in a context variable; the plan is made of the same context
        context = effective_route_context.get()
        route = context if context is not None and context.original_route is self else self
        plan = Plan.of(route)
        if plan is None:
            return fallback
        if getattr(route, "max_body_size", None) is None:  # FastAPI's own body limit: FastAPI's wrapping
            self.__dict__.setdefault("_planned", {})[id(route)] = (route, plan)
        provider = route.dependency_overrides_provider

        async def handler(request: Request) -> Response:
            """Inside FastAPI's wrapping (a route with a body limit, or overrides set): the plan, or FastAPI's
            own handler while dependencies are overridden."""
            if getattr(provider, "dependency_overrides", None):
                return await fallback(request)
            return await plan.handle(request)

        return handler

    @staticmethod
    def planned(context: Any) -> tuple[Any, Plan] | None:
        """The plan of a route as included (FastAPI's effective context of it), with that context; None for a
        route not planned (or not a LeanRoute)."""
        route = context.original_route
        return route._plan_of(context) if isinstance(route, LeanRoute) else None

    def _plan_of(self, route: Any) -> tuple[Any, Plan] | None:
        """The plan made for this route as `route` (itself, or FastAPI's context of it as included), if one was."""
        found: tuple[Any, Plan] | None = self.__dict__.get("_planned", {}).get(id(route))
        return found

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A planned route is answered here, without FastAPI's wrapping of its handler (exit stacks for
        dependencies with `yield`, which a plan has none of; an exception handling that the application's own
        handles the same way, with the same handlers, one step further out)."""
        context = (scope.get(FASTAPI_SCOPE) or {}).get(EFFECTIVE_ROUTE)
        planned = self._plan_of(context if context is not None and context.original_route is self else self)
        if planned is None:
            await super().handle(scope, receive, send)
            return
        route, plan = planned
        overrides = getattr(route.dependency_overrides_provider, "dependency_overrides", None)
        if overrides or (route.methods and scope["method"] not in route.methods):
            await super().handle(scope, receive, send)  # FastAPI's handler (overrides), or its 405
            return
        response = await plan.handle(Request(scope, receive, send))
        await response(scope, receive, send)


@dataclass
class Params:
    """The parameters of one kind (path, query, header) of a dependant, with their request keys."""

    fields: list[Any]
    keys: list[str]  # each field's first request key
    names: list[str]  # every request key of every field (a field may go by several)
    defaults: dict[str, Any] | None  # the values when none is sent; None if one is required or must be copied
    plain: bool  # path parameters that are strings: the value sent is the value
    reads: list[tuple[Any, list[str], bool, bool, str]]  # each field's read, worked out once (see `read`)

    @classmethod
    def of(cls, fields: list[Any]) -> Params | None:
        keys, names, reads = [], [], []
        for f in fields:
            if param_model(f) is not None:  # a model of parameters: FastAPI's way only
                return None
            aliases = [key for _, key in param_aliases(f)]
            keys.append(aliases[0])
            names.extend(aliases)
            # what FastAPI's request_params_to_args asks of the field's type again for every request
            sequence = field_annotation_is_sequence(f.field_info.annotation)
            every = sequence and not is_json_field(f)  # all the values sent under its key
            reads.append((f, aliases, every, sequence, f.field_info.in_.value))
        defaults: dict[str, Any] | None = {}
        for f in fields:
            info: FieldInfo = f.field_info
            if info.is_required() or info.validate_default or not isinstance(f.default, IMMUTABLE):
                defaults = None
                break
            defaults[f.name] = f.default  # type: ignore[index]
        plain = all(isinstance(f.field_info, params.Path) and f.field_info.annotation is str for f in fields)
        return cls(fields, keys, names, defaults, plain, reads)

    def read(self, received: Any, values: dict[str, Any], errors: list[Any]) -> None:
        if self.plain and all(key in received for key in self.keys):
            for f, key in zip(self.fields, self.keys, strict=True):
                values[f.name] = received[key]
            return
        if self.defaults is not None and not any(name in received for name in self.names):
            values.update(self.defaults)
            return
        # FastAPI's request_params_to_args (0.165) for fields that are not models, with what it works out of
        # each field's type done once: the first key sent (else the first key), every value sent under it for
        # a sequence, nothing sent (or an empty sequence) as no value; validated by FastAPI's own function
        multiple = isinstance(received, ImmutableMultiDict | Headers)
        for f, aliases, every, sequence, kind in self.reads:
            alias = next((key for key in aliases if key in received), aliases[0])
            value = received.getlist(alias) if every and multiple else received.get(alias, None)
            if value is None or (sequence and len(value) == 0):
                value = Undefined
            found, problems = validate_value_with_model_field(field=f, value=value, values=values, loc=(kind, alias))
            if problems:
                errors.extend(problems)
            else:
                values[f.name] = found


@dataclass
class Step:
    """A dependant planned: the endpoint, or one of its dependencies."""

    call: Callable[..., Any]
    name: str | None
    use_cache: bool
    coroutine: bool
    path: Params | None
    query: Params | None
    header: Params | None
    request_param: str | None
    subs: list[Step] = field(default_factory=list)

    @classmethod
    def of(cls, dependant: Dependant, top: bool) -> Step | None:
        call = dependant.call
        unsupported = (
            dependant.cookie_params
            or (dependant.body_params and not top)
            or dependant.websocket_param_name
            or dependant.http_connection_param_name
            or dependant.response_param_name
            or dependant.background_tasks_param_name
            or dependant.security_scopes_param_name
            or dependant.own_oauth_scopes
            or dependant.parent_oauth_scopes
            or dependant.concurrency is not None
            or is_gen_callable(call)
            or is_async_gen_callable(call)
        )
        if unsupported or call is None:
            return None
        kinds = []
        for fields in (dependant.path_params, dependant.query_params, dependant.header_params):
            planned = Params.of(fields) if fields else None
            if fields and planned is None:
                return None
            kinds.append(planned)
        subs = [Step.of(sub, top=False) for sub in dependant.dependencies]
        if any(sub is None for sub in subs):
            return None
        return cls(
            call=call,
            name=dependant.name,
            use_cache=dependant.use_cache,
            coroutine=is_coroutine_callable(call),
            path=kinds[0],
            query=kinds[1],
            header=kinds[2],
            request_param=dependant.request_param_name,
            subs=subs,  # type: ignore[arg-type]
        )

    async def solve(self, request: Request, cache: dict[Any, Any]) -> tuple[dict[str, Any], list[Any]]:
        """The values of this step's parameters, dependencies first (in FastAPI's order, each called once per
        request unless it asks not to be cached), then its own parameters; or the errors."""
        values: dict[str, Any] = {}
        errors: list[Any] = []
        for sub in self.subs:
            sub_values, sub_errors = await sub.solve(request, cache)
            if sub_errors:
                errors.extend(sub_errors)
                continue
            if sub.use_cache and sub.call in cache:
                solved = cache[sub.call]
            elif sub.coroutine:
                solved = await sub.call(**sub_values)
            else:
                solved = await in_thread(sub.call, **sub_values)
            if sub.name is not None:
                values[sub.name] = solved
            cache.setdefault(sub.call, solved)
        if self.path is not None:
            self.path.read(request.path_params, values, errors)
        if self.query is not None:
            if self.query.defaults is not None and not request.scope.get("query_string"):
                values.update(self.query.defaults)  # nothing sent: no query string to parse
            else:
                self.query.read(request.query_params, values, errors)
        if self.header is not None:
            self.header.read(request.headers, values, errors)
        if self.request_param is not None:
            values[self.request_param] = request
        return values, errors


@dataclass
class Plan:
    top: Step
    body_fields: list[Any]
    embed_body_fields: bool
    strict_content_type: bool

    @classmethod
    def of(cls, route: Any) -> Plan | None:
        """The plan of a route (an `APIRoute`, or FastAPI's context of one as included), or None."""
        streams = getattr(route, "stream_item_field", None) is not None or getattr(route, "is_json_stream", False)
        if route.response_field is not None or streams:
            return None  # an answer FastAPI serializes
        body = route.body_field
        if body is not None and isinstance(body.field_info, (params.Form, params.File)):
            return None
        top = Step.of(route.dependant, top=True)
        if top is None:
            return None
        strict = route.strict_content_type
        strict = strict.value if isinstance(strict, DefaultPlaceholder) else strict
        return cls(top, list(route.dependant.body_params), embeds_body_fields(route), bool(strict))

    async def handle(self, request: Request) -> Response:
        body = await self._read_body(request) if self.body_fields else Undefined
        values, errors = await self.top.solve(request, {})
        if self.body_fields:
            found, problems = await dependency_utils.request_body_to_args(
                body_fields=self.body_fields, received_body=body, embed_body_fields=self.embed_body_fields
            )
            values.update(found)
            errors.extend(problems)
        if errors:
            raise RequestValidationError(errors, body=None if body is Undefined else body)
        if self.top.coroutine:
            answer = await self.top.call(**values)
        else:
            answer = await in_thread(self.top.call, **values)
        if not isinstance(answer, Response):
            # the endpoint promised a Response (its annotation): FastAPI would fail here as well
            raise TypeError(f"{self.top.call.__qualname__} answered {type(answer).__name__}, not a Response")
        return answer

    async def _read_body(self, request: Request) -> Any:
        """The body, or FastAPI's errors: a 400 for JSON that does not parse (its position), a body too large
        for a limit set in FastAPI, a 400 for any other failure to read it (bytes that are not UTF-8)."""
        try:
            return await self._body(request)
        except (RequestValidationError, HTTPException):
            raise
        except Exception as exc:
            if MAX_BODY_SIZE_SCOPE_KEY in request.scope and (error := get_body_limit_error(exc)):
                raise error from exc
            raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc

    async def _body(self, request: Request) -> Any:
        """The body as FastAPI reads it: JSON when declared so (or undeclared, when not strict), else bytes."""
        data = await request.body()
        if not data:
            return Undefined
        kind = request.headers.get("content-type")
        if not kind:
            return _json(data) if not self.strict_content_type else data
        return _json(data) if _is_json(kind) else data


def _is_json(content_type: str) -> bool:
    known = _JSON_TYPES.get(content_type)
    if known is None:
        message = email.message.Message()
        message["content-type"] = content_type
        subtype = message.get_content_subtype()
        known = message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))
        if len(_JSON_TYPES) < 100:
            _JSON_TYPES[content_type] = known
    return known


_JSON_TYPES: dict[str, bool] = {}


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
        raise RequestValidationError([{**error, "ctx": {"error": exc.msg}}], body=exc.doc) from exc
