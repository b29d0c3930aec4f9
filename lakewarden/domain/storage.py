"""The storage profile of a catalog's warehouse: where its files are, how to reach them, and what a client is
given to read and write one table (pure rules; the STS call is services/rest_catalog/credentials.py).

A warehouse is a local directory or an S3 location reached through the `s3.*` properties Iceberg's S3FileIO names,
so one set of keys configures the server, pyiceberg and Spark. `credentials.*` says what a client asking for vended
credentials gets: STS credentials whose session policy names only the table's prefixes (read-only for a reader), or
static keys, vended to writers only since they cannot be narrowed. docs/rest-catalog.md lists the keys."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from lakewarden.domain.durations import parse_duration
from lakewarden.domain.errors import InvalidField

S3_SCHEMES = ("s3", "s3a", "s3n")
STS_MIN_SECONDS, STS_MAX_SECONDS = 900, 43_200  # what AssumeRole accepts
DEFAULT_DURATION_SECONDS = 3600
READ_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion")
WRITE_ACTIONS = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


class Vending(StrEnum):
    STS = "sts"
    STATIC_KEYS = "static-keys"
    NONE = "none"


class Access(StrEnum):
    """What the caller asking for credentials may do to the table."""

    READ = "read"
    WRITE = "write"


@dataclass(frozen=True)
class StorageProfile:
    warehouse: str
    s3: bool = False
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None
    vending: Vending = Vending.NONE
    role_arn: str | None = None
    sts_endpoint: str | None = None
    duration_seconds: int = DEFAULT_DURATION_SECONDS

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> StorageProfile:
        """The profile an internal catalog's properties describe; InvalidField names the property at fault."""
        warehouse = properties.get("warehouse", "")
        scheme = urlsplit(warehouse).scheme.lower()
        s3 = scheme in S3_SCHEMES
        if not s3:
            stray = sorted(k for k in properties if k.startswith(("s3.", "credentials.")))
            if stray and scheme not in ("", "file"):
                raise InvalidField(
                    "properties.warehouse", f"{scheme}:// warehouses are not supported; use s3:// or a path"
                )
            if stray:
                raise InvalidField(f"properties.{stray[0]}", "applies to an s3:// warehouse only")
            return cls(warehouse)
        if not urlsplit(warehouse).netloc:
            raise InvalidField("properties.warehouse", f"{warehouse!r} names no bucket: s3://bucket/prefix")
        endpoint = properties.get("s3.endpoint") or None
        if endpoint is not None:
            _check_url("properties.s3.endpoint", endpoint)
        path_style = _flag(properties, "s3.path-style-access")
        key_id = properties.get("s3.access-key-id") or None
        secret = properties.get("s3.secret-access-key") or None
        if (key_id is None) != (secret is None):
            missing = "s3.secret-access-key" if secret is None else "s3.access-key-id"
            raise InvalidField(
                f"properties.{missing}", "static keys need both s3.access-key-id and s3.secret-access-key"
            )
        role_arn = properties.get("credentials.role-arn") or None
        if role_arn is not None and not role_arn.startswith("arn:"):
            raise InvalidField("properties.credentials.role-arn", f"{role_arn!r} is not an ARN (arn:aws:iam::…:role/…)")
        sts_endpoint = properties.get("credentials.sts-endpoint") or None
        if sts_endpoint is not None:
            _check_url("properties.credentials.sts-endpoint", sts_endpoint)
        vending = _vending(properties.get("credentials.vending"), role_arn, key_id)
        return cls(
            warehouse,
            s3=True,
            endpoint=endpoint,
            region=properties.get("s3.region") or properties.get("client.region") or None,
            path_style=path_style,
            access_key_id=key_id,
            secret_access_key=secret,
            vending=vending,
            role_arn=role_arn,
            sts_endpoint=sts_endpoint,
            duration_seconds=_duration(properties.get("credentials.duration")),
        )

    @property
    def fingerprint(self) -> str:
        """Changes whenever what a client is told changes (ETags of loadTable answers include it)."""
        text = repr((self.endpoint, self.region, self.path_style, self.vending, self.access_key_id, self.role_arn))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def client_config(self) -> dict[str, str]:
        """What loadTable's `config` tells every client about reaching the files (no secrets)."""
        if not self.s3:
            return {}
        config: dict[str, str] = {}
        if self.endpoint:
            config["s3.endpoint"] = self.endpoint
        if self.region:
            config["client.region"] = self.region  # Java's name (the REST spec's)
            config["s3.region"] = self.region  # pyiceberg's
        config["s3.path-style-access"] = str(self.path_style).lower()  # Java's S3FileIO
        config["s3.force-virtual-addressing"] = str(not self.path_style).lower()  # pyiceberg's inverse
        return config

    def server_io_properties(self, connection: Mapping[str, str]) -> dict[str, str]:
        """The properties of the server's own FileIO (pyiceberg) for this warehouse."""
        properties = dict(connection)
        if self.s3:
            properties.update(self.client_config())
            if self.access_key_id and self.secret_access_key:
                properties["s3.access-key-id"] = self.access_key_id
                properties["s3.secret-access-key"] = self.secret_access_key
        return properties

    def vends(self, access: Access) -> bool:
        """Whether a caller with `access` is given credentials when it asks for them."""
        if self.vending is Vending.STS:
            return True
        return self.vending is Vending.STATIC_KEYS and access is Access.WRITE

    def static_credentials(self) -> dict[str, str]:
        assert self.access_key_id is not None and self.secret_access_key is not None
        return {"s3.access-key-id": self.access_key_id, "s3.secret-access-key": self.secret_access_key}


