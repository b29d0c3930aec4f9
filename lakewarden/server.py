"""Running the server process: config, logging, uvicorn (which stops cleanly on SIGTERM and SIGINT)."""

from __future__ import annotations

import logging

import uvicorn

from lakewarden.api.app import create_app
from lakewarden.config import Config


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def serve(config: Config, log_level: str = "info") -> None:
    configure_logging(log_level.upper())
    config.data_dir.mkdir(parents=True, exist_ok=True)
    uvicorn.run(
        create_app(config),
        host=config.ams.server_bind_host,
        port=config.ams.http_server.bind_port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
    )
