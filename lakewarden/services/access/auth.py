"""Authentication: who a bearer credential belongs to, and the tokens the server issues.

Accepted: API tokens (`lw_<id>_<secret>`, only the secret's SHA-256 stored; also OAuth2 client secrets), JWTs the
server signs (access tokens, dashboard sessions, a group's registration token, a task's table-scoped catalog
token) and the token an optimizer's registration returned. Lookups are cached for `auth.cache-ttl`, so a
revocation takes effect at once on its server and within the TTL on others."""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt
from pwdlib import PasswordHash

from lakewarden.config import AuthConfig
from lakewarden.domain.errors import NotAuthorized, TooManyRequests
from lakewarden.domain.security import Grant, Principal, PrincipalKind, Privilege, Role, optimizer_id
from lakewarden.store import processes as process_store
from lakewarden.store import security as store
from lakewarden.store.database import Database, as_utc, utcnow

log = logging.getLogger(__name__)

TOKEN_PREFIX = "lw_"
ADMIN = "admin"
ADMIN_TOKEN_FILE = "admin.token"
SECRET_KEY_FILE = "secret.key"
ISSUER = "lakewarden"
HOLD_CACHE_SECONDS = 2.0  # how long "this optimizer holds a task on that table" is believed
# JWT `use` claims: what a signed token is for
ACCESS, SESSION, REGISTER, CATALOG = "access", "session", "register-optimizer", "catalog"


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expires_in: int  # seconds


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (created with mode 0600, never wider for a moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)


def load_secret_key(config: AuthConfig, data_dir: Path) -> bytes:
    """The key that signs the server's tokens: LAKEWARDEN_SECRET_KEY, else the key file (created once)."""
    given = os.environ.get("LAKEWARDEN_SECRET_KEY")
    if given:
        return given.encode()
    path = config.secret_key_file or data_dir / SECRET_KEY_FILE
    path = path.expanduser()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # two servers starting: one wins
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    key = path.read_text().strip()
    if len(key) < 32:
        raise ValueError(f"the secret key in {path} is too short (at least 32 characters)")
    return key.encode()


