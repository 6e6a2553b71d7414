"""Connections that hold the server without using it are closed.

uvicorn times out a connection only between two requests (its keep-alive). A connection that
never sends a whole request header, or a client that stops reading a response, stays open as long
as the client likes: the second pins the audio queued for it (the PCM route stops pulling from the
job only once the socket's buffers are full). So the HTTP protocol here closes a connection whose
request has not arrived within `idle_s` of connecting (or of its previous response), and one that
has not taken any of the response for `stall_s` while the server had more to send. The route then
sees the client gone and drops the job's audio. Each cut is logged.

The kernel's send buffer is capped too (`send_buffer`): left to autotune it grows to 4 MiB per
connection on loopback, 40 s of PCM that a client which never reads holds in the machine's memory
before the server even notices it is not reading.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import socket

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("voxcpm.http")


class ConnectionGuard:
    """The cuts above, for either of uvicorn's HTTP protocols (both call these same hooks)."""

    def __init__(self, *args, idle_s: float, stall_s: float, send_buffer: int, **kwargs):  # from AppSettings
        super().__init__(*args, **kwargs)
        self.idle_s, self.stall_s, self.send_buffer = idle_s, stall_s, send_buffer
        self._idle: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None

    def connection_made(self, transport):
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Linux doubles it for bookkeeping; 512 KiB still moves 5 MB/s at 100 ms of latency.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        self._idle = self.loop.call_later(self.idle_s, self._cut, "sent no complete request within", self.idle_s)

    def data_received(self, data: bytes):
        super().data_received(data)
        if self._idle is not None and self.cycle is not None and not self.cycle.response_complete:
            self._idle.cancel()  # a request's header is in: the route takes it from here
            self._idle = None

    def handle_websocket_upgrade(self, *event):  # h11's passes its event, httptools' nothing
        # The socket is the WebSocket protocol's from here (ui/http/live.py times its own idle session).
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        super().handle_websocket_upgrade(*event)

    def on_response_complete(self):
        super().on_response_complete()
        if not self.transport.is_closing():  # the next request's header must come in time too
            self._idle = self.loop.call_later(self.idle_s, self._cut, "sent no complete request within",
                                              self.idle_s)

    def pause_writing(self):
        super().pause_writing()
        self._stall = self.loop.call_later(self.stall_s, self._cut, "read nothing of its response for", self.stall_s)

    def resume_writing(self):
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def connection_lost(self, exc):
        for timer in (self._idle, self._stall):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def _cut(self, what: str, seconds: float):
        if self.transport.is_closing():
            return
        client = "%s:%d" % self.client if self.client else "a client"
        log.warning("closed the connection from %s: it %s %g s", client, what, seconds)
        self.transport.abort()  # close() would wait for the unread buffer to drain, which it never does


class GuardedH11Protocol(ConnectionGuard, H11Protocol):
    pass


try:  # uvicorn's C parser (httptools), when installed: a request's header parsed in C, not in Python
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
        pass

    # The parsers installed here (of HttpSettings.PARSERS), each with its guarded protocol
    PROTOCOLS = {"httptools": GuardedHttpToolsProtocol, "h11": GuardedH11Protocol}
except ImportError:
    PROTOCOLS = {"h11": GuardedH11Protocol}


def protocol_for(parser: str):
    """The guarded protocol for HttpSettings.parser: "auto" takes httptools when it is installed,
    as uvicorn's own "auto" does."""
    if parser == "auto":
        return PROTOCOLS.get("httptools", GuardedH11Protocol)
    if parser not in PROTOCOLS:
        raise ValueError(f"the HTTP parser {parser!r} is not available: this machine has {', '.join(sorted(PROTOCOLS))}"
                         " (httptools comes with `pip install httptools`)")
    return PROTOCOLS[parser]


def server_config(app, settings, **kwargs) -> uvicorn.Config:
    """uvicorn's config for `app` (the app or a loading gate in front of it), with the connection
    limits, HTTP parser and event loop the AppSettings ask for."""
    protocol = functools.partial(protocol_for(settings.http.parser), idle_s=settings.http.idle_timeout_s,
                                 stall_s=settings.http.stall_timeout_s, send_buffer=settings.http.send_buffer_bytes)
    # WebSockets without permessage-deflate: their frames are PCM, which deflate hardly shrinks, and
    # compressing each one (and inflating each text piece) on the one event loop cost a 128-session
    # live load a large share of that loop.
    return uvicorn.Config(app, http=protocol, loop=settings.http.loop, ws_per_message_deflate=False, **kwargs)