def table_prefixes(location: str, paths: Iterable[str] = ()) -> list[str]:
    """The storage prefixes one table's files live under: its location and any write paths its properties
    give, each ending in `/` so that a credential for `t1/` never matches `t10/`; nested ones dropped."""
    prefixes = sorted({p.rstrip("/") + "/" for p in (location, *paths) if p})
    return [p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)]


def session_policy(prefixes: Iterable[str], access: Access) -> str:
    """An IAM session policy allowing only the objects under `prefixes` (read, or read and write), and
    listing only them: temporary credentials for one table are no key to its neighbours."""
    objects: list[str] = []
    listings: dict[str, list[str]] = {}
    for prefix in prefixes:
        split = urlsplit(prefix)
        bucket, key = split.netloc, split.path.lstrip("/")
        objects.append(f"arn:aws:s3:::{bucket}/{key}*")
        listings.setdefault(bucket, []).extend([f"{key}*", key.rstrip("/")])
    actions = list(READ_ACTIONS) + (list(WRITE_ACTIONS) if access is Access.WRITE else [])
    statements: list[dict[str, object]] = [{"Effect": "Allow", "Action": actions, "Resource": objects}]
    for bucket, keys in sorted(listings.items()):
        statements.append(
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": keys}},
            }
        )
        statements.append({"Effect": "Allow", "Action": "s3:GetBucketLocation", "Resource": f"arn:aws:s3:::{bucket}"})
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


def _check_url(field: str, value: str) -> None:
    split = urlsplit(value)
    if split.scheme not in ("http", "https") or not split.netloc:
        raise InvalidField(field, f"{value!r} must be an http:// or https:// URL")


def _flag(properties: Mapping[str, str], key: str) -> bool:
    value = properties.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        raise InvalidField(f"properties.{key}", f"{value!r} is neither true nor false")
    return value == "true"


def _vending(value: str | None, role_arn: str | None, key_id: str | None) -> Vending:
    if not value:
        return Vending.STS if role_arn else Vending.STATIC_KEYS if key_id else Vending.NONE
    try:
        vending = Vending(value.strip().lower())
    except ValueError:
        raise InvalidField(
            "properties.credentials.vending", f"{value!r} is not one of sts, static-keys, none"
        ) from None
    if vending is Vending.STS and role_arn is None:
        raise InvalidField("properties.credentials.role-arn", "is required when credentials.vending is sts")
    if vending is Vending.STATIC_KEYS and key_id is None:
        raise InvalidField("properties.s3.access-key-id", "is required when credentials.vending is static-keys")
    return vending


def _duration(value: str | None) -> int:
    if not value:
        return DEFAULT_DURATION_SECONDS
    try:
        seconds = int(parse_duration(value).total_seconds())
    except ValueError as exc:
        raise InvalidField("properties.credentials.duration", str(exc)) from None
    if not STS_MIN_SECONDS <= seconds <= STS_MAX_SECONDS:
        raise InvalidField("properties.credentials.duration", "must be between 15min and 12h (what STS accepts)")
    return seconds
