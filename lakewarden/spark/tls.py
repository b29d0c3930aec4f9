"""Trusting a server certificate in Spark's JVM (a lakewarden server with `ams.http-server.ssl`, often
self-signed): a PKCS12 trust store holding the JDK's own CAs plus that certificate, made once with the
JDK's keytool and cached by the certificate's digest. `LAKEWARDEN_TLS_CA` names the PEM file."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

PASSWORD = "changeit"  # a trust store holds public certificates only; Java insists on a password


def _java_home() -> Path:
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH")
    return Path(java).resolve().parent.parent


def trust_store(certificate: Path) -> Path:
    """A trust store with the JDK's CAs and `certificate` (PEM); made once per certificate."""
    digest = hashlib.sha256(certificate.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lakewarden" / "truststores"
    store = cache / f"{digest}.p12"
    if store.exists():
        return store
    cache.mkdir(parents=True, exist_ok=True)
    home = _java_home()
    keytool = home / "bin" / "keytool"
    partial = store.with_suffix(f".{os.getpid()}.tmp")
    partial.unlink(missing_ok=True)
    common = ["-noprompt", "-storepass", PASSWORD, "-storetype", "PKCS12", "-keystore", str(partial)]
    cacerts = home / "lib" / "security" / "cacerts"
    if cacerts.exists():  # keep trusting the public CAs (object stores, other catalogs)
        source = ["-srckeystore", str(cacerts), "-srcstorepass", PASSWORD]
        target = ["-destkeystore", str(partial), "-deststoretype", "PKCS12", "-deststorepass", PASSWORD]
        subprocess.run(
            [str(keytool), "-importkeystore", *source, *target, "-noprompt"], check=True, capture_output=True
        )
    subprocess.run(
        [str(keytool), "-importcert", "-alias", f"lakewarden-{digest}", "-file", str(certificate), *common],
        check=True,
        capture_output=True,
    )
    partial.replace(store)
    return store


def java_options(certificate: Path) -> str:
    """JVM options that make Java trust `certificate` besides its own CAs."""
    store = trust_store(certificate)
    return (
        f"-Djavax.net.ssl.trustStore={store} -Djavax.net.ssl.trustStorePassword={PASSWORD} "
        "-Djavax.net.ssl.trustStoreType=PKCS12"
    )
