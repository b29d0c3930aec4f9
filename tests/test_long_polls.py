"""Optimizer threads' long polls are bounded on each node (ams.optimizer.max-long-polls): each waiting poll holds
one of the server's worker threads, so past the bound a poll looks once and asks its optimizer, with Retry-After,
to come back later. However many optimizer threads poll, the API and the REST catalog keep threads to answer."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from lakewarden.optimizer.client import OptimizerClient, PollLater
from tests.servers import ServerProcess, started_server


def metric(server: ServerProcess, name: str) -> float:
    text = server.http.get(f"{server.url}/metrics").text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(f"{name} ")))


def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_poll_past_the_bound_answers_at_once_and_the_optimizer_comes_back_later(tmp_path: Path) -> None:
    with started_server(tmp_path, "  optimizer: {max-long-polls: 2}\n") as server:
        client = OptimizerClient(server.url, credential=server.token)
        token = client.register("default", 3, None, "test").token
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(client.poll, token, thread) for thread in (0, 1)]
            until(lambda: metric(server, "lakewarden_optimizer_polls_waiting") == 2)
            started = time.monotonic()
            with pytest.raises(PollLater) as later:
                client.poll(token, 2)
            assert time.monotonic() - started < 2.5  # not held: a poll that waits for a task takes 3 s
            assert later.value.seconds == 3.0  # the wait it was denied (the poll's own timeout)
            answer = server.http.post(
                f"{server.url}/api/v1/optimizer/poll", json={"token": token, "thread_id": 2, "timeout_seconds": 1.5}
            )
            assert answer.status_code == 204 and answer.headers["Retry-After"] == "2"
            assert [w.result() for w in waiting] == [None, None]  # the two that waited: no task, no Retry-After
        assert metric(server, "lakewarden_optimizer_polls_turned_away_total") == 2
        assert metric(server, "lakewarden_optimizer_polls_waiting") == 0
        # with the waiting polls gone, a poll waits again
        started = time.monotonic()
        assert client.poll(token, 0) is None
        assert time.monotonic() - started >= 2.5


@pytest.mark.slow
def test_many_polling_optimizer_threads_leave_the_server_threads_to_answer_others(tmp_path: Path) -> None:
    """64 optimizer threads long-poll without pause while an operator reads the API: with the default bound
    (16 waiting polls) the reads are answered at once. Without it (every poll waits) the polls take all 40 of
    the server's worker threads for 3 s at a time and a read waits for one (checked: every read took 2.7-2.9 s)."""
    with started_server(tmp_path) as server:
        token = OptimizerClient(server.url, credential=server.token).register("default", 64, None, "test").token
        stop = threading.Event()

        def keep_polling(thread: int) -> int:
            polls = 0
            with httpx.Client(timeout=30, headers=server.headers) as http:
                while not stop.is_set():
                    answer = http.post(
                        f"{server.url}/api/v1/optimizer/poll", json={"token": token, "thread_id": thread}
                    )
                    assert answer.status_code == 204, answer.text
                    polls += 1
                    if "Retry-After" in answer.headers:
                        stop.wait(float(answer.headers["Retry-After"]))
            return polls

        with ThreadPoolExecutor(64) as pool:
            pollers = [pool.submit(keep_polling, thread) for thread in range(64)]
            until(lambda: metric(server, "lakewarden_optimizer_polls_waiting") == 16)
            reads = []
            for _ in range(10):
                started = time.monotonic()
                assert server.http.get(f"{server.url}/api/v1/catalogs").status_code == 200
                reads.append(time.monotonic() - started)
                time.sleep(0.3)
            stop.set()
            assert sum(p.result() for p in pollers) >= 64
        assert max(reads) < 1.0 and statistics.median(reads) < 0.25, reads
        assert metric(server, "lakewarden_optimizer_polls_turned_away_total") >= 48
