"""A finished job's offline render: the VAE decode from silence of the latents its stream was
decoded from, as a WAV carrying what it is in its RIFF INFO chunk.

The page's A/B compares a take with this render, so "stream == offline" is measured, not assumed.

- Bounded memory whatever the length: the latents are decoded PIECE_PATCHES patches at a time,
  each piece continuing the decoder's causal state (inference/runtime/offline.OfflineDecode,
  equal to the whole decode), and the WAV is sent as it is made: a header (the length is known
  from the latents), then each piece's PCM. A render too long for the cache holds at most
  UNREAD_PIECES parts its slowest reader has not read (render_share.py).
- Live streams first: each piece is its own call on the engine's worker thread, which runs one
  call between two steps (inference/serving/calls.py), so a render adds at most one piece's decode
  to a stream's patch, however many renders run.
- Decoded once: a render small enough for the cache (LatentStore.cacheable) is shared by every GET
  of it while it runs, and cached when done; a longer one only by those that asked before its
  first piece (when its length becomes known), and decoded again for a later GET.
- Caps: RENDERS_PER_CLIENT renders read at once per client (429 beyond), MAX_DECODES decodes at
  once in all (503 beyond), both with a Retry-After.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import struct

import numpy as np
from fastapi.responses import Response, StreamingResponse

from inference.runtime.offline import OfflineDecode
from inference.errors import QueueFullError
from inference.serving.latent_store import KeptLatents, LatentStore

from .render_share import Lease, Render, RenderFailed, RenderSlots

log = logging.getLogger("voxcpm.http")
SOFTWARE = "VoxCPM2 streaming demo"
PIECE_PATCHES = 12  # patches decoded per call (1.9 s of audio)
MAX_DECODES = 4
RENDERS_PER_CLIENT = 2
RETRY_S = 2
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def wav_header(rate: int, samples: int, info: dict[bytes, str]) -> bytes:
    """A 16-bit mono PCM WAV header for `samples` samples, with a LIST INFO chunk (tags such as
    INAM title, ISFT software, ICMT comment: what soundfile reads as .title, .software, .comment)."""
    data = 2 * samples
    listing = b"INFO" + b"".join(_chunk(tag, text.encode("utf-8") + b"\0") for tag, text in info.items())
    chunks = _chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, rate, 2 * rate, 2, 16)) + _chunk(b"LIST", listing)
    size = 4 + len(chunks) + 8 + data
    if size > 0xFFFFFFFF:
        raise ValueError(f"{samples} samples do not fit a WAV file")
    return b"RIFF" + struct.pack("<I", size) + b"WAVE" + chunks + b"data" + struct.pack("<I", data)


def _chunk(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def pcm16(audio: np.ndarray) -> bytes:
    """float audio in [-1, 1] -> int16 little-endian, rounded as the stream rounds it (common.to_pcm)."""
    return np.clip(np.rint(np.asarray(audio, np.float64) * 32767.0), -32768, 32767).astype("<i2").tobytes()


def _header(decode: OfflineDecode, rate: int, job_id: str) -> bytes:
    comment = {"job": job_id, "render": "offline: VAE decode from silence of the streamed latents",
               "patches": len(decode.latents), "samples": decode.samples, "sample_rate": rate}
    return wav_header(rate, decode.samples, {
        b"INAM": f"VoxCPM2 offline render {job_id}", b"ISFT": SOFTWARE,
        b"ICMT": json.dumps(comment, separators=(",", ":"), ensure_ascii=False)})


class OfflineRenders:
    """The renders in progress on one app, and the caps on them."""

    def __init__(self, max_decodes: int = MAX_DECODES, per_client: int = RENDERS_PER_CLIENT,
                 piece_patches: int = PIECE_PATCHES):
        self.piece_patches = piece_patches
        self.slots = RenderSlots(max_decodes, per_client, RETRY_S)
        self._shared: dict[str, Render] = {}  # job id -> its render in progress, while readers may join

    async def respond(self, worker, store: LatentStore, kept: KeptLatents, job_id: str, client: str | None):
        """The job's render as WAV: cached, joined while it runs, or started (within the caps)."""
        cached = store.render(job_id)
        if cached is not None:
            return Response(cached, media_type="audio/wav", headers=HEADERS)
        render = self._shared.get(job_id)
        if render is not None and render.kept is not kept:  # the job's latents were replaced
            render = None
        self.slots.check(client, decode=render is None)
        if render is None:
            render = self._start(worker, store, kept, job_id)
        lease = Lease(self.slots, client, render)
        try:
            await render.first()
        except BaseException:
            lease.release()
            raise
        headers = {**HEADERS, "Content-Length": str(render.size)}
        return StreamingResponse(render.read(lease), media_type="audio/wav", headers=headers)

    def _start(self, worker, store: LatentStore, kept: KeptLatents, job_id: str) -> Render:
        render = Render(kept, RETRY_S)
        self._shared[job_id] = render
        decode = OfflineDecode(kept.latents, kept.context, self.piece_patches, kept.pauses)
        render.task = asyncio.get_running_loop().create_task(self._produce(worker, store, decode, render, job_id))
        self.slots.decode_started()
        render.task.add_done_callback(functools.partial(self._ended, job_id, render))
        return render

    async def _produce(self, worker, store: LatentStore, decode: OfflineDecode, render: Render, job_id: str):
        try:
            while not decode.done:
                await render.room()
                audio = await asyncio.wrap_future(worker.call(functools.partial(_decode_next, decode)))
                if render.size is None:
                    self._sized(render, _header(decode, int(worker.sample_rate), job_id), decode, store, job_id)
                if len(audio):
                    render.add(pcm16(audio))
        except Exception as exc:  # its readers get a 5xx before any audio, or a response cut short
            if not isinstance(exc, QueueFullError):
                log.exception("offline render of %s failed", job_id)
            render.end(exc)
            return
        render.end()
        if render.keep:
            store.keep_render(job_id, render.kept, b"".join(render.parts))

    def _sized(self, render: Render, header: bytes, decode: OfflineDecode, store: LatentStore, job_id: str):
        """The length is known: the header goes first, and a render too long for the cache is
        read only by those who already asked (its parts dropped once read)."""
        render.size = len(header) + 2 * decode.samples
        render.add(header)
        if not store.cacheable(render.size):
            self._forget(job_id, render)
            render.stop_keeping()

    def _forget(self, job_id: str, render: Render):
        if self._shared.get(job_id) is render:
            del self._shared[job_id]

    def _ended(self, job_id: str, render: Render, task: asyncio.Task):
        self._forget(job_id, render)
        self.slots.decode_ended()
        if task.cancelled():
            render.end(RenderFailed("cancelled: no reader left"))


def _decode_next(decode: OfflineDecode, engine):
    return engine.decode_next(decode)
