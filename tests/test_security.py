"""Security: every route checked, roles and grants, tokens that expire and are revoked, OAuth2 client
credentials and static tokens from pyiceberg, the dashboard's cookie with CSRF, failed-login limits."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from lakewarden.domain.catalogs import CatalogSpec
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
# open without credentials: liveness, the OAuth2 token endpoint and the dashboard's sign-in/out check their own
OPEN = {
    ("GET", "/api/v1/health"),
    ("POST", "/iceberg/v1/oauth/tokens"),
    ("POST", "/api/v1/session"),
    ("DELETE", "/api/v1/session"),
}
OPERATOR_ROUTES = {
    ("POST", "/api/v1/catalogs/{name}/refresh"),
    ("POST", "/api/v1/resource-groups/{name}/scale"),
    ("POST", "/api/v1/processes/{process_id}/cancel"),
    ("POST", "/api/v1/tables/{catalog}/{database}/{table}/evaluate"),
    ("POST", "/api/v1/tables/{catalog}/{database}/{table}/actions/{action}"),
}
ADMIN_READS = {("GET", "/api/v1/principals"), ("GET", "/api/v1/principals/{name}"), ("GET", "/api/v1/tokens")}


def routes(client: TestClient) -> list[tuple[str, str]]:
    document = client.get("/openapi.json").json()
    found = [(method.upper(), path) for path, item in document["paths"].items() for method in item]
    assert len(found) > 50  # the whole API and the REST catalog
    return found


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def principal(client: TestClient, name: str, role: str, **grants: str) -> str:
    """A new principal with a token (and grants: target=privilege); returns the token."""
    assert client.post("/api/v1/principals", json={"name": name, "role": role}).status_code == 201
    for target, privilege in grants.items():
        body = {"target": target.replace("__", "."), "privilege": privilege}
        assert client.post(f"/api/v1/principals/{name}/grants", json=body).status_code == 201
    created = client.post(f"/api/v1/principals/{name}/tokens", json={"name": "test"})
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


def test_every_route_needs_credentials_and_the_right_role(client: TestClient) -> None:
    admin = client.headers.pop("Authorization")  # requests below carry only the credentials given
    client.headers["Authorization"] = admin
    viewer = principal(client, "vic", "viewer")
    operator = principal(client, "otto", "operator")
    del client.headers["Authorization"]
    checked = 0
    for method, path in routes(client):
        if (method, path) in OPEN:
            continue
        anonymous = client.request(method, concrete(path))
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        if method != "HEAD":  # a HEAD answer has no body
            assert anonymous.json()["error"]["type"] == "NotAuthorizedException"
        bad = client.request(method, concrete(path), headers={"Authorization": "Bearer lw_nope_nope"})
        assert bad.status_code == 401, (method, path)
        as_viewer = client.request(method, concrete(path), headers={"Authorization": f"Bearer {viewer}"})
        as_operator = client.request(method, concrete(path), headers={"Authorization": f"Bearer {operator}"})
        if path.startswith("/iceberg/"):
            if "{prefix}" in path:  # a viewer has no grant on any catalog
                assert as_viewer.status_code == 403, (method, path, as_viewer.text)
                if method != "HEAD":
                    assert as_viewer.json()["error"]["type"] == "ForbiddenException"
        elif (method, path) in ADMIN_READS:
            assert (as_viewer.status_code, as_operator.status_code) == (403, 403), (method, path)
        elif method in ("GET", "HEAD"):
            assert as_viewer.status_code != 403 and as_viewer.status_code != 401, (method, path, as_viewer.text)
        else:  # every write: refused to a viewer; an operator's only where marked
            assert as_viewer.status_code == 403, (method, path, as_viewer.text)
            if (method, path) in OPERATOR_ROUTES or path.startswith("/api/v1/optimizer/"):
                assert as_operator.status_code not in (401, 403), (method, path, as_operator.text)
            else:
                assert as_operator.status_code == 403, (method, path, as_operator.text)
        checked += 1
    assert checked > 45


def test_the_authorization_header_must_name_the_bearer_scheme(client: TestClient) -> None:
    """The scheme is matched in any case; another scheme, or none, is a 401 that says what is expected; the
    first Authorization header sent is the one read."""
    token = client.headers.pop("Authorization").partition(" ")[2]
    assert client.get("/api/v1/tables", headers={"Authorization": f"bEaReR {token}"}).status_code == 200
    for header in (f"Basic {token}", token, "Bearer ", "Bearer"):
        refused = client.get("/api/v1/tables", headers={"Authorization": header})
        assert refused.status_code == 401, header
        assert "`Bearer <token>`" in refused.json()["error"]["message"], refused.text
    twice = [("authorization", f"Bearer {token}"), ("authorization", "Bearer lw_nope_nope")]
    assert client.get("/api/v1/tables", headers=twice).status_code == 200
    assert client.get("/api/v1/tables", headers=twice[::-1]).status_code == 401


def test_tokens_expire_and_are_revoked_and_logins_are_limited(client: TestClient) -> None:
    token = principal(client, "temp", "viewer")
    me = client.get("/api/v1/session", headers={"Authorization": f"Bearer {token}"}).json()
    assert (me["name"], me["role"]) == ("temp", "viewer")
    token_id = token.split("_")[1]
    listed = client.get("/api/v1/tokens", params={"principal": "temp"}).json()
    assert [t["token_id"] for t in listed] == [token_id] and "token" not in listed[0]  # never the secret
    assert client.delete(f"/api/v1/tokens/{token_id}").status_code == 200
    refused = client.get("/api/v1/tables", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]

    short = client.post("/api/v1/principals/temp/tokens", json={"name": "short", "expires_in": "1s"}).json()["token"]
    assert client.get("/api/v1/tables", headers={"Authorization": f"Bearer {short}"}).status_code == 200
    time.sleep(1.5)
    assert client.get("/api/v1/tables", headers={"Authorization": f"Bearer {short}"}).status_code == 401
    bad = client.post("/api/v1/principals/temp/tokens", json={"expires_in": "soon"})
    assert bad.status_code == 400 and "soon" in bad.json()["error"]["message"]
    for endless in (3.0e145, "1e300", 10**20, "99999999999d", "36526d"):  # past what a date holds: 400s, not 500s
        bad = client.post("/api/v1/principals/temp/tokens", json={"expires_in": endless})
        assert bad.status_code == 400 and "expires_in" in bad.json()["error"]["message"], (endless, bad.text)

    # the last admin stays; bad names and roles are 400s naming the field
    assert client.delete("/api/v1/principals/admin").status_code == 409
    assert client.put("/api/v1/principals/admin", json={"role": "viewer"}).status_code == 409
    assert "name" in client.post("/api/v1/principals", json={"name": "bad name!"}).json()["error"]["message"]
    assert "role" in client.post("/api/v1/principals", json={"name": "x", "role": "god"}).json()["error"]["message"]

    # failed logins from one address: at most 10 in the window, then 429 even for the right password
    body = {"name": "pat", "role": "viewer", "password": "right password"}
    assert client.post("/api/v1/principals", json=body).status_code == 201
    for _ in range(10):
        wrong = client.post("/api/v1/session", json={"name": "pat", "password": "wrong password"})
        assert wrong.status_code == 401
    limited = client.post("/api/v1/session", json={"name": "pat", "password": "right password"})
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0


def test_the_session_cookie_needs_the_csrf_header_for_changes(client: TestClient) -> None:
    admin = client.headers.pop("Authorization").removeprefix("Bearer ")
    signed = client.post("/api/v1/session", json={"token": admin})
    assert signed.status_code == 200
    cookie = signed.headers.get_list("set-cookie")
    assert any("lakewarden_session=" in c and "HttpOnly" in c and "SameSite=strict" in c for c in cookie), cookie
    csrf = signed.json()["csrf_token"]
    assert client.get("/api/v1/tables").status_code == 200  # reading: the cookie is enough
    body = {"name": "g1", "container": "local"}
    forged = client.post("/api/v1/resource-groups", json=body)  # another site's form: no header
    assert forged.status_code == 403 and "CSRF" in forged.json()["error"]["message"]
    assert client.post("/api/v1/resource-groups", json=body, headers={"X-CSRF-Token": csrf}).status_code == 201
    assert client.delete("/api/v1/session").status_code == 204
    client.cookies.clear()
    assert client.get("/api/v1/tables").status_code == 401


def test_optimizer_tokens_only_speak_the_protocol(client: TestClient) -> None:
    viewer = principal(client, "v2", "viewer")
    body = {"group": "default", "parallelism": 1}
    refused = client.post("/api/v1/optimizer/register", json=body, headers={"Authorization": f"Bearer {viewer}"})
    assert refused.status_code == 403
    ctx: Any = client.app.state.context  # type: ignore[attr-defined]
    for_other = ctx.auth.registration_token("other")
    wrong_group = client.post("/api/v1/optimizer/register", json=body, headers={"Authorization": f"Bearer {for_other}"})
    assert wrong_group.status_code == 403 and "other" in wrong_group.json()["error"]["message"]
    registration = ctx.auth.registration_token("default")
    auth = {"Authorization": f"Bearer {registration}"}
    token = client.post("/api/v1/optimizer/register", json=body, headers=auth).json()["token"]
    assert client.get("/api/v1/tables", headers=auth).status_code == 403  # a registration token: nothing else
    mine = {"Authorization": f"Bearer {token}"}
    assert client.post("/api/v1/optimizer/touch", json={"token": token}, headers=mine).status_code == 200
    assert client.get("/api/v1/tables", headers=mine).status_code == 403
    other = client.post("/api/v1/optimizer/register", json=body, headers=auth).json()["token"]
    spoofed = client.post("/api/v1/optimizer/touch", json={"token": other}, headers=mine)
    assert spoofed.status_code == 403  # one optimizer cannot act for another
    groups = client.get("/api/v1/resource-groups/default/optimizers").json()
    assert token not in str(groups) and other not in str(groups)  # the API never shows an optimizer's token


@pytest.fixture
def server_settings() -> str:
    return ""


def test_pyiceberg_with_client_credentials_static_tokens_and_grants(server: ServerProcess, tmp_path: Path) -> None:
    api = server.api()
    admin = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
    admin.create_namespace("sales")
    admin.create_namespace("hr")
    admin.create_table("sales.orders", SCHEMA)
    admin.create_table("hr.people", SCHEMA)

    # a writer on `sales`, by OAuth2 client credentials (what `credential=` does in Spark and pyiceberg)
    writer_token = cli(server, "token", "create", "etl", ok=False)
    assert writer_token.returncode == 1 and "does not exist" in writer_token.stderr
    assert "created" in cli(server, "principal", "create", "etl", "--kind", "service", "--role", "viewer").stdout
    assert "granted" in cli(server, "grant", "add", "etl", "lake.sales", "write").stdout
    secret = cli(server, "token", "create", "etl", "--name", "spark job").stdout.strip()
    assert secret.startswith("lw_")
    oauth = f"{server.url}/iceberg/v1/oauth/tokens"
    writer = RestCatalog(
        "lake",
        uri=f"{server.url}/iceberg",
        warehouse="lake",
        credential=f"etl:{secret}",
        **{"oauth2-server-uri": oauth},
    )
    orders = writer.load_table("sales.orders")
    orders.append(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])}))
    assert writer.load_table("sales.orders").scan().to_arrow().num_rows == 2
    writer.create_table("sales.returns", SCHEMA)
    assert writer.list_namespaces() == [("sales",)]  # only what its grants reach
    with pytest.raises(ForbiddenError):
        writer.load_table("hr.people")
    with pytest.raises(ForbiddenError):
        writer.create_namespace("finance")
    with pytest.raises(ForbiddenError):
        writer.drop_table("hr.people")

    # a reader of the whole catalog, by a static token (`token=`): reads, never writes
    cli(server, "principal", "create", "analyst")
    cli(server, "grant", "add", "analyst", "lake", "read")
    reader_token = cli(server, "token", "create", "analyst").stdout.strip()
    reader = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=reader_token)
    assert reader.load_table("sales.orders").scan().to_arrow().num_rows == 2
    assert sorted(reader.list_namespaces()) == [("hr",), ("sales",)]
    with pytest.raises(ForbiddenError):
        reader.load_table("sales.orders").append(pa.table({"id": pa.array([3], pa.int64()), "v": pa.array(["c"])}))
    assert admin.load_table("sales.orders").scan().to_arrow().num_rows == 2  # nothing half-written

    # the token endpoint: client credentials, then a refresh by token exchange; wrong secrets are 401s
    issued = httpx.post(oauth, data={"grant_type": "client_credentials", "client_id": "etl", "client_secret": secret})
    assert issued.status_code == 200 and issued.json()["token_type"] == "bearer" and issued.json()["expires_in"] > 0
    exchange = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": issued.json()["access_token"],
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
    }
    renewed = httpx.post(oauth, data=exchange)
    assert renewed.status_code == 200 and renewed.json()["access_token"] != issued.json()["access_token"]
    wrong = httpx.post(
        oauth, data={"grant_type": "client_credentials", "client_id": "analyst", "client_secret": secret}
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    unknown = httpx.post(oauth, data={"grant_type": "password"})
    assert unknown.status_code == 400 and unknown.json()["error"] == "unsupported_grant_type"

    # revoking the API token also ends the access tokens obtained with it (after the cache TTL at most)
    token_id = secret.split("_")[1]
    assert "revoked" in cli(server, "token", "revoke", token_id).stdout
    config = httpx.get(
        f"{server.url}/iceberg/v1/config",
        params={"warehouse": "lake"},
        headers={"Authorization": f"Bearer {renewed.json()['access_token']}"},
    )
    assert config.status_code == 401
    audit = [(e["principal"], e["action"], e["target"]) for e in api.get("/audit", params={"limit": 100}).json()]
    assert audit[0] == ("admin", "revoke-token", "etl")
    assert ("etl", "POST /iceberg/v1/{prefix}/namespaces/{namespace}/tables", "lake/sales") in audit
    assert ("admin", "POST /iceberg/v1/{prefix}/namespaces", "lake") in audit
    assert not [a for a in audit if a[1].endswith("/tables/{table}")]  # commits are on the timeline instead


@pytest.mark.spark
@pytest.mark.slow
def test_spark_with_client_credentials_and_a_read_only_token(server: ServerProcess, spark: SparkSession) -> None:
    """Spark's Iceberg REST client: `credential=` (OAuth2 client credentials, renewed by token exchange)
    writes where its grant allows; `token=` with a read grant reads and is refused a write."""

    from lakewarden.spark.session import configure_catalogs

    cli(server, "principal", "create", "job", "--kind", "service")
    cli(server, "grant", "add", "job", "lake", "write")
    secret = cli(server, "token", "create", "job").stdout.strip()
    cli(server, "principal", "create", "bi")
    cli(server, "grant", "add", "bi", "lake.db", "read")
    read_only = cli(server, "token", "create", "bi").stdout.strip()
    uri = f"{server.url}/iceberg"
    oauth = f"{uri}/v1/oauth/tokens"
    writer = CatalogSpec(
        f"w{server.port}", "internal", {"uri": uri, "credential": f"job:{secret}", "oauth2-server-uri": oauth}
    )
    configure_catalogs(spark, [writer])
    spark.conf.set(f"spark.sql.catalog.{writer.name}.warehouse", "lake")  # the internal catalog's name
    spark.sql(f"CREATE NAMESPACE {writer.name}.db")
    spark.sql(f"CREATE TABLE {writer.name}.db.t (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {writer.name}.db.t VALUES (1), (2)")

    reader = CatalogSpec(f"r{server.port}", "internal", {"uri": uri, "token": read_only})
    configure_catalogs(spark, [reader])
    spark.conf.set(f"spark.sql.catalog.{reader.name}.warehouse", "lake")
    assert spark.sql(f"SELECT count(*) FROM {reader.name}.db.t").first()[0] == 2  # type: ignore[index]
    with pytest.raises(Exception, match=r"ForbiddenException|bi has no write grant"):
        spark.sql(f"INSERT INTO {reader.name}.db.t VALUES (3)")
    assert spark.sql(f"SELECT count(*) FROM {writer.name}.db.t").first()[0] == 2  # type: ignore[index]


def test_bodies_are_bounded_and_changes_are_audited(client: TestClient) -> None:
    big = b'{"name": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    refused = client.post("/api/v1/catalogs", content=big, headers={"content-type": "application/json"})
    assert refused.status_code == 413 and "max-body-size" in refused.json()["error"]["message"]

    def chunks() -> Any:  # no Content-Length: refused once what arrived passes the limit
        for _ in range(20):
            yield b"x" * (1024 * 1024)

    streamed = client.post("/api/v1/resource-groups", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    # a grant on a catalog that does not exist is refused, naming the field
    nowhere = client.post("/api/v1/principals/admin/grants", json={"target": "nope.db", "privilege": "read"})
    assert nowhere.status_code == 400, nowhere.text
    assert "target" in nowhere.text and "no catalog named 'nope'" in nowhere.text
    small = client.post("/api/v1/resource-groups", json={"name": "etl", "container": "local"})
    assert small.status_code == 201

    # who changed what: groups, actions, drops — with the caller and the route; failures are not changes
    operator = principal(client, "ops", "operator")
    scaled = client.post(
        "/api/v1/resource-groups/etl/scale", json={"instances": 0}, headers={"Authorization": f"Bearer {operator}"}
    )
    assert scaled.status_code == 200
    assert client.delete("/api/v1/resource-groups/nope").status_code == 404
    assert client.delete("/api/v1/resource-groups/etl").status_code == 204
    entries = client.get("/api/v1/audit", params={"limit": 10}).json()
    seen = [(e["principal"], e["action"], e["target"]) for e in entries]
    assert seen[:3] == [
        ("admin", "DELETE /api/v1/resource-groups/{name}", "etl"),
        ("ops", "POST /api/v1/resource-groups/{name}/scale", "etl"),
        ("admin", "create-token", "ops"),
    ], seen
    assert ("admin", "POST /api/v1/resource-groups", "/api/v1/resource-groups") in seen
    assert all(e["client"] for e in entries)
    only_ops = client.get("/api/v1/audit", params={"principal": "ops"}).json()
    assert [e["action"] for e in only_ops] == ["POST /api/v1/resource-groups/{name}/scale"]


def test_the_longest_audited_action_fits_its_row_and_a_drop_through_the_catalog_is_audited(client: TestClient) -> None:
    """An audit row's action is the method and the route's template. Every route this server audits fits the
    column (DELETE of a table, 65 characters, did not on PostgreSQL: the drop answered 204 and its row failed)."""
    from lakewarden.api.middleware import _audited
    from lakewarden.store.models import AuditRow

    actions = {
        f"{method} {context.path_format}"
        for route in client.app.router.routes  # type: ignore[attr-defined]
        if hasattr(route, "effective_route_contexts")  # the routers included at the root: every API route
        for context in route.effective_route_contexts()
        for method in context.methods or ()
        if _audited(method, context.path_format)
    }
    drop = "DELETE /iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    assert drop in actions and len(actions) > 20, actions
    longest = max(actions, key=len)
    assert len(longest) <= AuditRow.__table__.c.action.type.length, longest  # type: ignore[attr-defined]

    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    field = {"id": 1, "name": "id", "type": "long", "required": False}
    table = {"name": "t", "schema": {"type": "struct", "fields": [field]}}
    assert client.post("/iceberg/v1/lake/namespaces/db/tables", json=table).status_code == 200
    assert client.delete("/iceberg/v1/lake/namespaces/db/tables/t").status_code == 204
    entries = client.get("/api/v1/audit", params={"limit": 1}).json()
    assert [(e["principal"], e["action"], e["target"]) for e in entries] == [("admin", drop, "lake/db/t")]


def test_a_change_whose_audit_row_fails_keeps_its_answer_and_says_so(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The audit row is written after the answer went out: when it cannot be (the database refuses it), the change
    stands, the client has its answer, and the server logs an error naming the change (no traceback escapes)."""
    from lakewarden.store import security

    def refused(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the database refused the row")

    monkeypatch.setattr(security, "audit", refused)
    made = client.post("/api/v1/resource-groups", json={"name": "etl", "container": "local"})
    assert made.status_code == 201, made.text
    assert client.get("/api/v1/resource-groups/etl").status_code == 200
    errors = [r.getMessage() for r in caplog.records if r.name == "lakewarden.api.middleware"]
    assert errors == [
        "POST /api/v1/resource-groups (/api/v1/resource-groups, by admin) was made, but its audit row could not be "
        "written: the database refused the row"
    ], errors


def test_catalog_secrets_are_encrypted_at_rest(config: Any, tmp_path: Path) -> None:
    """The database never holds a catalog's credential in the clear; the server reads it back; a row a
    version before encryption stored in the clear is sealed at the next start."""
    from sqlalchemy import JSON, column, select, table

    from lakewarden.api.app import create_app
    from lakewarden.store import catalogs as catalog_store
    from lakewarden.store.database import Database
    from tests.conftest import as_admin

    stored = table("catalog_meta", column("name"), column("properties", JSON))

    def raw(db: Database, name: str) -> dict[str, str]:
        with db.read() as session:
            return dict(session.execute(select(stored.c.properties).where(stored.c.name == name)).scalar_one())

    body = {"name": "remote", "type": "rest", "properties": {"uri": "http://127.0.0.1:9/x", "credential": "id:s3cr3t"}}
    with TestClient(create_app(config, start_services=False)) as client:
        as_admin(client, config)
        assert client.post("/api/v1/catalogs", json=body).status_code == 201
        assert client.get("/api/v1/catalogs/remote").json()["properties"]["credential"] == "****"
        ctx: Any = client.app.state.context  # type: ignore[attr-defined]
        at_rest = raw(ctx.db, "remote")
        assert at_rest["uri"] == "http://127.0.0.1:9/x" and at_rest["credential"].startswith("enc:v1:")
        assert "s3cr3t" not in str(at_rest)
        with ctx.db.read() as session:  # what the server works with (explorer, optimizers' tasks)
            assert catalog_store.spec_of(catalog_store.get_catalog(session, "remote")).properties["credential"] == (
                "id:s3cr3t"
            )
        with ctx.db.write() as session:  # as an older version stored it
            session.execute(
                stored.update()
                .where(stored.c.name == "remote")
                .values(properties={**at_rest, "credential": "id:plain"})
            )
    with TestClient(create_app(config, start_services=False)) as client:  # the next start seals it
        ctx = client.app.state.context  # type: ignore[attr-defined]
        assert raw(ctx.db, "remote")["credential"].startswith("enc:v1:")
        with ctx.db.read() as session:
            assert catalog_store.spec_of(catalog_store.get_catalog(session, "remote")).properties["credential"] == (
                "id:plain"
            )


def test_an_optimizers_catalog_token_reaches_only_the_tables_it_holds_a_task_on(client: TestClient) -> None:
    """The token a task on an internal catalog carries: that table while the optimizer holds the task,
    nothing else of the catalog (other tables, new namespaces, renames), and not after the task."""
    from lakewarden.domain.errors import NotFound
    from lakewarden.domain.processes import ProcessPlan
    from lakewarden.domain.tables import TableIdentifier
    from lakewarden.store import processes as process_store
    from lakewarden.store import tables as table_store
    from tests.helpers import minor_task

    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    assert client.post("/api/v1/catalogs", json={"name": "lake", "type": "internal"}).status_code == 201
    assert client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["db"]}).status_code == 200
    for name in ("mine", "other"):
        created = client.post("/iceberg/v1/lake/namespaces/db/tables", json={"name": name, "schema": schema})
        assert created.status_code == 200, created.text
    ctx: Any = client.app.state.context  # type: ignore[attr-defined]
    with ctx.db.write() as session:
        try:
            rec = table_store.get_table(session, TableIdentifier("lake", "db", "mine"))
        except NotFound:  # the explorer has not looked yet (the loops are the test's to drive)
            rec = table_store.add_table(session, TableIdentifier("lake", "db", "mine"), "default", {})
        plan = ProcessPlan("minor", 1, [minor_task()])
        process_id = process_store.create_process(session, rec, "default", "optimizing", plan).process_id
    registered = client.post("/api/v1/optimizer/register", json={"group": "default", "parallelism": 1}).json()
    optimizer = registered["token"]
    poll = {"token": optimizer, "thread_id": 0, "timeout_seconds": 0}
    task = client.post("/api/v1/optimizer/poll", json=poll, headers={"Authorization": f"Bearer {optimizer}"}).json()
    assert task["process_id"] == process_id
    catalog_token = task["catalog"]["properties"]["token"]
    bearer = {"Authorization": f"Bearer {catalog_token}"}
    base = "/iceberg/v1/lake/namespaces/db"
    assert client.get(f"{base}/tables/mine", headers=bearer).status_code == 200
    assert client.get(f"{base}/tables/other", headers=bearer).status_code == 403
    assert client.get(f"{base}/tables", headers=bearer).status_code == 200  # listing the namespace: a read
    refused = client.post("/iceberg/v1/lake/namespaces", json={"namespace": ["x"]}, headers=bearer)
    assert refused.status_code == 403
    rename = {"source": {"namespace": ["db"], "name": "mine"}, "destination": {"namespace": ["db"], "name": "m2"}}
    assert client.post("/iceberg/v1/lake/tables/rename", json=rename, headers=bearer).status_code == 403
    assert client.get("/api/v1/tables", headers=bearer).status_code == 403  # no role: not the management API
    assert "token" not in str(client.get(f"/api/v1/processes/{process_id}").json())  # never shown

    ref = {"token": optimizer, "process_id": process_id, "task_id": 1, "attempt": task["attempt"]}
    mine = {"Authorization": f"Bearer {optimizer}"}
    assert client.post("/api/v1/optimizer/ack", json=ref, headers=mine).status_code == 204
    done = {**ref, "output": {"action": "optimizing", "files_in": 0}}
    assert client.post("/api/v1/optimizer/complete", json=done, headers=mine).status_code == 204
    ctx.auth.forget()  # else believed for up to 2 s
    assert client.get(f"{base}/tables/mine", headers=bearer).status_code == 403  # the task is over


