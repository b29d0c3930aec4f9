"""A TCP proxy on loopback whose link can be cut: a network partition between one process and a server."""

from __future__ import annotations

import socket
import threading
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
