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


class LatencyProxy:
    """Forwards 127.0.0.1:`port` to `target`, adding a fixed latency to every HTTP request: a store across a
    network, in front of a local S3 server. A connection carries requests and answers in turn (HTTP/1.1
    keep-alive), so a request starts with the first bytes the client sends after the server last answered on that
    connection; those wait `delay_seconds` before they are forwarded (a body's later bytes are not held again).
    `requests` counts them."""

    def __init__(self, target_host: str, target_port: int, delay_seconds: float) -> None:
        self.target = (target_host, target_port)
        self.delay = delay_seconds
        self.requests = 0  # requests delayed so far
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    def _requests(self, client: socket.socket, upstream: socket.socket, answered: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if answered.is_set():  # a new request: it crosses the network first
                    answered.clear()
                    with self._lock:
                        self.requests += 1
                    time.sleep(self.delay)
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
                answered.set()
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with suppress(OSError):
                    sock.close()