def test_metrics_need_a_role_unless_configured_open(client: TestClient, tmp_path: Path) -> None:
    from lakewarden.api.app import create_app
    from tests.conftest import make_config

    admin = client.headers.pop("Authorization")
    assert client.get("/metrics").status_code == 401
    viewer = principal_as(client, admin, "mona", "viewer")
    assert client.get("/metrics", headers={"Authorization": f"Bearer {viewer}"}).status_code == 200
    with TestClient(create_app(make_config(tmp_path / "open", auth__metrics="open"), start_services=False)) as other:
        assert other.get("/metrics").status_code == 200
        assert other.get("/api/v1/tables").status_code == 401  # only the metrics are open


def principal_as(client: TestClient, admin: str, name: str, role: str) -> str:
    client.headers["Authorization"] = admin
    try:
        return principal(client, name, role)
    finally:
        del client.headers["Authorization"]


@pytest.mark.spark
@pytest.mark.slow
def test_spark_renews_a_short_lived_access_token_by_itself(tmp_path: Path, spark: SparkSession) -> None:
    """With `credential=`, Iceberg's REST client renews its access token before it expires (token exchange
    or new client credentials): a session outlives several 10 s tokens without an error."""
    from lakewarden.spark.session import configure_catalogs
    from tests.servers import started_server

    with started_server(tmp_path, extra="  auth: {access-token-ttl: 10s}\n") as server:
        uri = f"{server.url}/iceberg"
        credential = f"admin:{server.token}"
        spec = CatalogSpec(
            f"renew{server.port}",
            "internal",
            {"uri": uri, "credential": credential, "oauth2-server-uri": f"{uri}/v1/oauth/tokens"},
        )
        configure_catalogs(spark, [spec])
        spark.conf.set(f"spark.sql.catalog.{spec.name}.warehouse", "lake")
        spark.sql(f"CREATE NAMESPACE {spec.name}.db")
        spark.sql(f"CREATE TABLE {spec.name}.db.t (id BIGINT) USING iceberg")
        for i in range(3):
            spark.sql(f"INSERT INTO {spec.name}.db.t VALUES ({i})")
            time.sleep(11)  # longer than a token lives
        assert spark.sql(f"SELECT count(*) FROM {spec.name}.db.t").first()[0] == 3  # type: ignore[index]
        issued = server.log.read_text().count('"POST /iceberg/v1/oauth/tokens HTTP/1.1" 200')
        assert issued >= 3, server.log.read_text()[-3000:]
