"""A local S3 server for the object store's tests and bench/store_bench.py: moto's server mode on
127.0.0.1 in a thread (no network, no Docker), with every request counted by method and bytes."""
from __future__ import annotations

import collections
import logging
import threading

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class Counted:
    """WSGI middleware: ``requests[(method, status)]`` and ``bytes_in``/``bytes_out`` (bodies) of every request,
    and ``gets``: each GET's path and Range header."""

    def __init__(self, app):
        self.app = app
        self.requests: collections.Counter = collections.Counter()
        self.bytes_in = self.bytes_out = 0   # to the server (PUT bodies), from it (GET bodies)
        self.gets: list[tuple[str, str]] = []   # (path, Range header or "") of every GET of an object
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        if environ["QUERY_STRING"].startswith("list-type") or "list-type=" in environ["QUERY_STRING"]:
            method = "LIST"
        seen = {}

        def start(status, headers, exc_info=None):
            seen["status"] = int(status.split()[0])
            return start_response(status, headers, exc_info)

        body = self.app(environ, start)
        chunks = list(body)
        with self.lock:
            self.requests[(method, seen.get("status", 0))] += 1
            self.bytes_in += int(environ.get("CONTENT_LENGTH") or 0)
            self.bytes_out += sum(len(c) for c in chunks) if method in ("GET",) else 0
            if method == "GET":
                self.gets.append((environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE", "")))
        return chunks

    def count(self, method: str, ok_only: bool = True) -> int:
        """Requests of ``method`` ("GET", "PUT", "LIST", "DELETE", "POST"), those answered 2xx with ``ok_only``."""
        return sum(n for (m, status), n in self.requests.items() if m == method and (not ok_only or status < 300))

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.gets.clear()
            self.bytes_in = self.bytes_out = 0


class CountedMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose app is wrapped in ``Counted`` (``self.counted``); port 0 picks a free port."""

    def __init__(self, ip_address: str = "127.0.0.1", port: int = 0):
        super().__init__(ip_address, port, verbose=False)
        self.counted = Counted(DomainDispatcherApplication(create_backend_app))

    def _server_entry(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = make_server(self._ip_address, self._port, self.counted, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def url(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"
