"""Running the server process: config, logging, uvicorn (which stops cleanly on SIGTERM and SIGINT)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
from types import FrameType

import uvicorn

from lakewarden import heap
from lakewarden.api.app import create_app
from lakewarden.config import Config
from lakewarden.store.claim import hold_alone


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _exit_cleanly(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


# modules the first request that needs them would otherwise import, inside that request: pyiceberg's FileIO
# over pyarrow (with pyarrow's compute, dataset and parquet modules, slow to import), read for any metadata file
# that is not cached, and pyiceberg's compiled Avro decoder, for any manifest
FIRST_REQUEST_MODULES = ("pyiceberg.io.pyarrow", "pyiceberg.avro.decoder_fast")


def _preload() -> None:
    for name in FIRST_REQUEST_MODULES:
        with contextlib.suppress(ImportError):  # decoder_fast exists only where pyiceberg's wheel is compiled
            importlib.import_module(name)


def _started() -> None:
    """Once the server is built, before it takes requests: the first request's imports done, then the heap
    frozen (with them in it): the modules and services built at start are hundreds of thousands of objects that
    live as long as the process, and every full collection would walk them, inside a request. From then on the heap
    freezer freezes, after full collections, what the caches add (lakewarden/heap.py)."""
    _preload()
    heap.freeze()
    heap.HeapFreezer().install()


def serve(config: Config, log_level: str = "info") -> None:
    configure_logging(log_level.upper())
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the handler that
    # was there before it: make that a plain exit 0, since the shutdown was clean.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    # another server on this database: said here, before anything starts (the server's runtime takes the claim)
    claim = hold_alone(config.database_url, shared=config.ams.ha.enabled)  # DatabaseInUse
    if claim is not None:
        claim.release()
    # A worker thread (a commit, a plan) gives the GIL up at each file or database call and then waits for the
    # event loop to give it back, up to the switch interval (Python's default is 5 ms) each time: under a burst of
    # requests a commit of a dozen such calls would wait for the lock most of its time. A shorter interval hands it
    # back sooner.
    sys.setswitchinterval(float(os.environ.get("LAKEWARDEN_SWITCH_INTERVAL", "0.0005")))
    ssl = config.ams.http_server.ssl
    uvicorn.run(
        create_app(config, on_started=_started),
        host=config.ams.server_bind_host,
        port=config.ams.http_server.bind_port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
        ssl_certfile=None if ssl is None else str(ssl.certfile.expanduser()),
        ssl_keyfile=None if ssl is None else str(ssl.keyfile.expanduser()),
    )
