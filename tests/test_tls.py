"""TLS: a server with `ams.http-server.ssl` and a self-signed certificate, used by the CLI, pyiceberg and
the Spark optimizers its local container starts (their JVM trusts the certificate through a trust store)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.helpers import wait_for
from tests.servers import LAKEWARDEN, MAINTENANCE_OFF, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lakewarden test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_tls_from_the_cli_pyiceberg_and_spark_optimizers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # requests (under pyiceberg) prefers these to the catalog's `ssl.cabundle`; this machine sets them
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    cert, key = self_signed(tmp_path)
    port = free_port()
    data = tmp_path / "data"
    config = tmp_path / "lakewarden.yaml"
    config.write_text(
        f"ams:\n  data-dir: {data}\n  http-server: {{bind-port: {port}, ssl: {{certfile: {cert}, keyfile: {key}}}}}\n"
        "  evaluator: {interval: 1s, recheck-interval: 1s}\n"
        + MAINTENANCE_OFF
        + "resource-groups:\n  - {name: default, container: local, properties: {instances: '1', memory: 1g}}\n"
    )
    url = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=str(cert))
    with (tmp_path / "server.log").open("ab") as log:
        server = subprocess.Popen([*LAKEWARDEN, "server", "--config", str(config)], stdout=log, stderr=log)
    try:

        def healthy() -> bool:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                return httpx.get(f"{url}/api/v1/health", verify=trust, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the TLS server", healthy, timeout=90)
        token = (data / "admin.token").read_text().strip()
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate is refused
            httpx.get(f"{url}/api/v1/health", timeout=5)

        # the CLI: SSL_CERT_FILE names the certificate to trust; without it, one clear line
        env = {**os.environ, "LAKEWARDEN_TOKEN": token}
        command = [*LAKEWARDEN, "catalog", "list", "--server", url]
        untrusted = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        assert "Traceback" not in untrusted.stderr
        trusted = subprocess.run(command, capture_output=True, text=True, env={**env, "SSL_CERT_FILE": str(cert)})
        assert trusted.returncode == 0 and "lake" in trusted.stdout, trusted.stderr

        # pyiceberg writes small files through the REST catalog over TLS …
        tls: Any = {"cabundle": str(cert)}  # pyiceberg's `ssl` property is a mapping (typed as str)
        catalog = RestCatalog("lake", uri=f"{url}/iceberg", warehouse="lake", token=token, ssl=tls)
        catalog.create_namespace("db")
        schema = Schema(NestedField(1, "id", LongType(), required=False))
        trigger = {"self-optimizing.minor.trigger.file-count": "3", "self-optimizing.min-plan-interval": "0"}
        table = catalog.create_table("db.events", schema, properties=trigger)
        for i in range(4):
            table.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))

        # … and the optimizer the server started (a Spark JVM trusting the certificate) compacts them
        api = httpx.Client(base_url=f"{url}/api/v1", verify=trust, headers={"Authorization": f"Bearer {token}"})
        done = wait_for(
            "a compaction over TLS",
            lambda: [p for p in api.get("/processes").json() if p["status"] in ("success", "failed")],
            timeout=300,
            interval=2,
        )
        assert done[0]["status"] == "success", done[0]
        assert catalog.load_table("db.events").scan().to_arrow().num_rows == 40
        files = catalog.load_table("db.events").inspect.files()
        assert files.num_rows == 1
    finally:
        server.terminate()
        server.wait(60)
