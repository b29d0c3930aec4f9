"""Vended credentials: what a client that asks for them (`X-Iceberg-Access-Delegation: vended-credentials`)
is given to read and write one table's files, as the REST spec's `storage-credentials`.

With `credentials.vending: sts` the server assumes the catalog's role through STS (AWS, or any
STS-compatible endpoint) with a session policy naming only the table's prefixes (domain/storage.py), and
keeps the temporary credentials for reuse until half their lifetime is gone: a hot table costs one STS
call per half hour, not one per load. With `static-keys` a writer is given the server's keys.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from lakewarden.domain.errors import StorageUnavailable
from lakewarden.domain.storage import Access, StorageProfile, Vending, session_policy

MAX_KEPT = 10_000


class CredentialVendor:
    def __init__(self, clock: Any = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # (catalog fingerprint, prefixes, access) -> (config, expires at, reuse until)
        self._kept: OrderedDict[tuple[str, tuple[str, ...], Access], tuple[dict[str, str], float, float]] = (
            OrderedDict()
        )

    def storage_credentials(
        self, profile: StorageProfile, prefixes: list[str], access: Access, who: str
    ) -> list[dict[str, Any]]:
        """The spec's `storage-credentials` for one table: one entry per prefix, the same keys in each."""
        if not profile.vends(access):
            return []
        config = self._config(profile, prefixes, access, who)
        return [{"prefix": prefix, "config": dict(config)} for prefix in prefixes]

    def cached(self, profile: StorageProfile, prefixes: list[str], access: Access) -> bool:
        """Whether storage_credentials would answer without a call to STS."""
        if profile.vending is not Vending.STS:
            return True
        with self._lock:
            kept = self._kept.get((profile.fingerprint, tuple(prefixes), access))
        return kept is not None and self._clock() < kept[2]

    def _config(self, profile: StorageProfile, prefixes: list[str], access: Access, who: str) -> dict[str, str]:
        if profile.vending is Vending.STATIC_KEYS:
            return profile.static_credentials()
        key = (profile.fingerprint, tuple(prefixes), access)
        now = self._clock()
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and now < kept[2]:
                self._kept.move_to_end(key)
                return kept[0]
        config, expires = self._assume_role(profile, prefixes, access, who)
        with self._lock:
            self._kept[key] = (config, expires, now + (expires - now) / 2)
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return config

    @staticmethod
    def _assume_role(
        profile: StorageProfile, prefixes: list[str], access: Access, who: str
    ) -> tuple[dict[str, str], float]:
        import boto3  # an STS client only where STS is configured
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        assert profile.role_arn is not None
        client = boto3.client(
            "sts",
            endpoint_url=profile.sts_endpoint,
            region_name=profile.region or "us-east-1",
            aws_access_key_id=profile.access_key_id,
            aws_secret_access_key=profile.secret_access_key,
            config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}),
        )
        session = "".join(c if c.isalnum() or c in "=,.@-_" else "-" for c in f"lakewarden-{who}")[:64]
        try:
            answer = client.assume_role(
                RoleArn=profile.role_arn,
                RoleSessionName=session,
                Policy=session_policy(prefixes, access),
                DurationSeconds=profile.duration_seconds,
            )
        except (BotoCoreError, ClientError) as exc:
            raise StorageUnavailable(f"STS refused temporary credentials for {profile.role_arn}: {exc}") from None
        credentials = answer["Credentials"]
        expires = credentials["Expiration"].timestamp()
        config = {
            "s3.access-key-id": credentials["AccessKeyId"],
            "s3.secret-access-key": credentials["SecretAccessKey"],
            "s3.session-token": credentials["SessionToken"],
            # Java's S3FileIO refreshes before this instant (milliseconds since the epoch)
            "s3.session-token-expires-at-ms": str(int(expires * 1000)),
        }
        return config, expires
