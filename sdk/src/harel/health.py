"""The worker's HTTP endpoints: /healthz (alive), /readyz (connected and start-up checks passed), /metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harel.errors import EndpointUnavailable

log = logging.getLogger("harel.health")


class HealthServer:
    def __init__(
        self,
        port: int,
        *,
        alive: Callable[[], bool],
        ready: Callable[[], tuple[bool, str]],
        metrics: Callable[[], bytes],
        host: str = "0.0.0.0",  # probes come from the kubelet / compose, not from loopback
    ) -> None:
        handler = _handler(alive, ready, metrics)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as error:  # the port is taken, the address is not this host's, or a privileged port
            raise EndpointUnavailable(host, port, error.strerror or str(error)) from None
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="harel-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("health endpoints listening", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(
    alive: Callable[[], bool], ready: Callable[[], tuple[bool, str]], metrics: Callable[[], bytes]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok = alive()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"stalled\n")
            elif self.path == "/readyz":
                ok, why = ready()
                self._reply(200 if ok else 503, (why + "\n").encode())
            elif self.path == "/metrics":
                self._reply(200, metrics(), "text/plain; version=0.0.4")
            else:
                self._reply(404, b"not found\n")

        def _reply(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds would drown the logs."""

    return Handler
