"""A small HTTP client of the ams API; every failure becomes one ClientError line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx


class ClientError(Exception):
    """A request failed; the message is what to tell the user."""


def local_token() -> str | None:
    """The credential the CLI uses: LAKEWARDEN_TOKEN, else the file LAKEWARDEN_TOKEN_FILE names, else the
    admin token the server's first start wrote to its data directory (LAKEWARDEN_AMS__DATA_DIR or
    ~/.lakewarden), when this user may read it."""
    token = os.environ.get("LAKEWARDEN_TOKEN")
    if token:
        return token.strip()
    named = os.environ.get("LAKEWARDEN_TOKEN_FILE")
    data_dir = os.environ.get("LAKEWARDEN_AMS__DATA_DIR") or "~/.lakewarden"
    path = Path(named) if named else Path(data_dir).expanduser() / "admin.token"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class AmsClient:
    def __init__(self, base_url: str, timeout: float = 60.0, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        token = token or local_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, f"/api/v1{path}", **kwargs)
        except httpx.ConnectError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise ClientError(
                    f"the certificate of {self.base_url} is not trusted (CERTIFICATE_VERIFY_FAILED): set "
                    "SSL_CERT_FILE to the server's certificate (or its CA's)"
                ) from None
            raise ClientError(
                f"cannot reach the lakewarden server at {self.base_url} (is `lakewarden server` running?)"
            ) from None
        except httpx.HTTPError as exc:
            raise ClientError(f"request to {self.base_url} failed: {exc}") from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text.strip() or response.reason_phrase
            if response.status_code == 401:
                message += " — set LAKEWARDEN_TOKEN to an API token (or run where the server's admin.token is readable)"
            raise ClientError(f"{message} (HTTP {response.status_code})")
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)
