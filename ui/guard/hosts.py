"""Requests meant for another site are refused: DNS rebinding and cross-origin writes.

A page on attacker.example can make its own name resolve to 127.0.0.1 and then talk to a demo on
this machine as if same-origin; the only trace is the Host header, which still says
attacker.example. So a server bound to loopback answers only loopback host names (plus
--allowed-hosts). Independently, a write (POST and the like, or a WebSocket) whose Origin header
names another site is refused: a form or a fetch with a text/plain body needs no CORS preflight,
so without this any page could make this server generate.

A plain ASGI middleware, like ui/guard/auth.py, so streams pass through unbuffered.
"""
from __future__ import annotations

import logging
from urllib.parse import urlsplit

from .answers import send_refusal

log = logging.getLogger("voxcpm.http")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def allowed_hosts_for(bind: str, extra: list[str] | tuple[str, ...] = ()) -> list[str] | None:
    """The host names to answer to: loopback names when bound to loopback, plus `extra`; None
    (any name) when bound elsewhere and no list was given, as behind a Space's proxy."""
    extra = [name.strip().lower().rstrip(".") for name in extra if name.strip()]
    if is_loopback(bind):
        return list(LOOPBACK_NAMES) + extra
    return extra or None


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_NAMES or host.startswith("127.")


def host_and_port(authority: str | None) -> tuple[str, int | None] | None:
    """'Example.com:7860' -> ('example.com', 7860); '[::1]' -> ('::1', None); None if unreadable."""
    if not authority or "@" in authority or "/" in authority:  # user info or a path: not a host name
        return None
    try:
        parts = urlsplit("//" + authority)
        name, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number, an unclosed [
        return None
    return (name.rstrip("."), port) if name else None


class HostGuard:
    def __init__(self, app, allowed_hosts: list[str] | None):
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower().rstrip(".") for h in allowed_hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = host_and_port(headers.get("host"))
        problem = self._host_problem(host) or self._origin_problem(scope, headers.get("origin"), host)
        if problem is None:
            return await self.app(scope, receive, send)
        log.warning("refused %s %s: %s", scope.get("method", "WEBSOCKET"), scope["path"][:100], problem)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await send_refusal(send, scope, 403, problem)

    def _host_problem(self, host) -> str | None:
        if self.allowed is None or (host is not None and host[0] in self.allowed):
            return None
        names = ", ".join(sorted(self.allowed))
        return (f"this server answers only to the host names {names} (the Host header names "
                f"{(host or ('none',))[0][:100]!r}); start it with --allowed-hosts to add a name")

    def _origin_problem(self, scope, origin: str | None, host) -> str | None:
        if origin is None or (scope["type"] == "http" and scope.get("method") in SAFE_METHODS):
            return None
        # Same origin means the same name and port as the Host header; "null" (a sandboxed frame, a
        # file:// page) is never this site.
        origin_host = host_and_port(origin.split("://", 1)[-1]) if origin != "null" else None
        if origin_host is not None and origin_host == host:
            return None
        return ("a page from another site cannot send requests here (the Origin header does not match "
                "this server): open the demo's own page")
