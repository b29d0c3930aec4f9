"""Storage profiles and vended credentials: an internal catalog whose warehouse is in S3 (moto's server,
with IAM authentication on), used by pyiceberg through lakewarden with no storage settings on the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from moto.iam.access_control import IAMPolicy, PermissionResult
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from lakewarden.domain.errors import InvalidField, StorageUnavailable
from lakewarden.domain.storage import Access, StorageProfile, Vending, session_policy, table_prefixes
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from tests.s3 import BUCKET, REGION, S3Server, s3_server
from tests.servers import ServerProcess, started_server

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}


# ---- the profile's rules


def s3_properties(**extra: str) -> dict[str, str]:
    return {"warehouse": "s3://lake/wh", "s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-1", **extra}


@pytest.mark.parametrize(
    ("properties", "field"),
    [
        ({"warehouse": "/data/wh", "s3.endpoint": "http://x"}, "properties.s3.endpoint"),
        ({"warehouse": "gs://b/wh", "s3.region": "x"}, "properties.warehouse"),
        ({"warehouse": "s3:///wh"}, "properties.warehouse"),
        (s3_properties(**{"s3.endpoint": "ftp://x"}), "properties.s3.endpoint"),
        (s3_properties(**{"s3.path-style-access": "yes"}), "properties.s3.path-style-access"),
        (s3_properties(**{"s3.access-key-id": "AKIA"}), "properties.s3.secret-access-key"),
        (s3_properties(**{"credentials.role-arn": "tables"}), "properties.credentials.role-arn"),
        (s3_properties(**{"credentials.vending": "sts"}), "properties.credentials.role-arn"),
        (s3_properties(**{"credentials.vending": "static-keys"}), "properties.s3.access-key-id"),
        (s3_properties(**{"credentials.vending": "always"}), "properties.credentials.vending"),
        (s3_properties(**{"credentials.duration": "5min"}), "properties.credentials.duration"),
        (s3_properties(**{"credentials.duration": "13h"}), "properties.credentials.duration"),
        (s3_properties(**{"credentials.duration": "soon"}), "properties.credentials.duration"),
        (s3_properties(**{"credentials.sts-endpoint": "sts"}), "properties.credentials.sts-endpoint"),
    ],
)
def test_a_bad_profile_names_its_property(properties: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidField) as refused:
        StorageProfile.of(properties)
    assert refused.value.field == field


def test_what_a_profile_tells_clients_and_whom_it_vends_to() -> None:
    local = StorageProfile.of({"warehouse": "/data/wh"})
    assert not local.s3 and local.client_config() == {} and not local.vends(Access.WRITE)

    keys = {"s3.access-key-id": "AKIA1", "s3.secret-access-key": "secret"}
    static = StorageProfile.of(s3_properties(**keys, **{"s3.path-style-access": "true"}))
    assert static.vending is Vending.STATIC_KEYS
    # no secret in what every client is told; path style said the way Java and pyiceberg each read it
    assert static.client_config() == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "client.region": "eu-west-1",
        "s3.region": "eu-west-1",
        "s3.path-style-access": "true",
        "s3.force-virtual-addressing": "false",
    }
    # static keys cannot be narrowed to one table: only writers get them
    assert static.vends(Access.WRITE) and not static.vends(Access.READ)
    assert static.server_io_properties({"warehouse": "s3://lake/wh"})["s3.secret-access-key"] == "secret"

    sts = StorageProfile.of(s3_properties(**keys, **{"credentials.role-arn": "arn:aws:iam::1:role/t"}))
    assert sts.vending is Vending.STS and sts.vends(Access.READ) and sts.duration_seconds == 3600
    off = StorageProfile.of(s3_properties(**keys, **{"credentials.vending": "none"}))
    assert not off.vends(Access.WRITE)
    assert StorageProfile.of(s3_properties(**{"credentials.duration": "15min"})).duration_seconds == 900
    assert static.fingerprint != StorageProfile.of(s3_properties(**keys)).fingerprint


def test_a_session_policy_reaches_the_tables_prefixes_and_nothing_else() -> None:
    prefixes = table_prefixes("s3://lake/wh/db/t1", ["s3://lake/wh/db/t1/data", "s3://lake/wh/other/t1-data/"])
    assert prefixes == ["s3://lake/wh/db/t1/", "s3://lake/wh/other/t1-data/"]  # nested ones dropped

    def allowed(policy: str, action: str, key: str) -> bool:
        result = IAMPolicy(policy).is_action_permitted(action, f"arn:aws:s3:::{key}")  # moto's IAM evaluator
        return bool(result == PermissionResult.PERMITTED)

    write, read = session_policy(prefixes, Access.WRITE), session_policy(prefixes, Access.READ)
    for key in ("lake/wh/db/t1/data/a.parquet", "lake/wh/other/t1-data/b.parquet"):
        assert allowed(write, "s3:GetObject", key) and allowed(write, "s3:PutObject", key)
        assert allowed(read, "s3:GetObject", key) and not allowed(read, "s3:PutObject", key)
        assert not allowed(read, "s3:DeleteObject", key)
    for neighbour in ("lake/wh/db/t10/data/a.parquet", "lake/wh/db/t2/x", "other/wh/db/t1/x"):
        assert not allowed(write, "s3:GetObject", neighbour), neighbour
    listing = [s for s in json.loads(read)["Statement"] if s["Action"] == "s3:ListBucket"]
    assert listing == [
        {
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::lake",
            "Condition": {
                "StringLike": {"s3:prefix": ["wh/db/t1/*", "wh/db/t1", "wh/other/t1-data/*", "wh/other/t1-data"]}
            },
        }
    ]


# ---- against an S3- and STS-compatible server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


def test_temporary_credentials_are_kept_for_half_their_life(s3: S3Server) -> None:
    now = [1_000_000_000.0]
    vendor = CredentialVendor(clock=lambda: now[0])
    profile = StorageProfile.of(
        s3_properties(
            **{
                "s3.endpoint": s3.endpoint,
                "s3.region": REGION,
                "s3.access-key-id": s3.access_key_id,
                "s3.secret-access-key": s3.secret_access_key,
                "credentials.role-arn": s3.role_arn,
                "credentials.sts-endpoint": s3.endpoint,
                "credentials.duration": "1h",
            }
        )
    )
    prefixes = ["s3://lake/wh/db/t/"]
    first = vendor.storage_credentials(profile, prefixes, Access.WRITE, "alice")
    assert first[0]["prefix"] == prefixes[0] and first[0]["config"]["s3.session-token"]
    assert vendor.cached(profile, prefixes, Access.WRITE) and not vendor.cached(profile, prefixes, Access.READ)
    again = vendor.storage_credentials(profile, prefixes, Access.WRITE, "alice")
    assert again[0]["config"]["s3.access-key-id"] == first[0]["config"]["s3.access-key-id"]
    # moto's expiry is on the real clock: the kept credentials are reused until half of it is gone
    expires = int(first[0]["config"]["s3.session-token-expires-at-ms"]) / 1000
    now[0] = expires - 60
    assert not vendor.cached(profile, prefixes, Access.WRITE)
    renewed = vendor.storage_credentials(profile, prefixes, Access.WRITE, "alice")
    assert renewed[0]["config"]["s3.access-key-id"] != first[0]["config"]["s3.access-key-id"]

    wrong = StorageProfile.of(
        s3_properties(
            **{
                "s3.endpoint": s3.endpoint,
                "s3.access-key-id": "AKIANOTISSUED",
                "s3.secret-access-key": "nope",
                "credentials.role-arn": s3.role_arn,
                "credentials.sts-endpoint": s3.endpoint,
            }
        )
    )
    with pytest.raises(StorageUnavailable, match="STS refused"):
        vendor.storage_credentials(wrong, prefixes, Access.READ, "alice")


def register(server: ServerProcess, name: str, properties: dict[str, str]) -> httpx.Response:
    return server.http.post(
        f"{server.url}/api/v1/catalogs", json={"name": name, "type": "internal", "properties": properties}
    )


def s3_catalog(s3: S3Server, warehouse: str, **extra: str) -> dict[str, str]:
    return {
        "warehouse": warehouse,
        "s3.endpoint": s3.endpoint,
        "s3.region": REGION,
        "s3.path-style-access": "true",
        "s3.access-key-id": s3.access_key_id,
        "s3.secret-access-key": s3.secret_access_key,
        **extra,
    }


@pytest.fixture(scope="module")
def lake_server(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[ServerProcess]:
    with started_server(tmp_path_factory.mktemp("server")) as server:
        sts = {"credentials.role-arn": s3.role_arn, "credentials.sts-endpoint": s3.endpoint}
        assert register(server, "s3lake", s3_catalog(s3, f"s3://{BUCKET}/wh", **sts)).status_code == 201
        assert register(server, "keyed", s3_catalog(s3, f"s3://{BUCKET}/keyed")).status_code == 201
        yield server


@pytest.fixture
def no_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The client has no storage settings of its own: no keys, no profile, no instance metadata."""
    import os

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.slow
@pytest.mark.usefixtures("no_aws_settings")
def test_pyiceberg_creates_writes_reads_commits_and_purges_on_s3_through_lakewarden(
    lake_server: ServerProcess, s3: S3Server
) -> None:
    s3.client().put_object(Bucket=BUCKET, Key="outside/keep.txt", Body=b"not lakewarden's")
    earlier = len(s3.session_policies())  # the module's other tests assumed roles too
    catalog = RestCatalog("s3lake", uri=f"{lake_server.url}/iceberg", warehouse="s3lake", token=lake_server.token)
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", SCHEMA)
    location = table.metadata.location
    assert location.startswith(f"s3://{BUCKET}/wh/db/events-")
    table.append(pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array(["a"] * 100)}))
    table.append(pa.table({"id": pa.array(range(100, 150), pa.int64()), "v": pa.array(["b"] * 50)}))
    table.delete("id < 10")  # a commit that rewrites a data file
    again = catalog.load_table("db.events")
    assert sorted(again.scan().to_arrow()["id"].to_pylist()) == list(range(10, 150))
    key_prefix = location.removeprefix(f"s3://{BUCKET}/") + "/"
    written = s3.keys(key_prefix)
    assert any(k.endswith(".parquet") for k in written) and any(k.endswith(".metadata.json") for k in written)

    # what the client was given: temporary credentials for the table's prefix alone, and how to refresh them
    base = f"{lake_server.url}/iceberg/v1/s3lake/namespaces/db/tables/events"
    loaded = lake_server.http.get(base, headers=VENDED).json()
    (credential,) = loaded["storage-credentials"]
    assert credential["prefix"] == location + "/"
    assert credential["config"]["s3.access-key-id"].startswith("ASIA") and credential["config"]["s3.session-token"]
    assert loaded["config"]["s3.endpoint"] == s3.endpoint and loaded["config"]["s3.path-style-access"] == "true"
    assert (
        loaded["config"]["client.refresh-credentials-endpoint"] == "v1/s3lake/namespaces/db/tables/events/credentials"
    )
    assert "s3.secret-access-key" not in loaded["config"]
    refreshed = lake_server.http.get(f"{base}/credentials").json()["storage-credentials"]
    assert [c["prefix"] for c in refreshed] == [location + "/"]
    policies = s3.session_policies()[earlier:]
    assert policies and all(
        f"arn:aws:s3:::{BUCKET}/{key_prefix}*" in statement["Resource"]
        for policy in policies
        for statement in policy["Statement"]
        if statement["Action"] != "s3:ListBucket" and statement["Action"] != "s3:GetBucketLocation"
    )
    # the vended keys are real keys of the storage: they read the table's files
    vended = s3.client(
        access_key_id=credential["config"]["s3.access-key-id"],
        secret_access_key=credential["config"]["s3.secret-access-key"],
        session_token=credential["config"]["s3.session-token"],
    )
    assert vended.head_object(Bucket=BUCKET, Key=written[0])["ContentLength"] > 0
    # without the header nothing is vended; keys moto never issued are refused
    plain = lake_server.http.get(base).json()
    assert "storage-credentials" not in plain and plain["config"]["s3.region"] == REGION
    with pytest.raises(Exception, match="InvalidAccessKeyId"):
        s3.client(access_key_id="AKIANOTISSUED", secret_access_key="x").get_object(Bucket=BUCKET, Key=written[0])

    catalog.purge_table("db.events")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("db.events")
    # every file is gone; what stays is pyarrow's zero-byte directory markers, as empty directories stay
    # in a local warehouse
    assert [k for k in _eventually_empty(s3, key_prefix) if not k.endswith("/")] == []
    assert s3.keys("outside/") == ["outside/keep.txt"]  # nothing outside the table is touched


