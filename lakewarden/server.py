"""Running the server process: config, logging, uvicorn (which stops cleanly on SIGTERM and SIGINT)."""

from __future__ import annotations

import logging
import signal
from types import FrameType

import uvicorn

from lakewarden.api.app import create_app
from lakewarden.config import Config


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _exit_cleanly(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def serve(config: Config, log_level: str = "info") -> None:
    configure_logging(log_level.upper())
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the handler that
    # was there before it: make that a plain exit 0, since the shutdown was clean.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    ssl = config.ams.http_server.ssl
    uvicorn.run(
        create_app(config),
        host=config.ams.server_bind_host,
        port=config.ams.http_server.bind_port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
        ssl_certfile=None if ssl is None else str(ssl.certfile.expanduser()),
        ssl_keyfile=None if ssl is None else str(ssl.keyfile.expanduser()),
    )
