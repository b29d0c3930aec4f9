"""Error responses: one body everywhere, the Iceberg REST ErrorModel shape.

    {"error": {"message": "properties.uri: is required for a sql catalog", "type": "BadRequestException", "code": 400}}

Bad input is a 4xx whose message names the field; nothing the user sends produces a 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from lakewarden.domain.errors import (
    AlreadyExists,
    CommitFailed,
    CommitStateUnknown,
    Conflict,
    Forbidden,
    InvalidField,
    LakewardenError,
    NamespaceNotEmpty,
    NoSuchNamespace,
    NoSuchPlan,
    NoSuchPlanTask,
    NoSuchTable,
    NoSuchView,
    NoSuchWarehouse,
    NotAuthorized,
    NotFound,
    NotLeader,
    Overloaded,
    StorageUnavailable,
    TooManyRequests,
    Unprocessable,
    Unsupported,
)
from lakewarden.store.failures import database_unavailable, first_line

log = logging.getLogger(__name__)

# most specific first: the first class an error is an instance of decides
_STATUS: dict[type[LakewardenError], tuple[int, str]] = {
    NotAuthorized: (401, "NotAuthorizedException"),
    Forbidden: (403, "ForbiddenException"),
    TooManyRequests: (429, "TooManyRequestsException"),
    CommitStateUnknown: (500, "CommitStateUnknownException"),
    NotLeader: (503, "ServiceUnavailableException"),
    Overloaded: (503, "ServiceUnavailableException"),
    StorageUnavailable: (503, "ServiceUnavailableException"),
    NoSuchNamespace: (404, "NoSuchNamespaceException"),
    NoSuchTable: (404, "NoSuchTableException"),
    NoSuchView: (404, "NoSuchViewException"),
    NoSuchPlan: (404, "NoSuchPlanIdException"),
    NoSuchPlanTask: (404, "NoSuchPlanTaskException"),
    NoSuchWarehouse: (404, "NoSuchWarehouseException"),
    NamespaceNotEmpty: (409, "NamespaceNotEmptyException"),
    CommitFailed: (409, "CommitFailedException"),
    Unprocessable: (422, "UnprocessableEntityException"),
    Unsupported: (406, "UnsupportedOperationException"),
    InvalidField: (400, "BadRequestException"),
    NotFound: (404, "NotFoundException"),
    AlreadyExists: (409, "AlreadyExistsException"),
    Conflict: (409, "CommitFailedException"),
}
_HTTP_TYPES = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NotFoundException",
    405: "MethodNotAllowedException",
    406: "NotAcceptableException",
    409: "ConflictException",
    413: "RequestEntityTooLargeException",
    415: "UnsupportedMediaTypeException",
    422: "UnprocessableEntityException",
    429: "TooManyRequestsException",
    503: "ServiceUnavailableException",
}


class ErrorModel(BaseModel):
    message: str
    type: str = Field(description="The Iceberg REST spec's exception name, e.g. NoSuchTableException")
    code: int


class ErrorResponse(BaseModel):
    """Every error of `/api/v1` and `/iceberg/v1`, shaped as the Iceberg REST spec's IcebergErrorResponse."""

    error: ErrorModel


# what any route may answer besides its success: documented on every route of the API and the REST catalog
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": description}
    for code, description in {
        400: "Bad request: the message names the field at fault",
        401: "No credential, or one that is unknown, expired or revoked",
        403: "The credential's role or grants do not allow this",
        404: "What the path names does not exist",
        406: "A REST catalog route this server does not serve",
        409: "Conflict with the current state (a concurrent change, a name taken)",
        413: "The request body is larger than http-server.max-body-size",
        415: "The request body is not JSON",
        422: "Well-formed but contradicting itself",
        429: "Too many failed logins from this address or for this name: wait for Retry-After",
        500: "A commit whose answer the system database lost: its state is unknown (CommitStateUnknownException)",
        503: "Not available now (no leader, storage or the system database unreachable, too many commits waiting): "
        "ask again after Retry-After",
    }.items()
}


def error_response(code: int, message: str, type_: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type_ or _HTTP_TYPES.get(code, "ServerError"), "code": code}}
    return JSONResponse(body, status_code=code)


def _field_of(loc: tuple[int | str, ...]) -> str:
    # drop the request part ("body", "query", "path") and the JSON-schema tags pydantic adds
    parts = [str(p) for p in loc[1:] if not (isinstance(p, str) and p.startswith(("function-", "json-or-python")))]
    return ".".join(parts) or str(loc[0] if loc else "request")


def install(app: FastAPI) -> None:
    @app.exception_handler(LakewardenError)
    async def _domain(_: Request, exc: LakewardenError) -> JSONResponse:
        for kind, (code, type_) in _STATUS.items():
            if isinstance(exc, kind):
                response = error_response(code, str(exc), type_)
                if isinstance(exc, NotAuthorized):
                    response.headers["WWW-Authenticate"] = 'Bearer realm="lakewarden"'
                elif isinstance(exc, TooManyRequests | Overloaded):
                    response.headers["Retry-After"] = str(exc.retry_after_seconds)
                elif isinstance(exc, NotLeader):
                    response.headers["Retry-After"] = "1"
                return response
        return error_response(400, str(exc), "BadRequestException")

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if not errors:
            return error_response(400, "malformed request")
        first = errors[0]
        if first.get("type") == "json_invalid":
            return error_response(
                400, f"request body is not valid JSON: {first.get('ctx', {}).get('error', '')}".rstrip(": ")
            )
        message = f"{_field_of(tuple(first.get('loc', ())))}: {first.get('msg', 'invalid')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return error_response(400, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(DBAPIError)
    async def _database(_: Request, exc: DBAPIError) -> JSONResponse:
        if not database_unavailable(exc):
            return await _unexpected(_, exc)
        # a commit whose answer was lost is CommitStateUnknown (store/database.py): this one committed nothing
        log.warning("the system database is unavailable: %s", first_line(exc.orig))
        response = error_response(503, f"the system database is unavailable ({type(exc.orig).__name__})")
        response.headers["Retry-After"] = "1"
        return response

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, f"internal error: {type(exc).__name__}", "ServerError")