def _eventually_empty(s3: S3Server, prefix: str) -> list[str]:
    """The purge runs after the drop answers (a background task): wait for the table's files to go."""
    import time

    deadline = time.monotonic() + 30
    files = [k for k in s3.keys(prefix) if not k.endswith("/")]
    while files and time.monotonic() < deadline:
        time.sleep(0.2)
        files = [k for k in s3.keys(prefix) if not k.endswith("/")]
    return s3.keys(prefix)


@pytest.mark.slow
@pytest.mark.usefixtures("no_aws_settings")
def test_a_table_writing_under_two_prefixes_is_renewed_with_one_credential_that_reaches_both(
    lake_server: ServerProcess, s3: S3Server
) -> None:
    """loadTable vends a credential per prefix (the location and `write.data.path` elsewhere); `/credentials`, which
    Iceberg's S3FileIO renews from and which it refuses with more than one S3 credential, answers one, under the
    location, whose keys reach the data path too."""
    catalog = RestCatalog("s3lake", uri=f"{lake_server.url}/iceberg", warehouse="s3lake", token=lake_server.token)
    catalog.create_namespace("split")
    data_path = f"s3://{BUCKET}/wh/split-data"  # under the warehouse, beside the table
    table = catalog.create_table("split.t", SCHEMA, properties={"write.data.path": data_path})
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["x", "y"])}))
    (data_key,) = [k for k in s3.keys("wh/split-data/") if k.endswith(".parquet")]
    base = f"{lake_server.url}/iceberg/v1/s3lake/namespaces/split/tables/t"
    loaded = lake_server.http.get(base, headers=VENDED).json()
    location = table.metadata.location + "/"
    assert sorted(c["prefix"] for c in loaded["storage-credentials"]) == sorted([location, data_path + "/"])
    (renewed,) = lake_server.http.get(f"{base}/credentials").json()["storage-credentials"]
    assert renewed["prefix"] == location
    keys = renewed["config"]
    vended = s3.client(
        access_key_id=keys["s3.access-key-id"],
        secret_access_key=keys["s3.secret-access-key"],
        session_token=keys["s3.session-token"],
    )
    assert vended.head_object(Bucket=BUCKET, Key=data_key)["ContentLength"] > 0


