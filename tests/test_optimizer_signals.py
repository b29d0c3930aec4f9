"""The optimizer's signal handler: it must not take a lock, since a second signal can land inside the first."""

from __future__ import annotations

import signal
import threading

from lakewarden.optimizer.app import Optimizer


def test_a_signal_landing_inside_the_stop_events_lock_does_not_hang() -> None:
    """A released optimizer gets SIGTERM from its container and again from its dying parent, often within a
    millisecond. The handler used to call `stop.set()`; when the second signal landed while the first was
    inside `set`, the nested `set` waited for good on the Event's non-reentrant lock (a CI leftover hung so).
    Here the handler runs while that lock is held, as it would in that case."""
    optimizer = Optimizer("http://127.0.0.1:9", "default", parallelism=1)

    def handle_inside_set() -> None:
        with optimizer.stop._cond:  # type: ignore[attr-defined]  # held by the interrupted Event.set
            optimizer.on_signal(signal.SIGTERM, None)

    handler = threading.Thread(target=handle_inside_set, daemon=True)
    handler.start()
    handler.join(5)
    assert not handler.is_alive(), "the signal handler blocked on the stop event's lock"
    assert optimizer.signalled  # the main loop turns it into `stop` (and the rest of a clean stop)
    optimizer.client.close()
