"""Text that is still arriving: the clauses a live session commits while its stream speaks.

A live request (SynthesisRequest.feed) starts with its first clause as its text. Each later clause
is prepared off the engine's thread, like any request's text (RequestPreparer.prepare_more: cut
into segments, every prompt text tokenized), and handed over here; the engine's thread takes what
arrived when the stream has spoken all it had (Continuation.resume). Until `close()`, a stream that
has run out of text waits for more with its row and its voice kept, and its listener hears silence.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ..text.spoken import SpokenText


@dataclass(frozen=True)
class MoreText:
    """One committed clause, made ready: its spoken form and the token ids of every text its
    segments' prompts may read (alone, after the voice's transcript, after a tail)."""
    spoken: SpokenText
    ids: dict[str, list[int]]


class TextFeed:
    """Clauses in from any thread, out to the engine's. `on_more` (optional) is called after each
    add and on close: the serving layer wakes its engine thread with it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: list[MoreText] = []
        self._closed = False
        self.on_more = None

    def add(self, more: MoreText):
        with self._lock:
            if self._closed:
                raise RuntimeError("the feed is closed: no text may follow")
            self._pending.append(more)
        self._wake()

    def close(self):
        """No more text: the stream ends once it has spoken what it has."""
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
