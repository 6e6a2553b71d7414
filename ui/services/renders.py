"""A finished job's offline render: the VAE decode from silence of the latents its stream was
decoded from, as a WAV carrying what it is in its RIFF INFO chunk.

The page's A/B compares a take with this render, so "stream == offline" is measured, not assumed.

- Bounded memory whatever the length: the latents are decoded `piece_patches` at a time,
  each piece continuing the decoder's causal state (inference/serving/services.OfflineRender,
  equal to the whole decode), and the WAV is sent as it is made: a header (the length is known
  from the latents), then each piece's PCM. A render too long for the cache holds at most
  `unread_pieces` parts its slowest reader has not read (`Render`, below).
- Live streams first: each piece is its own call on the engine's worker thread, which runs one
  call between two steps (inference/serving/worker.py), so a render adds at most one piece's decode
  to a stream's patch, however many renders run.
- Decoded once: a render small enough for the cache (LatentStore.cacheable) is shared by every GET
  of it while it runs, and cached when done; a longer one only by those that asked before its
  first piece (when its length becomes known), and decoded again for a later GET.
- Caps (the settings' renders section, ui/settings.py): `per_client` renders read at once per
  client (429 beyond), `max_decodes` decodes at
  once in all (503 beyond), both with a Retry-After.

Everything here runs on the event loop's thread: the decode itself runs on an engine's worker
thread, and its pieces come back here through futures.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import json
import logging
import weakref

import numpy as np

from fastapi.responses import Response, StreamingResponse

from inference.errors import QueueFullError
from inference.serving.latent_store import KeptLatents, LatentStore
from inference.serving.services import OfflineRender

from inference.request.listener import Listener, Output

from .audio import pcm16, wav_header
from ..settings import RenderSettings
from ..guard.answers import Refusal

log = logging.getLogger("voxcpm.http")
SOFTWARE = "VoxCPM2 streaming demo"
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _header(decode: OfflineRender, rate: int, job_id: str, heard: Listener) -> bytes:
    comment = {"job": job_id, "render": "offline: VAE decode from silence of the streamed latents",
               "patches": decode.patches, "samples": heard.sent_samples(), "sample_rate": rate}
    if heard.sent_samples() != decode.samples:  # heard otherwise than decoded: as the stream was
        comment |= {**heard.status(), "decoded_samples": decode.samples}
    return wav_header(rate, heard.sent_samples(), {
        b"INAM": f"VoxCPM2 offline render {job_id}", b"ISFT": SOFTWARE,
        b"ICMT": json.dumps(comment, separators=(",", ":"), ensure_ascii=False)})


def _heard(kept: KeptLatents, decode: OfflineRender, rate: int) -> Listener:
    """A listener of the render as the stream's was, the render's length counted as
    its stream's was: the latents' speech and the pauses between them."""
    heard = kept.listener.anew() if kept.listener is not None else Listener(1.0, rate)
    at, patch = 0, (decode.samples - sum(n for _, n in kept.pauses)) // max(1, decode.patches)
    for i, n in kept.pauses:
        heard.deliver((i - at) * patch)
        heard.deliver(n, pause=True)
        at = i
    heard.deliver((decode.patches - at) * patch)
    return heard


class RenderFailed(RuntimeError):
    """A render ended in an error (logged where it happened): its responses are cut short."""


class Render:
    """One decode in progress: the WAV's parts, in order, and where each reader has got to.

    Until its length is known every part is kept (readers may still join). Then `keep` says
    whether it stays so (it fits the cache): if not, no reader joins any more, parts every reader
    has read are dropped, and the decode waits while its slowest reader is `unread_pieces` behind.
    """

    def __init__(self, kept: KeptLatents, retry_s: int, unread_pieces: int):
        self.kept, self.retry_s, self.unread_pieces = kept, retry_s, unread_pieces
        self.keep = True
        self.parts: list[bytes] = []
        self.base = 0  # the number of parts[0]
        self.size: int | None = None  # the WAV's bytes, known with its header
        self.made_bytes = 0
        self.positions: dict[int, int] = {}  # reader -> the number of the next part it reads
        self.error: BaseException | None = None
        self.ended = False
        self.task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    @property
    def made(self) -> int:
        return self.base + len(self.parts)

    @property
    def complete(self) -> bool:
        """Every byte of the WAV is made (its end, and the cache, may still be on their way)."""
        return self.size is not None and self.made_bytes >= self.size

    def add(self, part: bytes):
        self.parts.append(part)
        self.made_bytes += len(part)
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
        """Waits while the slowest reader of a render that is not kept has `unread_pieces` to read."""
        while not self.keep and self.positions and self.made - min(self.positions.values()) >= self.unread_pieces:
            await self._change()

    async def first(self):
        """Waits for the header and the first piece; an error before any audio is raised here."""
        while not self.parts and not self.ended:
            await self._change()
        if not self.parts:
            if isinstance(self.error, QueueFullError):
                raise Refusal(503, str(self.error), {"Retry-After": str(self.retry_s)})
            raise Refusal(500, "the offline render failed on the server; it has been logged")

    def join(self, reader: int):
        assert self.base == 0, "a reader joined a render that no longer keeps its parts"
        self.positions[reader] = 0

    def leave(self, reader: int):
        """A reader is gone: with none left, the decode stops (nobody would get it), unless it is
        all made: then it goes on into the cache (a client that had every byte closed first)."""
        self.positions.pop(reader, None)
        self._trim()
        if not self.positions and self.task is not None and not self.task.done() and not self.complete:
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
                elif self.complete:  # every byte sent: the response ends now, not at end()
                    return
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
            raise Refusal(429, f"at most {self.per_client} offline renders at once per client: "
                                 f"wait for one to finish", retry)
        if decode and self.decodes >= self.max_decodes:
            raise Refusal(503, f"the server is already making {self.max_decodes} offline renders: "
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


class OfflineRenders:
    """The renders in progress on one app, and the caps on them."""

    def __init__(self, settings: RenderSettings):
        self.settings = settings
        self.slots = RenderSlots(settings.max_decodes, settings.per_client, settings.retry_s)
        self._shared: dict[str, Render] = {}  # job id -> its render in progress, while readers may join

    async def respond(self, worker, store: LatentStore, kept: KeptLatents, job_id: str, client: str | None):
        """The job's render as WAV: cached, joined while it runs, or started (within the caps).
        It is made as the stream's listener heard it: its speech time-stretched as the stream's was
        (the same Output, which does not depend on where its input is cut) and its pauses kept as
        written, so the stream and its render still compare sample for sample."""
        key = job_id
        cached = store.render(job_id)
        if cached is not None:
            return Response(cached, media_type="audio/wav", headers=HEADERS)
        render = self._shared.get(key)
        if render is not None and render.kept is not kept:  # the job's latents were replaced
            render = None
        self.slots.check(client, decode=render is None)
        if render is None:
            render = self._start(worker, store, kept, job_id, key)
        lease = Lease(self.slots, client, render)
        try:
            await render.first()
        except BaseException:
            lease.release()
            raise
        headers = {**HEADERS, "Content-Length": str(render.size)}
        return StreamingResponse(render.read(lease), media_type="audio/wav", headers=headers)

    def _start(self, worker, store: LatentStore, kept: KeptLatents, job_id: str, key: str) -> Render:
        render = Render(kept, self.settings.retry_s, self.settings.unread_pieces)
        self._shared[key] = render
        decode = OfflineRender(kept, self.settings.piece_patches)
        rate = int(worker.sample_rate)
        output = (kept.listener.anew() if kept.listener is not None else Listener(1.0, rate)).output()
        render.task = asyncio.get_running_loop().create_task(self._produce(worker, store, decode, render, job_id, key, output))
        self.slots.decode_started()
        render.task.add_done_callback(functools.partial(self._ended, key, render))
        return render

    async def _produce(self, worker, store: LatentStore, decode: OfflineRender, render: Render, job_id: str,
                       key: str, output: Output):
        try:
            while not decode.done:
                await render.room()
                parts = await asyncio.wrap_future(decode.next_piece(worker))
                if render.size is None:
                    heard = _heard(render.kept, decode, int(worker.sample_rate))
                    self._sized(render, _header(decode, int(worker.sample_rate), job_id, heard), heard, store, key)
                audio = await asyncio.to_thread(lambda: np.concatenate([output.feed(a, p) for a, p in parts]))
                if len(audio):
                    render.add(pcm16(audio))
            tail = await asyncio.to_thread(output.finish)
            if len(tail):
                render.add(pcm16(tail))
        except Exception as exc:  # its readers get a 5xx before any audio, or a response cut short
            if not isinstance(exc, QueueFullError):
                log.exception("offline render of %s failed", job_id)
            render.end(exc)
            return
        render.end()
        if render.keep:
            store.keep_render(job_id, render.kept, b"".join(render.parts))

    def _sized(self, render: Render, header: bytes, heard: Listener, store: LatentStore, key: str):
        """The length is known: the header goes first, and a render too long for the cache is read
        only by those who already asked (its parts dropped once read)."""
        render.size = len(header) + 2 * heard.sent_samples()
        render.add(header)
        if not store.cacheable(render.size):
            self._forget(key, render)
            render.stop_keeping()

    def _forget(self, job_id: str, render: Render):
        if self._shared.get(job_id) is render:
            del self._shared[job_id]

    def _ended(self, job_id: str, render: Render, task: asyncio.Task):
        self._forget(job_id, render)
        self.slots.decode_ended()
        if task.cancelled():
            render.end(RenderFailed("cancelled: no reader left"))
