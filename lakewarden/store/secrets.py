"""Catalog secrets encrypted at rest: the values of secret properties (credential, token, passwords,
secret keys; domain/catalogs.SECRET_PROPERTIES) are stored as `enc:v1:<Fernet token>` and decrypted
when a row is read, so the database (and its backups) never hold them in the clear.

The key comes from the server's secret key (LAKEWARDEN_SECRET_KEY or <data-dir>/secret.key), derived
for this one purpose; servers sharing a database share it. `configure` is called once at start, before
any catalog row is written or read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import JSON
from sqlalchemy.types import TypeDecorator

from lakewarden.domain.catalogs import SECRET_PROPERTIES

PREFIX = "enc:v1:"
_fernet: Fernet | None = None


class SecretsUnavailable(RuntimeError):
    """A secret cannot be read: no key configured, or the key is not the one it was encrypted with."""


def configure(server_key: bytes) -> None:
    global _fernet
    derived = hmac.new(server_key, b"lakewarden catalog secrets v1", hashlib.sha256).digest()
    _fernet = Fernet(base64.urlsafe_b64encode(derived))


def seal(properties: dict[str, Any]) -> dict[str, Any]:
    """The properties as stored: secret values encrypted (already encrypted ones kept)."""
    if _fernet is None:
        return dict(properties)
    return {
        k: PREFIX + _fernet.encrypt(str(v).encode()).decode()
        if k in SECRET_PROPERTIES and not str(v).startswith(PREFIX)
        else v
        for k, v in properties.items()
    }


def unseal(properties: dict[str, Any]) -> dict[str, Any]:
    opened = {}
    for k, v in properties.items():
        if isinstance(v, str) and v.startswith(PREFIX):
            if _fernet is None:
                raise SecretsUnavailable(f"catalog property {k} is encrypted and no key is configured")
            try:
                v = _fernet.decrypt(v[len(PREFIX) :].encode()).decode()
            except InvalidToken:
                raise SecretsUnavailable(
                    f"catalog property {k} was encrypted with another secret key (LAKEWARDEN_SECRET_KEY)"
                ) from None
        opened[k] = v
    return opened


class SealedJSON(TypeDecorator[dict[str, Any]]):
    """A JSON column of properties whose secret values are encrypted in the database."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: Any) -> dict[str, Any] | None:
        return None if value is None else seal(value)

    def process_result_value(self, value: dict[str, Any] | None, dialect: Any) -> dict[str, Any] | None:
        return None if value is None else unseal(value)