@pytest.mark.usefixtures("no_aws_settings")
def test_readers_get_read_only_credentials_and_static_keys_go_to_writers_only(
    lake_server: ServerProcess, s3: S3Server
) -> None:
    admin = RestCatalog("s3lake", uri=f"{lake_server.url}/iceberg", warehouse="s3lake", token=lake_server.token)
    admin.create_namespace("shared")
    admin.create_table("shared.t", SCHEMA).append(pa.table({"id": pa.array([1], pa.int64()), "v": pa.array(["x"])}))
    api = lake_server.api()
    assert api.post("/principals", json={"name": "reader", "role": "viewer"}).status_code == 201
    for target in ("s3lake.shared", "keyed"):
        assert api.post("/principals/reader/grants", json={"target": target, "privilege": "read"}).status_code == 201
    token = api.post("/principals/reader/tokens", json={"name": "t"}).json()["token"]

    reader = RestCatalog("s3lake", uri=f"{lake_server.url}/iceberg", warehouse="s3lake", token=token)
    before = len(s3.session_policies())
    assert reader.load_table("shared.t").scan().to_arrow()["id"].to_pylist() == [1]  # reads with vended keys
    as_reader = {"Authorization": f"Bearer {token}", **VENDED}
    url = f"{lake_server.url}/iceberg/v1/s3lake/namespaces/shared/tables/t"
    httpx.get(f"{url}/credentials", headers=as_reader, timeout=30).raise_for_status()
    newest = s3.session_policies()[before:]
    assert len(newest) == 1  # one STS call for the reader: /credentials answered from the kept ones
    actions = {
        a
        for p in newest
        for s in p["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert "s3:GetObject" in actions and "s3:PutObject" not in actions  # a reader's policy only reads

    # static keys: the writer gets them, a reader gets none (they would open the whole bucket)
    keyed = RestCatalog("keyed", uri=f"{lake_server.url}/iceberg", warehouse="keyed", token=lake_server.token)
    keyed.create_namespace("db")
    keyed.create_table("db.t", SCHEMA).append(pa.table({"id": pa.array([2], pa.int64()), "v": pa.array(["y"])}))
    keyed_url = f"{lake_server.url}/iceberg/v1/keyed/namespaces/db/tables/t"
    writer_view = lake_server.http.get(keyed_url, headers=VENDED).json()
    assert writer_view["storage-credentials"][0]["config"]["s3.access-key-id"] == s3.access_key_id
    reader_view = httpx.get(keyed_url, headers=as_reader, timeout=30).json()
    assert "storage-credentials" not in reader_view
    assert httpx.get(f"{keyed_url}/credentials", headers=as_reader, timeout=30).json() == {"storage-credentials": []}


@pytest.mark.slow
def test_a_bad_storage_profile_is_refused_naming_the_property(lake_server: ServerProcess, s3: S3Server) -> None:
    refused = register(lake_server, "bad", s3_catalog(s3, f"s3://{BUCKET}/bad", **{"s3.endpoint": "ftp://x"}))
    assert refused.status_code == 400 and "properties.s3.endpoint" in refused.json()["error"]["message"]
    refused = register(lake_server, "bad", {"warehouse": "/tmp/bad", "credentials.role-arn": s3.role_arn})
    assert refused.status_code == 400 and "properties.credentials.role-arn" in refused.json()["error"]["message"]
    # a loadTable answer for a catalog whose STS refuses is the spec's 503, naming what was refused
    sts = {"credentials.role-arn": s3.role_arn, "credentials.sts-endpoint": "http://127.0.0.1:9"}
    assert register(lake_server, "nosts", s3_catalog(s3, f"s3://{BUCKET}/nosts", **sts)).status_code == 201
    catalog = RestCatalog("nosts", uri=f"{lake_server.url}/iceberg", warehouse="nosts", token=lake_server.token)
    catalog.create_namespace("db")
    url = f"{lake_server.url}/iceberg/v1/nosts/namespaces/db/tables/t"
    body = {"name": "t", "schema": json.loads(SCHEMA.model_dump_json())}
    created = lake_server.http.post(f"{lake_server.url}/iceberg/v1/nosts/namespaces/db/tables", json=body)
    assert created.status_code == 200, created.text  # no header: nothing to vend
    answer = lake_server.http.get(url, headers=VENDED)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "ServiceUnavailableException"
    assert "STS" in answer.json()["error"]["message"]