class FailedLogins:
    """At most `limit` failed logins per client address within `window`; then 429 until they age out."""

    def __init__(self, limit: int, window: timedelta) -> None:
        self.limit = limit
        self.window = window.total_seconds()
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(client, deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures

    def check(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            failures = self._recent(client, now)
            if len(failures) >= self.limit:
                wait = int(failures[0] + self.window - now) + 1
                raise TooManyRequests(f"too many failed logins from {client}: try again in {wait} s", wait)

    def failed(self, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._recent(client, now).append(now)
            if len(self._failures) > 10_000:  # forget addresses with nothing recent
                for key in [k for k, v in self._failures.items() if not v]:
                    del self._failures[key]

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


class AuthService:
    def __init__(self, db: Database, config: AuthConfig, data_dir: Path, key: bytes | None = None) -> None:
        self.db = db
        self.config = config
        self.enabled = config.enabled
        self.data_dir = data_dir
        self._key = key or load_secret_key(config, data_dir)
        self.passwords = PasswordHash.recommended()
        self.failed_logins = FailedLogins(config.failed_login_limit, config.failed_login_window)
        self._cache: dict[str, tuple[float, Principal]] = {}  # key -> (valid until, principal)
        self._holds: dict[str, tuple[float, bool]] = {}  # holder+table -> (valid until, holds a task)
        self._lock = threading.Lock()
        self._cache_seconds = config.cache_ttl.total_seconds()

    # ---- first start

    def bootstrap(self) -> Path | None:
        """With no principal at all: create `admin` and its token, written to <data-dir>/admin.token (0600).
        Returns the file's path when it was written now."""
        with self.db.write() as session:
            if store.count_principals(session) > 0:
                return None
            store.create_principal(session, ADMIN, PrincipalKind.USER, Role.ADMIN)
            token = self._new_token(session, ADMIN, "first start", None)
        path = self.data_dir / ADMIN_TOKEN_FILE
        write_private(path, token + "\n")
        return path

    # ---- API tokens

    def create_token(self, principal: str, name: str, expires_in: timedelta | None) -> tuple[str, str]:
        """A new API token for `principal`: (token id, the token — shown once, never stored)."""
        with self.db.write() as session:
            token = self._new_token(session, principal, name, expires_in)
        return token.split("_")[1], token

    def _new_token(self, session: Any, principal: str, name: str, expires_in: timedelta | None) -> str:
        token_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        expires = None if expires_in is None else utcnow() + expires_in
        store.add_token(session, token_id, principal, name, _sha256(secret), expires)
        return f"{TOKEN_PREFIX}{token_id}_{secret}"

    def forget(self) -> None:
        """Drop every cached lookup (after a revocation, a deletion, a role or grant change here)."""
        with self._lock:
            self._cache.clear()
            self._holds.clear()

    # ---- authentication

    def authenticate(self, credential: str) -> Principal:
        """The principal a bearer credential belongs to; NotAuthorized when it is unknown, expired or revoked."""
        now = time.time()
        key = _sha256(credential)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            principal = cached[1]
            if principal.expires_at is not None and principal.expires_at <= now:
                raise NotAuthorized("the token has expired")
            return principal
        if credential.startswith(TOKEN_PREFIX):
            principal = self._api_token(credential)
        elif credential.count(".") == 2:
            principal = self._signed(credential)
        else:
            principal = self._optimizer(credential)
        until = now + self._cache_seconds
        if principal.expires_at is not None:
            until = min(until, principal.expires_at)
        with self._lock:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = (until, principal)
        return principal

    def _api_token(self, credential: str) -> Principal:
        _, _, rest = credential.partition(TOKEN_PREFIX)
        token_id, _, secret = rest.partition("_")
        with self.db.read() as session:
            row = store.find_token(session, token_id)
            if row is None or not hmac.compare_digest(row.secret_sha256, _sha256(secret)):
                raise NotAuthorized("unknown token")
            if row.revoked_at is not None:
                raise NotAuthorized(f"token {token_id} was revoked")
            if row.expires_at is not None and as_utc(row.expires_at) <= utcnow():
                raise NotAuthorized(f"token {token_id} has expired")
            principal = self._principal(session, row.principal, token_id)
            expires = None if row.expires_at is None else as_utc(row.expires_at).timestamp()
        return replace(principal, expires_at=expires)

    def _principal(self, session: Any, name: str, token_id: str | None) -> Principal:
        row = store.find_principal(session, name)
        if row is None:
            raise NotAuthorized(f"principal {name!r} no longer exists")
        grants = tuple(store.grants_of(session, name))
        return Principal(name=name, role=Role(row.role), grants=grants, kind=row.kind, token_id=token_id)

    def _signed(self, credential: str) -> Principal:
        try:
            claims = jwt.decode(
                credential, self._key, algorithms=["HS256"], issuer=ISSUER, options={"require": ["exp"]}
            )
        except jwt.ExpiredSignatureError:
            raise NotAuthorized("the token has expired") from None
        except jwt.InvalidTokenError:
            raise NotAuthorized("the token is not one this server signed") from None
        use, subject, expires = claims.get("use"), str(claims.get("sub", "")), float(claims["exp"])
        if use in (ACCESS, SESSION):
            token_id = claims.get("tid")
            with self.db.read() as session:
                if token_id is not None:
                    row = store.find_token(session, str(token_id))
                    if row is None or row.revoked_at is not None:
                        raise NotAuthorized("the token this access token was issued for was revoked")
                principal = self._principal(session, subject, token_id)
            return replace(principal, expires_at=expires, attributes={"use": use})
        if use == REGISTER:
            group = str(claims.get("group", ""))
            return Principal(name=f"optimizers of {group}", role=None, register_group=group, expires_at=expires)
        if use == CATALOG:
            grants = tuple(
                Grant(g["catalog"], Privilege(g["privilege"]), tuple(g.get("namespace", ())), g.get("table"))
                for g in claims.get("grants", [])
            )
            holder = claims.get("holder")
            return Principal(
                name=subject, role=None, grants=grants, kind="task", expires_at=expires, task_holder=holder
            )
        raise NotAuthorized("the token is not one this server signed")

    def _optimizer(self, credential: str) -> Principal:
        with self.db.read() as session:
            row = process_store.find_optimizer(session, credential)
            if row is None:
                raise NotAuthorized("unknown token (an optimizer token of a lost optimizer: register again)")
            group = row.group_name
        return Principal(name=f"optimizer of {group}", role=None, kind="optimizer", optimizer_token=credential)

    # ---- issuing

    def _sign(self, claims: dict[str, Any], ttl: timedelta) -> IssuedToken:
        # whole seconds, rounded up: the token lives at least the `expires_in` the client is told (a client
        # renews it shortly before that, e.g. Iceberg's at 90% of it)
        now = time.time()
        seconds = int(ttl.total_seconds())
        body = {**claims, "iss": ISSUER, "iat": int(now), "exp": math.ceil(now) + seconds, "jti": secrets.token_hex(8)}
        return IssuedToken(jwt.encode(body, self._key, algorithm="HS256"), seconds)

    def access_token(self, principal: Principal, use: str = ACCESS) -> IssuedToken:
        """An expiring token for a principal (OAuth2, the dashboard's session), tied to the API token it was
        obtained with: revoking that revokes this too."""
        ttl = self.config.session_ttl if use == SESSION else self.config.access_token_ttl
        return self._sign({"use": use, "sub": principal.name, "tid": principal.token_id}, ttl)

    def exchange(self, principal: Principal) -> IssuedToken:
        """A fresh token like the one presented (the REST client's refresh by token exchange)."""
        if principal.attributes.get("use") in (ACCESS, SESSION) or principal.token_id is not None:
            return self.access_token(principal, principal.attributes.get("use", ACCESS))
        if principal.kind == "task":
            ttl = self.config.access_token_ttl
            return self.catalog_token(principal.name, principal.grants, ttl, principal.task_holder)
        raise NotAuthorized("this token cannot be exchanged")

    def registration_token(self, group: str, ttl: timedelta = timedelta(days=7)) -> str:
        """What a container gives the optimizers it starts: registering with `group`, nothing else."""
        return self._sign({"use": REGISTER, "sub": f"group:{group}", "group": group}, ttl).token

    def catalog_token(
        self, subject: str, grants: Iterable[Grant], ttl: timedelta, holder: str | None = None
    ) -> IssuedToken:
        """Catalog access limited to `grants`, for `ttl`; with `holder` (an optimizer's id), a table only
        while that optimizer holds a task on it."""
        body = [
            {"catalog": g.catalog, "privilege": g.privilege.value, "namespace": list(g.namespace), "table": g.table}
            for g in grants
        ]
        claims: dict[str, Any] = {"use": CATALOG, "sub": subject, "grants": body}
        if holder is not None:
            claims["holder"] = holder
        return self._sign(claims, ttl)

    def holds_task(self, holder: str, catalog: str, namespace: tuple[str, ...], table: str) -> bool:
        """Whether the optimizer `holder` (optimizer_id) runs a task on the table now (cached 2 s)."""
        key = f"holds:{holder}:{catalog}:{namespace}:{table}"
        now = time.time()
        with self._lock:
            cached = self._holds.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        with self.db.read() as session:
            tokens = process_store.active_task_holders(session, catalog, ".".join(namespace), table)
        holds = any(optimizer_id(token) == holder for token in tokens)
        with self._lock:
            if len(self._holds) > 10_000:
                self._holds.clear()
            self._holds[key] = (now + HOLD_CACHE_SECONDS, holds)
        return holds

    # ---- logins

    def client_credentials(self, client_id: str, client_secret: str, client: str) -> Principal:
        """OAuth2 client credentials: the principal's name and one of its API tokens."""
        self.failed_logins.check(client)
        try:
            principal = self.authenticate(client_secret)
            if principal.name != client_id or principal.token_id is None:
                raise NotAuthorized("the client secret is not a token of that client")
        except NotAuthorized:
            self.failed_logins.failed(client)
            raise NotAuthorized("invalid client credentials") from None
        self.failed_logins.succeeded(client)
        return principal

    def login(self, name: str, password: str, client: str) -> Principal:
        """A user's name and password (the dashboard)."""
        self.failed_logins.check(client)
        with self.db.read() as session:
            row = store.find_principal(session, name)
            stored = None if row is None else row.password_hash
            ok = stored is not None and self.passwords.verify(password, stored)
            principal = self._principal(session, name, None) if ok else None
        if principal is None:
            self.failed_logins.failed(client)
            raise NotAuthorized("wrong name or password")
        self.failed_logins.succeeded(client)
        return principal

    def login_with_token(self, credential: str, client: str) -> Principal:
        """A token pasted into the dashboard's login form."""
        self.failed_logins.check(client)
        try:
            principal = self.authenticate(credential)
            if principal.role is None:
                raise NotAuthorized("this token cannot sign in")
        except NotAuthorized:
            self.failed_logins.failed(client)
            raise
        self.failed_logins.succeeded(client)
        return principal

    def hash_password(self, password: str) -> str:
        return self.passwords.hash(password)
