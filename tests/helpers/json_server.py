"""Test helper: a real HTTP server on 127.0.0.1 that answers JSON, for stand-ins of third-party APIs.

::

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
from types import TracebackType
from typing import Any, Self

__all__ = ["JsonServer", "Request"]


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


class JsonServer:
    """Answers every request with ``respond(request)`` and records it in :attr:`requests`, in order."""

    def __init__(self, respond: Respond) -> None:
        self.requests: list[Request] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request(self.command, self.path, headers, body)
                server.requests.append(request)
                status, payload = respond(request)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        #: ``http://127.0.0.1:<port>``, no trailing slash.
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
