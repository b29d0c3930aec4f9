"""Real `lakewarden server` processes for the tests, and the real CLI pointed at them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from lakewarden.config import ACTION_INTERVALS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


FAST_EVALUATOR = "  evaluator: {interval: 1s, recheck-interval: 1s}\n"
LAKEWARDEN = [sys.executable, "-m", "lakewarden.cli.main"]
REFRESH_SECONDS = 2


# Maintenance actions stay off in test servers unless a test turns them on: their processes would
# appear beside the optimizing ones that other tests count.
MAINTENANCE_OFF = "".join(f"  {action}: {{enabled: false}}\n" for action in ACTION_INTERVALS)


class ServerProcess:
    def __init__(
        self,
        tmp_path: Path,
        extra: str = "",
        maintenance: str = MAINTENANCE_OFF,
        data_dir: Path | None = None,
        log_level: str = "info",
        port: int | None = None,
        catalogs: str = "",
    ) -> None:
        """`catalogs`: a `catalogs:` section (YAML) in place of the default catalogs."""
        self.log_level = log_level
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir or tmp_path / "data"  # servers of one HA installation may share one
        self.config = tmp_path / "lakewarden.yaml"
        self.config.write_text(
            f"ams:\n  data-dir: {self.data_dir}\n  http-server: {{bind-port: {self.port}}}\n"
            f"  refresh-external-catalogs: {{interval: {REFRESH_SECONDS}s, thread-count: 2}}\n"
            + extra
            + maintenance
            # no optimizer started by the server: tests run their own where they need one
            + "resource-groups:\n  - {name: default, container: local}\n"
            + catalogs
        )
        self.log = tmp_path / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = ""  # the admin token the first start wrote (<data-dir>/admin.token)
        self.http = httpx.Client(timeout=30)  # authenticated as admin once started

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def api(self, prefix: str = "/api/v1") -> httpx.Client:
        """An admin's client of the server's API (or of `prefix`, e.g. the REST catalog)."""
        return httpx.Client(base_url=f"{self.url}{prefix}", timeout=30, headers=self.headers)

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*LAKEWARDEN, "server", "--config", str(self.config), "--log-level", self.log_level],
                stdout=out,
                stderr=out,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    self.token = (self.data_dir / "admin.token").read_text().strip()
                    self.http.headers.update(self.headers)
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"server did not start:\n{self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


def cli(
    server: ServerProcess, *args: str, ok: bool = True, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with the admin's token (or `token`) in LAKEWARDEN_TOKEN."""
    env = {**os.environ, "LAKEWARDEN_TOKEN": server.token if token is None else token}
    proc = subprocess.run(
        [*LAKEWARDEN, *args, "--server", server.url], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def cli_json(server: ServerProcess, *args: str) -> Any:
    return json.loads(cli(server, *args, "--json").stdout)


@contextmanager
def started_server(tmp_path: Path, extra: str = "", maintenance: str | None = None) -> Iterator[ServerProcess]:
    """A real `lakewarden server` process on a fresh data directory; `extra` adds `ams:` settings;
    `maintenance` replaces the `ams:` lines that turn the maintenance actions off."""
    process = ServerProcess(tmp_path, extra=extra, maintenance=MAINTENANCE_OFF if maintenance is None else maintenance)
    process.start()
    try:
        yield process
    finally:
        if process.proc is not None and process.proc.poll() is None:
            process.stop()


@contextmanager
def ha_nodes(
    tmp_path: Path, database_urls: list[str], lease: timedelta | None = None, log_level: str = "info"
) -> Iterator[list[ServerProcess]]:
    """Real server processes (one per database URL: the same PostgreSQL database, maybe through a proxy) on one
    data directory (the secret key, the admin token), started in order; the explorer's interval is long, so
    what is seen within it came through the outbox. `lease`: the default unless given."""
    shared = tmp_path / "data"
    nodes = []
    for i, url in enumerate(database_urls):
        (tmp_path / f"node-{i}").mkdir()
        lease_setting = "" if lease is None else f", lease: {lease.seconds}s"
        extra = (
            f"  database: {{url: '{url}'}}\n  ha: {{enabled: true{lease_setting}}}\n"
            "  refresh-external-catalogs: {interval: 600s, watch-interval: null, thread-count: 2}\n"
        )
        node = ServerProcess(tmp_path / f"node-{i}", extra=extra, data_dir=shared, log_level=log_level)
        node.config.write_text(node_config(node, extra))
        nodes.append(node)
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)
                try:
                    node.stop()
                except subprocess.TimeoutExpired:  # its database link is cut: it cannot give its lease up
                    node.proc.kill()
                    node.proc.wait()


def node_config(node: ServerProcess, extra: str) -> str:
    """ServerProcess's config with the node's own URL."""
    return (
        f"ams:\n  data-dir: {node.data_dir}\n  http-server: {{bind-port: {node.port}}}\n"
        + extra.replace("ha: {enabled: true", f"ha: {{enabled: true, node-url: '{node.url}'")
        + "resource-groups:\n  - {name: default, container: local}\n"
    )
