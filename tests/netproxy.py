"""A TCP proxy on loopback whose link can be cut: a network partition between one process and a server."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import suppress

from tests.servers import free_port


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target`. `cut()` turns it into a black hole: bytes are read and dropped
    in both directions and new connections go nowhere, while every TCP connection stays open (the harshest
    partition: nothing errors, nothing answers)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._cut.set()

    def close(self) -> None:
        self._closed.set()
        for sock in self._sockets:
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._cut.is_set():
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                if sink is not None and not self._cut.is_set():
                    with suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                return
            if sink is None or self._cut.is_set():
                continue  # dropped
            try:
                sink.sendall(data)
            except OSError:
                return


_REFUSALS = {
    503: ("Slow Down", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
}


class LatencyProxy:
    """Forwards 127.0.0.1:`port` to `target`, adding a fixed latency to every HTTP request: a store across a
    network, in front of a local S3 server. A connection carries requests and answers in turn (HTTP/1.1
    keep-alive), so a request starts with the first bytes the client sends after the server last answered on that
    connection; those wait `delay_seconds` before they are forwarded (a body's later bytes are not held again).
    `requests` counts them; `seen` lists each one's method and path.

    Faults of a store, by key prefix (a path-style request's path, `/bucket/key`): `slow(prefix, seconds)` holds
    each request under it that much longer; `refuse(prefix, status)` answers each with S3's own error for a busy
    or failing store (503 SlowDown, 500 InternalError) and closes the connection, as S3 does, before the request's
    body is read; `heal(prefix)` ends both."""

    def __init__(self, target_host: str, target_port: int, delay_seconds: float) -> None:
        self.target = (target_host, target_port)
        self.delay = delay_seconds
        self.requests = 0  # requests delayed so far
        self.seen: list[str] = []  # "PUT /bucket/key" of each, in order
        self.refused = 0  # requests answered with an error by `refuse`
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._slow: dict[str, float] = {}
        self._refuse: dict[str, int] = {}
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def slow(self, prefix: str, seconds: float) -> None:
        with self._lock:
            self._slow[prefix] = seconds

    def refuse(self, prefix: str, status: int = 503) -> None:
        if status not in _REFUSALS:
            raise ValueError(f"status: one of {sorted(_REFUSALS)}")
        with self._lock:
            self._refuse[prefix] = status

    def heal(self, prefix: str) -> None:
        with self._lock:
            self._slow.pop(prefix, None)
            self._refuse.pop(prefix, None)

    def close(self) -> None:
        self._closed.set()
        with suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            answered = threading.Event()
            answered.set()  # the connection's first bytes start a request
            threading.Thread(target=self._requests, args=(client, upstream, answered), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, answered), daemon=True).start()

    def _fault(self, head: bytes) -> tuple[float, int | None]:
        """The extra delay and the refusal (a status, or None) for a request starting with `head`."""
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        path = parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) > 1 else ""
        with self._lock:
            self.seen.append(f"{parts[0].decode('latin-1')} {path}")
            extra = max((s for p, s in self._slow.items() if path.startswith(p)), default=0.0)
            status = next((c for p, c in self._refuse.items() if path.startswith(p)), None)
            self.requests += 1
            if status is not None:
                self.refused += 1
        return extra, status

    def _requests(self, client: socket.socket, upstream: socket.socket, answered: threading.Event) -> None:
        head = b""  # the first bytes of a request, until its request line is whole
        try:
            while data := client.recv(65536):
                if answered.is_set():  # a new request: it crosses the network first
                    head += data
                    if b"\r\n" not in head and len(head) < 16384:
                        continue
                    answered.clear()
                    extra, status = self._fault(head)
                    time.sleep(self.delay + extra)
                    if status is not None:
                        client.sendall(_refusal(status))
                        return
                    data, head = head, b""
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with suppress(OSError):
                    sock.close()

    def _answers(self, upstream: socket.socket, client: socket.socket, answered: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if not data.startswith(b"HTTP/1.1 100 "):  # `100 Continue` asks for the body: no answer yet
                    answered.set()
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with suppress(OSError):
                    sock.close()


def _refusal(status: int) -> bytes:
    reason, code, message = _REFUSALS[status]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head + body
