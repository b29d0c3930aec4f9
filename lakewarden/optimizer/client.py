"""The optimizer's side of the protocol: an HTTP client of `/api/v1/optimizer`. It never touches the database."""

from __future__ import annotations

import time
from typing import Any

import httpx

from lakewarden.protocol.messages import (
    Assignment,
    Completion,
    FailureDiagnosis,
    FailureKind,
    Registered,
    Registration,
    SparkApplication,
    SparkUsage,
    TaskKey,
    Touch,
    Touched,
)
from lakewarden.protocol.results import TaskResult


class ProtocolError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status


class Unavailable(ProtocolError):
    """No server answered, or none had a leader (503 from each): worth asking again shortly."""


class PollLater(Exception):
    """The server had no task and too many polls waiting to let this one wait: poll again in `seconds`."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"poll again in {seconds:g} s")
        self.seconds = seconds


RETRYABLE = (httpx.TransportError, Unavailable)
POLL_LATER_MAX_SECONDS = 30.0


class OptimizerClient:
    """`server` is one URL, or several separated by commas (the nodes of a highly available installation):
    a request goes to the node that answered last; one that cannot be reached, or answers 503 (no leader
    right now), passes the request to the next. Any node serves: followers forward to the leader."""

    def __init__(self, server: str, credential: str | None = None) -> None:
        self.servers = [s.strip().rstrip("/") for s in server.split(",") if s.strip()]
        if not self.servers:
            raise ValueError("no server URL given")
        self._current = 0
        # a poll may wait up to 3 s on the server: leave room for it
        self._http = httpx.Client(timeout=30.0)
        self.credential = credential  # what registers: a group's registration token or an operator's token

    def _send(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        """POST to the current node; on no answer or a 503, to the next ones (each once)."""
        failure: Exception | None = None
        for step in range(len(self.servers)):
            index = (self._current + step) % len(self.servers)
            try:
                response = self._http.post(f"{self.servers[index]}/api/v1/optimizer{path}", json=body, headers=headers)
            except httpx.TransportError as exc:
                failure = exc
                continue
            if response.status_code == 503:
                failure = Unavailable(503, _message(response))
                continue
            self._current = index
            return response
        assert failure is not None
        raise failure

    def _answer(self, path: str, body: dict[str, Any], bearer: str | None = None) -> httpx.Response:
        """POST as the optimizer (its own token, from the body) or, registering, with the credential; a refusal
        is raised as ProtocolError."""
        bearer = bearer or body.get("token")
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        response = self._send(path, body, headers)
        if response.status_code >= 400:
            raise ProtocolError(response.status_code, _message(response))
        return response

    def _post(self, path: str, body: dict[str, Any], bearer: str | None = None) -> Any:
        response = self._answer(path, body, bearer)
        return None if response.status_code == 204 else response.json()

    def register(
        self,
        group: str,
        parallelism: int,
        resource_id: str | None,
        host: str,
        spark: SparkApplication | None = None,
        engines: tuple[str, ...] = (),
    ) -> Registered:
        body = Registration(
            group=group, parallelism=parallelism, resource_id=resource_id, host=host, spark=spark, engines=list(engines)
        )
        return Registered.model_validate(self._post("/register", body.model_dump(mode="json"), bearer=self.credential))

    def touch(self, token: str, running: list[TaskKey] | None = None) -> Touched:
        """Heartbeat; answers the running tasks the server says to stop, and whether to leave."""
        body = Touch(token=token, running=running or [])
        return Touched.model_validate(self._post("/touch", body.model_dump(mode="json")))

    def commit(self, token: str, task: Assignment, retry_seconds: float = 60.0) -> None:
        """May this task commit now? Raises ProtocolError (409) when its process was canceled. While the
        server is unreachable (restarting), keep asking: a grant whose answer was lost is granted again."""
        self._post_until("/commit", {"token": token, **_ref(task)}, retry_seconds)

    def unregister(self, token: str) -> None:
        self._post("/unregister", {"token": token})

    def poll(self, token: str, thread_id: int) -> Assignment | None:
        """A task, or None when none came within the poll's wait. Raises PollLater when the server asks for a
        pause first (no task, and it could not let this poll wait)."""
        response = self._answer("/poll", {"token": token, "thread_id": thread_id})
        if response.status_code == 204:
            later = response.headers.get("Retry-After", "")
            if later.isdigit():
                raise PollLater(min(max(1.0, float(later)), POLL_LATER_MAX_SECONDS))
            return None
        return Assignment.model_validate(response.json())

    def ack(self, token: str, task: Assignment, retry_seconds: float = 60.0) -> None:
        """Ack; while the server is unreachable (restarting), keep trying: an ack whose answer was lost may
        have been recorded, and the server answers a repeated one the same. A refusal is raised at once."""
        self._post_until("/ack", {"token": token, **_ref(task)}, retry_seconds)

    def _post_until(self, path: str, body: dict[str, Any], retry_seconds: float) -> None:
        """POST, asking again each second while the server is unreachable, for up to `retry_seconds`."""
        deadline = time.monotonic() + retry_seconds
        while True:
            try:
                self._post(path, body)
                return
            except RETRYABLE:
                if time.monotonic() + 1.0 > deadline:
                    raise
                time.sleep(1.0)

    def complete(
        self,
        token: str,
        task: Assignment,
        output: TaskResult | None,
        error: str | None,
        failure: FailureKind = FailureKind.TRANSIENT,
        retry_seconds: float = 300.0,
        usage: SparkUsage | None = None,
        diagnosis: FailureDiagnosis | None = None,
    ) -> None:
        """Report the result; while the server is unreachable (e.g. restarting), keep trying.

        The work is done and committed: losing its report would leave the task ACKED until the
        execute timeout. A refusal (4xx) is final and raised at once. With an error, `failure` says
        whether and when running the task again may pass. `usage` is what Spark measured of the attempt;
        `diagnosis` explains an error.
        """
        body = Completion(
            token=token, **_ref(task), output=output, error=error, failure=failure, usage=usage, diagnosis=diagnosis
        )
        payload = body.model_dump(mode="json", exclude_none=True)
        deadline = time.monotonic() + retry_seconds
        pause = 0.5
        while True:
            try:
                self._post("/complete", payload)
                return
            except RETRYABLE:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 10.0)

    def close(self) -> None:
        self._http.close()


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text


def _ref(task: Assignment) -> dict[str, Any]:
    return {"process_id": task.process_id, "task_id": task.task_id, "attempt": task.attempt}
