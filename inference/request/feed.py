"""Text that is still arriving: the clauses a live session commits while its stream speaks.

A live request (SynthesisRequest.feed) starts with its first clause as its text. The feed belongs
to the session that writes it; the request's preparer opens it (RequestPreparer.prepare), handing
it the way to make a later clause ready as it made the first: cut into segments, every text its
prompts may read tokenized, the cache's room checked. So `add_text` takes a clause from the
session straight to what the engine's thread reads, on the caller's thread and never the engine's,
with no job or worker in between; the engine's thread takes what arrived when the stream has spoken
all it had (Continuation.resume). Until `close()`, a stream that has run out of text waits for more
with its row and its voice kept, and its listener hears silence.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from ..text.spoken import SpokenText


@dataclass(frozen=True)
class MoreText:
    """One committed clause, made ready: its spoken form and the token ids of every text its
    segments' prompts may read (alone, after the voice's transcript, after a tail)."""
    spoken: SpokenText
    ids: dict[str, list[int]]


class TextFeed:
    """Clauses in from the session's thread, out to the engine's. `on_more` (optional) is called
    after each add and on close: the serving layer wakes its engine thread with it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: list[MoreText] = []
        self._closed = False
        self._prepare: Callable[[list[str], str], MoreText] | None = None
        self.on_more = None
        # The segments each clause was cut into (the first clause's, then each added one's), and all
        # their segments as spoken: a later clause's prompts may read the last ones as tails. Known
        # before any of the clause's audio can come; written by the one caller of add_text.
        self.clause_segments: list[int] = []
        self._spoken: list[str] = []

    def open(self, prepare: Callable[[list[str], str], MoreText], first: SpokenText):
        """The preparer's part (RequestPreparer.prepare): how a later clause is made ready (from
        the segments spoken before it and its text), and the first clause as it will be spoken."""
        self._prepare = prepare
        self.clause_segments, self._spoken = [len(first)], list(first.segments)

    def add_text(self, text: str):
        """The next clause, made ready on the caller's thread (InputError when it cannot be spoken;
        the feed goes on), then handed over. One caller at a time: a session's clauses come in order."""
        if self._prepare is None:
            raise RuntimeError("the feed's request has not been prepared yet")
        if self.closed:
            raise RuntimeError("the feed is closed: its stream takes no more text")
        more = self._prepare(list(self._spoken), text)
        self._spoken = self._spoken + more.spoken.segments
        self.clause_segments = self.clause_segments + [len(more.spoken)]
        self.add(more)

    def add(self, more: MoreText):
        with self._lock:
            if self._closed:
                raise RuntimeError("the feed is closed: its stream takes no more text")
            self._pending.append(more)
        self._wake()

    def close(self):
        """No more text: the stream ends once it has spoken what it has (or has ended already)."""
        with self._lock:
            self._closed = True
        self._wake()

    def take(self) -> tuple[list[MoreText], bool]:
        """What arrived since the last take, and whether the feed is closed (nothing will follow it)."""
        with self._lock:
            taken, self._pending = self._pending, []
            return taken, self._closed

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def _wake(self):
        if self.on_more is not None:
            self.on_more()
