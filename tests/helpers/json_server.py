"""Test helper: real HTTP servers on 127.0.0.1 that answer JSON, for stand-ins of third-party APIs.

``JsonServer(lambda request: (200, {"ok": True}))`` records each request; a stand-in with its own
routes subclasses :class:`QuietHandler` (``send_json``) and :class:`ServedInThread` (start/stop/with)::

    with JsonServer(lambda request: (200, {"ok": True})) as server:
        httpx.post(server.url + "/v1/x", json={"a": 1})
    server.requests[0].json()  # {"a": 1}, with .method, .path, .headers (lower-case names)
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["JsonServer", "QuietHandler", "Request", "ServedInThread", "serve_in_thread"]


@dataclass
class Request:
    """One request the server received (a gzip body is decompressed)."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


#: Answers a request: ``(status, body)``; a body that is not bytes is sent as JSON.
Respond = Callable[[Request], tuple[int, Any]]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers JSON with :meth:`send_json`."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_json(self, status: int, payload: Any) -> None:
        """Answer ``payload`` (bytes as they are, else as JSON); a client that hung up is no error."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout tests): nobody to answer


def serve_in_thread(handler: type[BaseHTTPRequestHandler], name: str = "stand-in") -> ThreadingHTTPServer:
    """A server on a free 127.0.0.1 port, serving ``handler`` from a daemon thread (``shutdown`` stops it)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
    ).start()
    return httpd


class ServedInThread:
    """Start/stop/``with`` for a stand-in whose :meth:`start` calls :meth:`_serve` with its handler."""

    _httpd: ThreadingHTTPServer | None = None

    def _serve(self, handler: type[BaseHTTPRequestHandler], name: str = "stand-in") -> str:
        """Serve ``handler`` (see :func:`serve_in_thread`); its ``http://127.0.0.1:<port>``."""
        self._httpd = serve_in_thread(handler, name)
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> Self:
        """Start serving (each stand-in says how); returns ``self``."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop serving and free the port (again: nothing)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class JsonServer(ServedInThread):
    """Answers every request with ``respond(request)`` and records it in :attr:`requests`, in order.

    It serves from construction on; :meth:`close` (or leaving ``with``) stops it.
    """

    def __init__(self, respond: Respond) -> None:
        self.requests: list[Request] = []
        server = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request(self.command, self.path, headers, body)
                server.requests.append(request)
                self.send_json(*respond(request))

            do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 - http.server's names

        #: ``http://127.0.0.1:<port>``, no trailing slash.
        self.url = self._serve(Handler, "json-server")

    def start(self) -> Self:
        """Already serving (since construction)."""
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        self.stop()
