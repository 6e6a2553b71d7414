"""The latents of finished requests, kept a while so that their offline render can be asked for.

A take's offline render (the VAE decode from silence of the same latents, a piece at a time:
inference/runtime/offline.py) is the reference its stream is compared with in the page's A/B.
Latents are small (1 KiB per 160 ms patch in float32, about 6 KiB per second of audio), but a
server that kept every one would still grow without bound: entries expire after a TTL, and the
oldest go first when the total passes a byte cap. One store serves every worker of a pool (job
ids are unique across it).

It also keeps a few finished renders (the WAV bytes, 15 times the latents' size), within a byte
cap of their own, least recently asked for going first: a render is cached only while its
latents are kept, and goes with them, so a cached render is always of the latents kept now.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..config import LIMITS
from ..request.listener import Listener


@dataclass
class KeptLatents:
    latents: np.ndarray  # float32 [patches, feat_dim, patch_size], as the stream's chunks carried them
    context: np.ndarray | None  # [C, patch_size, feat_dim] the decoder was warmed on (continuation), or None
    expires_at: float
    pauses: tuple[tuple[int, int], ...] = ()  # (latents before it, samples) of each pause's silence
    listener: Listener | None = None  # who heard the stream: the render is made as they heard it

    @property
    def nbytes(self) -> int:
        return self.latents.nbytes + (0 if self.context is None else self.context.nbytes)


class LatentStore:
    def __init__(self, max_bytes: int = LIMITS.latents_mb * 2**20, ttl_s: float = LIMITS.latents_ttl_s,
                 clock=time.monotonic, max_render_bytes: int = 64 * 2**20):
        """max_render_bytes: the cap on cached renders (one render may take a quarter of it)."""
        self.max_bytes, self.ttl_s, self._clock = max_bytes, ttl_s, clock
        self.max_render_bytes = max_render_bytes
        self._items: OrderedDict[str, KeptLatents] = OrderedDict()
        self._renders: OrderedDict[str, bytes] = OrderedDict()  # least recently asked for first
        self._bytes = self._render_bytes = 0
        self._lock = threading.Lock()

    def keep(self, job_id: str, patches: list[np.ndarray], context, pauses=(), listener: Listener | None = None) -> bool:
        """Stores a finished job's patches (and where its pauses fell: OfflineDecode); False when
        there are none or they alone pass the cap."""
        if not patches:
            return False
        context = None if context is None or len(context) == 0 else np.asarray(context, dtype=np.float32)
        item = KeptLatents(np.stack(patches).astype(np.float32, copy=False), context, self._clock() + self.ttl_s,
                           tuple((int(i), int(n)) for i, n in pauses), listener)
        if item.nbytes > self.max_bytes:
            return False
        with self._lock:
            self._drop(job_id)
            self._items[job_id] = item
            self._bytes += item.nbytes
            self._expire()
            while self._bytes > self.max_bytes:  # the oldest make room
                self._drop(next(iter(self._items)))
        return True

    def get(self, job_id: str) -> KeptLatents | None:
        with self._lock:
            self._expire()
            return self._items.get(job_id)

    def cacheable(self, size: int) -> bool:
        """Whether a render of `size` bytes would be cached (so worth collecting while it streams)."""
        return size <= self.max_render_bytes // 4

    def keep_render(self, job_id: str, kept: KeptLatents, wav: bytes) -> bool:
        """Caches a finished render of `kept`; False when too large, or `kept` is no longer what
        the store holds for the job (expired, dropped or replaced meanwhile)."""
        if not self.cacheable(len(wav)):
            return False
        with self._lock:
            self._expire()
            if self._items.get(job_id) is not kept:
                return False
            self._drop_render(job_id)
            self._renders[job_id] = wav
            self._render_bytes += len(wav)
            while self._render_bytes > self.max_render_bytes:
                self._drop_render(next(iter(self._renders)))
        return True

    def render(self, job_id: str) -> bytes | None:
        """The cached render of the job's kept latents, or None."""
        with self._lock:
            self._expire()
            wav = self._renders.get(job_id)
            if wav is not None:
                self._renders.move_to_end(job_id)
            return wav

    @property
    def render_bytes(self) -> int:
        with self._lock:
            return self._render_bytes

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def _expire(self):
        # Every item goes in last with the same TTL (keep), so the first to expire come first: the
        # look stops at the first one still kept, instead of every call scanning all of them (a
        # scan the engine's thread made at each job's end: 6% of its samples under a served load).
        now = self._clock()
        while self._items:
            job_id, item = next(iter(self._items.items()))
            if item.expires_at > now:
                return
            self._drop(job_id)

    def _drop(self, job_id: str):
        item = self._items.pop(job_id, None)
        if item is not None:
            self._bytes -= item.nbytes
        self._drop_render(job_id)

    def _drop_render(self, job_id: str):
        wav = self._renders.pop(job_id, None)
        if wav is not None:
            self._render_bytes -= len(wav)
