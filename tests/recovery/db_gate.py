"""A TCP relay to PostgreSQL that a test can shut (every relayed connection dropped, new
ones refused at once) and open again: a database outage as a broker process sees it."""

from __future__ import annotations

import contextlib
import socket
import threading


class DatabaseGate:
    """Relays 127.0.0.1:<port> to PostgreSQL on ``target_port`` while open."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._relayed: list[socket.socket] = []
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True, name="db-gate").start()

    def shut(self) -> None:
        """Drop every relayed connection; refuse new ones until :meth:`open`."""
        with self._lock:
            self._open.clear()
            relayed, self._relayed = self._relayed, []
        for sock in relayed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._stopped = True
        self.shut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()  # the server is down: refused as soon as connected
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:  # shut meanwhile: this one must not get through either
                if not self._open.is_set():
                    client.close()
                    server.close()
                    continue
                self._relayed += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    for sock in (src, dst):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
