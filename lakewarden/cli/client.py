"""A small HTTP client of the ams API; every failure becomes one ClientError line."""

from __future__ import annotations

from typing import Any

import httpx


class ClientError(Exception):
    """A request failed; the message is what to tell the user."""


class AmsClient:
    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, f"/api/v1{path}", **kwargs)
        except httpx.ConnectError:
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
