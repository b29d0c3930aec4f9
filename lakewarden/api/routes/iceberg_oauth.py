"""`POST /iceberg/v1/oauth/tokens`: the Iceberg REST spec's OAuth2 token endpoint, with the two grants Spark's,
Trino's and pyiceberg's clients use: client credentials (`credential=<principal>:<api token>`, answered with an
access token for `auth.access-token-ttl`) and token exchange (a valid token renewed before it expires).

Errors take the spec's OAuthError shape. Open without credentials, since it checks its own; failed client
credentials count as failed logins."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakewarden.api.auth import OPEN, Auth, client_address
from lakewarden.api.fast_path.lean_routes import LeanRoute
from lakewarden.domain.errors import NotAuthorized, TooManyRequests

router = APIRouter(tags=["iceberg rest catalog"], route_class=LeanRoute)
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
SUBJECT_TYPES = {ACCESS_TOKEN_TYPE, "urn:ietf:params:oauth:token-type:jwt"}


class OAuthError(BaseModel):
    """The spec's OAuthErrorResponse (RFC 6749 section 5.2)."""

    error: str = Field(description="invalid_request, invalid_client, unsupported_grant_type, slow_down, ...")
    error_description: str | None = None


OAUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": OAuthError, "description": "A malformed request or a grant type not supported"},
    401: {"model": OAuthError, "description": "The client or the subject token is not known"},
    429: {"model": OAuthError, "description": "Too many failed attempts: wait for Retry-After"},
}


def _oauth_error(status: int, error: str, description: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="lakewarden"'} if status == 401 else {}
    return JSONResponse({"error": error, "error_description": description}, status_code=status, headers=headers)


def _basic(request: Request) -> tuple[str | None, str | None]:
    """Client id and secret from `Authorization: Basic` (client_secret_basic), when sent that way."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        client_id, _, secret = base64.b64decode(value).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    return client_id, secret


@router.post("/oauth/tokens", responses=OAUTH_ERRORS, **OPEN)
def tokens(
    request: Request,
    auth: Auth,
    grant_type: Annotated[str | None, Form()] = None,
    scope: Annotated[str | None, Form()] = None,
    client_id: Annotated[str | None, Form()] = None,
    client_secret: Annotated[str | None, Form()] = None,
    subject_token: Annotated[str | None, Form()] = None,
    subject_token_type: Annotated[str | None, Form()] = None,
    actor_token: Annotated[str | None, Form()] = None,
    actor_token_type: Annotated[str | None, Form()] = None,
    requested_token_type: Annotated[str | None, Form()] = None,
) -> JSONResponse:
    """Exchange client credentials, or a token about to expire, for an access token."""
    try:
        if not grant_type:
            return _oauth_error(400, "invalid_request", "grant_type is required")
        if grant_type == "client_credentials":
            basic_id, basic_secret = _basic(request)
            client_id, client_secret = client_id or basic_id, client_secret or basic_secret
            if not client_id or not client_secret:
                return _oauth_error(400, "invalid_request", "client_credentials needs client_id and client_secret")
            principal = auth.client_credentials(client_id, client_secret, client_address(request))
            issued = auth.access_token(principal)
        elif grant_type == TOKEN_EXCHANGE:
            if not subject_token:
                return _oauth_error(400, "invalid_request", "token exchange needs subject_token")
            if subject_token_type not in SUBJECT_TYPES:
                return _oauth_error(
                    400, "invalid_request", f"subject_token_type {subject_token_type!r} is not supported"
                )
            principal = auth.authenticate(subject_token)
            issued = auth.exchange(principal)
        else:
            return _oauth_error(400, "unsupported_grant_type", f"grant_type {grant_type!r} is not supported")
    except TooManyRequests as exc:
        response = _oauth_error(429, "slow_down", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_seconds)
        return response
    except NotAuthorized as exc:
        return _oauth_error(401, "invalid_client", str(exc))
    body = {
        "access_token": issued.token,
        "token_type": "bearer",
        "expires_in": issued.expires_in,
        "issued_token_type": ACCESS_TOKEN_TYPE,
    }
    if scope:
        body["scope"] = scope
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
