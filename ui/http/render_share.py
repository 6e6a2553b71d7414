"""An offline render in progress as its readers see it (`Render`), and the caps on renders
(`RenderSlots`, held per GET by a `Lease`); ui/http/offline.py makes and serves them.

Everything here runs on the event loop's thread: the decode itself runs on an engine's worker
thread, and its pieces come back here through futures.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import weakref

from inference.errors import QueueFullError
from inference.serving.latent_store import KeptLatents

from .common import HTTPError

UNREAD_PIECES = 2  # a render that is not kept decodes ahead of its slowest reader by this many parts


class RenderFailed(RuntimeError):
    """A render ended in an error (logged where it happened): its responses are cut short."""


class Render:
    """One decode in progress: the WAV's parts, in order, and where each reader has got to.

    Until its length is known every part is kept (readers may still join). Then `keep` says
    whether it stays so (it fits the cache): if not, no reader joins any more, parts every reader
    has read are dropped, and the decode waits while its slowest reader is UNREAD_PIECES behind.
    """

    def __init__(self, kept: KeptLatents, retry_s: int):
        self.kept, self.retry_s = kept, retry_s
        self.keep = True
        self.parts: list[bytes] = []
        self.base = 0  # the number of parts[0]
        self.size: int | None = None  # the WAV's bytes, known with its header
        self.positions: dict[int, int] = {}  # reader -> the number of the next part it reads
        self.error: BaseException | None = None
        self.ended = False
        self.task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    @property
    def made(self) -> int:
        return self.base + len(self.parts)

    def add(self, part: bytes):
        self.parts.append(part)
        self._wake()

    def end(self, error: BaseException | None = None):
        if not self.ended:
            self.ended, self.error = True, error
            self._wake()

    def stop_keeping(self):
        self.keep = False
        self._trim()

    def _wake(self):
        self._changed.set()
        self._changed = asyncio.Event()

    async def _change(self):
        await self._changed.wait()

    async def room(self):
        """Waits while the slowest reader of a render that is not kept has UNREAD_PIECES to read."""
        while not self.keep and self.positions and self.made - min(self.positions.values()) >= UNREAD_PIECES:
            await self._change()

    async def first(self):
        """Waits for the header and the first piece; an error before any audio is raised here."""
        while not self.parts and not self.ended:
            await self._change()
        if not self.parts:
            if isinstance(self.error, QueueFullError):
                raise HTTPError(503, str(self.error), {"Retry-After": str(self.retry_s)})
            raise HTTPError(500, "the offline render failed on the server; it has been logged")

    def join(self, reader: int):
        assert self.base == 0, "a reader joined a render that no longer keeps its parts"
        self.positions[reader] = 0

    def leave(self, reader: int):
        """A reader is gone: with none left, the decode stops (nobody would get it)."""
        self.positions.pop(reader, None)
        self._trim()
        if not self.positions and self.task is not None and not self.task.done():
            self.task.cancel()

    def _trim(self):
        if self.keep:
            return
        low = min(self.positions.values(), default=self.made)
        if low > self.base:
            del self.parts[:low - self.base]
            self.base = low
            self._wake()  # room for the next piece

    async def read(self, lease: "Lease"):
        """The response body of one reader, from the first part."""
        try:
            while True:
                at = self.positions[lease.reader]
                if at < self.made:
                    part = self.parts[at - self.base]
                    self.positions[lease.reader] = at + 1
                    self._trim()
                    yield part
                elif self.error is not None:
                    raise RenderFailed("the offline render failed; the response is cut short")
                elif self.ended:
                    return
                else:
                    await self._change()
        finally:
            lease.release()


class RenderSlots:
    """Renders being read, per client, and decodes running, in all, each within its cap."""

    def __init__(self, max_decodes: int, per_client: int, retry_s: int):
        self.max_decodes, self.per_client, self.retry_s = max_decodes, per_client, retry_s
        self.decodes = 0
        self.readers: collections.Counter = collections.Counter()

    def check(self, client: str | None, decode: bool):
        """Raises the 429 or 503 of a GET beyond a cap."""
        retry = {"Retry-After": str(self.retry_s)}
        if self.readers[client] >= self.per_client:
            raise HTTPError(429, f"at most {self.per_client} offline renders at once per client: "
                                 f"wait for one to finish", retry)
        if decode and self.decodes >= self.max_decodes:
            raise HTTPError(503, f"the server is already making {self.max_decodes} offline renders: "
                                 f"try again shortly", retry)

    def decode_started(self):
        self.decodes += 1

    def decode_ended(self):
        self.decodes -= 1

    def take(self, client: str | None):
        self.readers[client] += 1

    def give(self, client: str | None):
        self.readers[client] -= 1
        if self.readers[client] <= 0:
            del self.readers[client]


_readers = itertools.count(1)


class Lease:
    """One GET's place among a render's readers and in its client's share, given back once: when
    its response ends, or when the response is dropped before it was ever read."""

    def __init__(self, slots: RenderSlots, client: str | None, render: Render):
        self.reader = next(_readers)
        slots.take(client)
        render.join(self.reader)
        # Only the response body holds the lease: dropping it unread gives the place back too.
        self._release = weakref.finalize(self, _give_back, slots, client, render, self.reader)
        self._release.atexit = False

    def release(self):
        self._release()


def _give_back(slots: RenderSlots, client: str | None, render: Render, reader: int):
    slots.give(client)
    render.leave(reader)
