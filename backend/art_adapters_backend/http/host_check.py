"""DNS-rebinding guard of a server without an API key: loopback ``Host`` names and ``Origin`` s only.

A server bound to 127.0.0.1 without a key trusts whoever can reach it, and a web page can *rebind* its
own domain name to 127.0.0.1 to reach it (see :class:`HostOriginMiddleware`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from ..config import is_loopback
from ..errors import PermissionDeniedError
from .error_handlers import error_response

__all__ = ["HostOriginMiddleware", "host_name", "host_allowed", "origin_allowed"]

logger = logging.getLogger(__name__)

_HOW_TO_ALLOW = (
    "this server has no API key, so it only answers requests addressed to 127.0.0.1, localhost or "
    "[::1] (a guard against DNS rebinding); to reach it by another name start it with --api-key "
    "(or ART_ADAPTERS_API_KEY), or list the name with --allowed-host NAME"
)


def host_name(host: str) -> str | None:
    """The name in a ``Host`` value (``name``, ``name:port``, ``[v6]:port``), lower-cased; ``None`` if malformed."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        name, rest = host[: end + 1], host[end + 1 :]
    else:
        name, _, port = host.partition(":")
        rest = f":{port}" if _ else ""
    if rest and not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit()):
        return None
    return name or None


def _matches(name: str, allowed: Iterable[str]) -> bool:
    return any(entry == "*" or entry == name for entry in allowed)


def host_allowed(host: str | None, allowed: Iterable[str] = ()) -> bool:
    """Whether a ``Host`` header value names this machine's loopback interface or an allowed name."""
    name = host_name(host) if host else None
    if name is None:
        return False
    return is_loopback(name) or _matches(name, allowed)


def origin_allowed(origin: str | None, allowed: Iterable[str] = ()) -> bool:
    """Whether an ``Origin`` header value is absent (not a browser's cross-site request) or a loopback/allowed URL."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        name = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not name:
        return False  # includes "null" (sandboxed frames, file:// pages)
    if ":" in name:
        name = f"[{name}]"
    return is_loopback(name) or _matches(name, allowed)


class HostOriginMiddleware:
    """Pure ASGI middleware: a 403 for a ``Host`` that is not loopback or a foreign browser ``Origin``.

    A page that rebinds its domain name to 127.0.0.1 makes the browser send its requests to our
    port with ``Host: evil.example``, and reads the answers (it could register and train models
    and read every prompt in the completion records). Browsers do not let a page choose the
    ``Host`` header, and they add an ``Origin`` header to cross-site requests, so, like the MCP
    SDK's HTTP server (``mcp.server.transport_security``), a server without a key answers only
    requests whose ``Host`` is a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``, any
    port) and whose ``Origin``, when present, is a loopback URL; anything else is a 403. Names
    listed with ``--allowed-host`` are accepted too (``*``: any). With an API key the key is the
    guard (a page cannot know it) and this middleware is not installed.

    Args:
        app: the wrapped application.
        allowed_hosts: further host names accepted (lower-case, no port); ``"*"`` accepts any.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = tuple(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts: list[str] = []
        origins: list[str] = []
        for name, value in scope.get("headers", ()):
            if name == b"host":
                hosts.append(value.decode("latin-1"))
            elif name == b"origin":
                origins.append(value.decode("latin-1"))
        host = hosts[0] if hosts else None
        origin = origins[0] if origins else None
        if len(hosts) > 1 or len(origins) > 1:  # which one would the app see? (Starlette: the first)
            which = "Host" if len(hosts) > 1 else "Origin"
            message = f"the request has {len(hosts if which == 'Host' else origins)} {which} headers; send one"
            code = "host_not_allowed" if which == "Host" else "origin_not_allowed"
        elif not host_allowed(host, self.allowed):
            message = f"Host header {host!r} is not a loopback name: {_HOW_TO_ALLOW}"
            code = "host_not_allowed"
        elif not origin_allowed(origin, self.allowed):
            message = f"Origin {origin!r} is not a loopback origin: {_HOW_TO_ALLOW}"
            code = "origin_not_allowed"
        else:
            await self.app(scope, receive, send)
            return
        logger.warning("refused %s %s: %s", scope.get("method"), scope.get("path"), message.split(":")[0])
        if scope["type"] == "websocket":  # pragma: no cover - the API has no websockets
            await send({"type": "websocket.close", "code": 1008})
            return
        await error_response(PermissionDeniedError(message, code=code))(scope, receive, send)
