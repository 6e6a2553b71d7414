"""Runs the rows of a DecodeStep: admits new streams, launches patches, collects their results.

A patch is launched for the rows 0..B-1 of the smallest batch bucket that holds every live row,
over the smallest attention span that holds every live position. Its results (audio, latents,
stop flag of each row) come back through pinned host memory; the engine launches the next patch
before it collects one, so the host's work overlaps the GPU's. One thread only.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Any, NamedTuple

import numpy as np
import torch

from ..model.audio_vae import AudioVAE
from ..model.voxcpm2 import VoxCPM2
from ..request.modes import default
from ..request.prompt import DECODE_CONTEXT_PATCHES
from .compiled import PLAIN, StepFunctions
from .cuda_graphs import CAPTURE_LOCK, CUDAGraphed
from .decode_step import DecodeStep, Join

log = logging.getLogger("voxcpm.engine")


def span_buckets(capacity: int, smallest: int = 256) -> list[int]:
    """Attention spans: powers of two from `smallest`, then the whole cache."""
    spans, span = [], smallest
    while span < capacity:
        spans.append(span)
        span *= 2
    return spans + [capacity]


def powers_of_two(limit: int) -> list[int]:
    """Powers of two below `limit`, then `limit`: the sizes of batched prefills and LocEnc calls."""
    sizes, size = [], 1
    while size < limit:
        sizes.append(size)
        size *= 2
    return sizes + [limit]


# Rows between two batch buckets from 16 on (as nano-vllm's): a patch costs what its bucket holds,
# and from 64 rows on that grows about linearly (docs/benchmarks.md), so by powers of two 65 streams
# ran at 128's pace.
BUCKET_STEP = 16


def batch_buckets(rows: int) -> list[int]:
    """Batch sizes with a patch's graphs each: 1, 2, 4, 8, then every BUCKET_STEP rows, then `rows`."""
    return sorted({*(b for b in (1, 2, 4, 8) if b < rows), *range(BUCKET_STEP, rows, BUCKET_STEP), rows})


# Prompt positions one prefill graph may hold (batch x padded length): bounds its activations.
PREFILL_TOKENS = 8192
# From this many prompts on a prefill is compute-bound, and padding costs what it holds: those
# batches also get the lengths halfway between powers of two (48, 96, ...), so an 80-position
# prompt pads to 96, not 128. Smaller batches are launch-bound: one graph per power of two.
FINE_PROMPTS = 16
# Prompt patches one LocEnc graph may embed (an admission's audio positions: clips, tails); more
# are embedded in turns of this many. Its buckets are the powers of two from EMBED_SMALLEST on.
EMBED_PATCHES, EMBED_SMALLEST = 2048, 16


def prefill_keys(buckets: list[int], capacity: int, smallest: int = 32) -> list[tuple[int, int]]:
    """(prompts, padded length) pairs with a prefill graph: every bucket of prompts, lengths in powers
    of two from `smallest` up to half the cache (and 1.5 x those from FINE_PROMPTS prompts on),
    within PREFILL_TOKENS."""
    keys = []
    for k in buckets:
        length = smallest
        while length <= capacity // 2 and k * length <= PREFILL_TOKENS:
            keys.append((k, length))
            middle = length * 3 // 2
            if k >= FINE_PROMPTS and middle <= capacity // 2 and k * middle <= PREFILL_TOKENS:
                keys.append((k, middle))
            length *= 2
    return keys


class Staged(NamedTuple):
    """An admission's prompts and guidance as two flat arrays hold them (BatchRunner._pack)."""
    tokens: Any  # [k, length] integers
    last: Any  # [k] each prompt's last position
    rows: Any  # [k] each prompt's cache row (the scratch row for padding)
    text: Any  # [k, length] floats: 1 on text positions
    audio: Any  # [k, length] 1 on audio positions
    last_patch: Any  # [k, P, D] each prompt's last patch
    cfg: Any  # [k] each prompt's guidance


def staged(ints, floats, k: int, length: int, patch_shape: tuple[int, int]) -> Staged:
    """Views of `ints` [k*length + 2k] and `floats` [k*(2*length + P*D + 1)] (tensors or numpy
    arrays, host or device) as one admission's inputs: the layout its upload and its graph share."""
    m, (p, d) = k * length, patch_shape
    return Staged(ints[:m].reshape(k, length), ints[m:m + k], ints[m + k:m + 2 * k],
                  floats[:m].reshape(k, length), floats[m:2 * m].reshape(k, length),
                  floats[2 * m:2 * m + k * p * d].reshape(k, p, d), floats[2 * m + k * p * d:2 * m + k * (p * d + 1)])


class Collected(NamedTuple):
    """One collected patch, by row (views of one host copy: the next launch writes the slot again)."""
    audio: np.ndarray  # [B, samples] float32
    latents: np.ndarray  # [B, D, P]
    stop: np.ndarray  # [B] the stop head fired
    pcm: np.ndarray  # [B, samples] the audio as int16
    half: np.ndarray  # [B, samples / 2 + HALF_REACH] the patch at half the rate (decode_step.halve)
    half_pcm: np.ndarray  # the same as int16


class BatchRunner:
    """The constructor allocates every static buffer; `capture()` (run by Engine.warmup on CUDA)
    compiles, warms up every key and captures its graph; `admit`, `launch` and `collect` then
    only copy requests in and replay. `fns`: the step's functions, plain or compiled
    (inference/runtime/compiled.py)."""

    def __init__(self, model: VoxCPM2, vae: AudioVAE, rows: int, fns: StepFunctions = PLAIN):
        # One row more than streams: the padding entries of a batched prefill are written there.
        self.step = DecodeStep(model, vae, rows + 1, model.cfg.max_length, fns)
        self.rows, self.capacity, self.scratch_row = rows, model.cfg.max_length, rows
        self.buckets, self.spans = batch_buckets(rows), span_buckets(self.capacity)
        self.prefill_keys = prefill_keys(powers_of_two(rows), self.capacity)
        self.prologue = CUDAGraphed(self.step.prologue)
        self.euler = CUDAGraphed(self.step.euler)
        # A patch's noise and Euler steps at the default timesteps, as one graph: each replay is a
        # PyTorch call on the engine's thread, which lets go of the GIL and waits behind a busy event
        # loop to take it back; other timesteps replay prologue and euler one by one.
        self.usual_iterations = DecodeStep.iterations(default("inference_timesteps"))
        self.denoise = CUDAGraphed(self._denoise)
        self.finish = CUDAGraphed(self.step.finish)
        self.padded_prefill = CUDAGraphed(self._padded_prefill)
        self.embed_buckets = [n for n in powers_of_two(EMBED_PATCHES) if n >= EMBED_SMALLEST]
        self.embed = CUDAGraphed(self._embed)
        self._allocate_padded_prompt()
        self._allocate_host()
        self.in_flight: collections.deque[tuple[int, int]] = collections.deque()  # (slot, bucket)
        self.launches = 0
        self.dit_choice: dict[int, dict[str, float]] = {}  # warm-up's timings per bucket (choose_dit_ops)

    def _allocate_padded_prompt(self):
        """Static inputs of the prefill graphs. An admission uploads its prompts in two copies, one
        of integers and one of floats, each laid out as `staged` reads it, into two flat device
        buffers: every key's inputs are views of them (and of one buffer of embeddings), so the
        host path of a new request is a few PyTorch calls, not a few per input and per prompt. Each
        call lets go of the GIL and must take it back, which behind a busy event loop (a burst of
        requests coming in) can cost a millisecond each."""
        dev, dt, (p, d), n = self.step.device, self.step.dtype, self.step.patch_shape, PREFILL_TOKENS
        h = self.step.lm_hidden.shape[-1]
        self.ints = torch.zeros(n + 2 * self.rows, dtype=torch.long, device=dev)
        self.floats = torch.zeros(2 * n + self.rows * (p * d + 1), device=dev)
        embeds, last_patch = torch.zeros(n, h, device=dev, dtype=dt), torch.zeros(self.rows, p, d, device=dev, dtype=dt)
        self.staged = {key: staged(self.ints, self.floats, *key, (p, d)) for key in self.prefill_keys}
        self.prompt_in = {(k, length): (t.tokens, t.text, t.audio, embeds[: k * length].view(k, length, h),
                                        last_patch[:k], t.last, t.rows)
                          for (k, length), t in self.staged.items()}
        # The LocEnc graphs' patches in and embeddings out (_embed_audio).
        self.patches_in = torch.zeros(EMBED_PATCHES, p, d, device=dev, dtype=dt)
        self.patches_out = torch.zeros(EMBED_PATCHES, h, device=dev, dtype=dt)

    def _allocate_host(self):
        cuda = self.step.device.type == "cuda"
        self.host = [torch.zeros(self.step.outputs.shape, dtype=torch.uint8, pin_memory=cuda) for _ in range(2)]
        self.copied = [torch.cuda.Event() if cuda else None for _ in range(2)]
        # Each launch's copy home as (to, from) views made once, not sliced per step.
        self.homeward = {(slot, b): (self.host[slot][:b], self.step.outputs[:b])
                         for slot in range(2) for b in self.buckets}
        self.fields = {name: (start, end, torch.empty(0, dtype=dtype).numpy().dtype)  # the same views, in NumPy
                       for name, (start, end, dtype) in self.step.layout.items()}

    # -- life cycle ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def capture(self) -> float:
        """Runs every step function once per key (largest bucket first, so the allocator grows
        once), then captures them all into one memory pool. Returns the seconds taken."""
        start = time.perf_counter()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # compiles, loads kernels and cuBLAS handles outside capture
            for _ in range(2):
                for b in reversed(self.buckets):
                    self._denoise(b, self.usual_iterations)
                    for span in self.spans:
                        self.step.finish(b, span)
                for key in self.prefill_keys:
                    # The keys' views overlap: each one's inputs made valid before it runs. Warm-up
                    # prefills must not write into a stream's row, nor gather past a prompt's end.
                    self.ints.zero_()
                    self.staged[key].rows.fill_(self.scratch_row)
                    self._padded_prefill(*key)
                for n in self.embed_buckets:
                    self._embed(n)
            self.step.warm_context_decodes(self.scratch_row, DECODE_CONTEXT_PATCHES)
        torch.cuda.current_stream().wait_stream(stream)
        self.dit_choice = self.choose_dit_ops(stream)
        pool = torch.cuda.graph_pool_handle()
        for b in reversed(self.buckets):
            self.prologue.capture((b,), pool, stream)
            self.euler.capture((b,), pool, stream)
            self.denoise.capture((b, self.usual_iterations), pool, stream)
            for span in self.spans:
                self.finish.capture((b, span), pool, stream)
        for key in reversed(self.prefill_keys):
            self.padded_prefill.capture(key, pool, stream)
        for n in reversed(self.embed_buckets):
            self.embed.capture((n,), pool, stream)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    def choose_dit_ops(self, stream: torch.cuda.Stream) -> dict[int, dict[str, float]]:
        """For each batch bucket, the DiT's layer functions that run its Euler step fastest: the
        step's own (fns.ops, "cuBLAS") and each of fns.dit_choices, each warmed up (a Hopper
        kernel compiles and tunes on its first call) and timed as a graph of nine Euler steps, a
        patch's worth. The step keeps the winner (DecodeStep.dit_ops); a choice that fails to run
        here is left out. Returns each bucket's times in ms, by name."""
        names = list(self.step.fns.dit_options)
        if len(names) == 1:
            return {}
        timed: dict[int, dict[str, float]] = {}
        for b in reversed(self.buckets):
            times = {}
            for name in names:
                self.step.run_dit_on(b, name)
                try:
                    times[name] = self._euler_ms(b, stream)
                except Exception as exc:  # a kernel that does not compile or capture here: the others stay
                    log.warning("DiT layer functions %r at %d rows failed, not used: %s", name, b, exc)
            best = min(times, key=times.get)
            self.step.run_dit_on(b, best)
            timed[b] = times
            log.info("DiT at %d rows: %s (%s)", b, best, ", ".join(f"{n} {ms:.3f} ms" for n, ms in times.items()))
        return timed

    @property
    def dit_chosen(self) -> dict[int, str]:
        """The name of the DiT's functions warm-up chose for each bucket (none without choices)."""
        return {b: min(times, key=times.get) for b, times in self.dit_choice.items()}

    def _euler_ms(self, b: int, stream: torch.cuda.Stream, patches: int = 3) -> float:
        """The fastest of `patches` replays of nine Euler steps of bucket b, in ms (the step's
        counter k is reset by its prologue before each)."""
        with torch.cuda.stream(stream):
            for _ in range(2):  # compiles and tunes outside capture
                self.step.prologue(b)
                self.step.euler(b)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with CAPTURE_LOCK, torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            self.step.euler(b)
        best = float("inf")
        for _ in range(patches):
            self.step.prologue(b)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(9):
                graph.replay()
            end.record()
            end.synchronize()  # deliberate: warm-up reads the time on the host
            best = min(best, start.elapsed_time(end))
        return best

    @property
    def graphs(self) -> int:
        return sum(f.captured for f in (self.prologue, self.euler, self.denoise, self.finish, self.padded_prefill,
                                         self.embed))

    # -- streams in ---------------------------------------------------------------------------------
    @torch.inference_mode()  # the scheduler may admit from Engine.start, outside a step
    def admit(self, joins: list[Join]):
        """Prefill the joining streams and load their rows; queued behind any patch in flight."""
        key = self.prefill_key(len(joins), max(len(j.prompt) for j in joins))
        if key is None and len(joins) > 1:  # too many positions for one prefill: in halves
            half = len(joins) // 2
            self.admit(joins[:half])
            self.admit(joins[half:])
            return
        if key is None:  # a prompt longer than any padded length: the same body, eagerly
            inputs = self._batch_inputs(joins, 1, len(joins[0].prompt))
            self.step.prefill(*inputs[:7])
            rows, cfg = inputs[6], inputs[7]
        else:
            ints, floats = self._pack(joins, *key)
            self.ints[: len(ints)].copy_(ints, non_blocking=True)
            self.floats[: len(floats)].copy_(floats, non_blocking=True)
            embeds = self.prompt_in[key][3]
            embeds.zero_()  # text positions' embeddings are masked out: left at zero
            self._embed_audio(joins, embeds)
            self.padded_prefill(*key)
            rows, cfg = self.staged[key].rows, self.staged[key].cfg
        self.step.load_rows(joins, rows[: len(joins)], cfg[: len(joins)])

    def prefill_key(self, prompts: int, length: int) -> tuple[int, int] | None:
        """The smallest (batch, padded length) that holds the prompts, if any."""
        fits = [key for key in self.prefill_keys if key[0] >= prompts and key[1] >= length]
        return min(fits, key=lambda key: key[0] * key[1], default=None)

    def _pack(self, joins: list[Join], k: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompts padded to [k, length] (padding entries go to the scratch row) and each one's
        guidance, in host memory (pinned on CUDA) laid out as `staged` reads it: filled through
        numpy, so the host work is two PyTorch calls however many prompts join."""
        p, d = self.step.patch_shape
        pin = self.step.device.type == "cuda"
        ints = torch.zeros(k * length + 2 * k, dtype=torch.long, pin_memory=pin)
        floats = torch.zeros(k * (2 * length + p * d + 1), pin_memory=pin)
        host = staged(ints.numpy(), floats.numpy(), k, length, (p, d))
        host.rows[:] = self.scratch_row
        for i, j in enumerate(joins):
            n, prompt = len(j.prompt), j.prompt
            host.tokens[i, :n], host.text[i, :n] = prompt.tokens.numpy(), prompt.text_mask.numpy()
            host.audio[i, :n], host.last_patch[i] = prompt.audio_mask.numpy(), prompt.patches.numpy()[-1]
            host.last[i], host.rows[i], host.cfg[i] = n - 1, j.row, j.cfg_value
        return ints, floats

    def _embed_audio(self, joins: list[Join], embeds: torch.Tensor):
        """LocEnc on the prompts' audio positions alone (clips, tails), written into embeds [k,
        length, hidden] (not in the prefill: text positions' embeddings are masked out there, and
        LocEnc on every position would cost far more than the prefill). The patches go through the
        LocEnc graph of the smallest bucket that holds them (in turns of EMBED_PATCHES): each patch
        is embedded on its own, so the padding changes nothing. Run as compiled layer functions
        instead, LocEnc's 12 layers were dozens of launches from Python per admission, each a trip
        through the GIL: at 128 live sessions, whose every clause is a prefill with its tail's
        patches, they took half of the engine thread's time (docs/benchmarks.md)."""
        where = [(i, np.flatnonzero(j.prompt.audio_mask.numpy())) for i, j in enumerate(joins)]
        where = [(i, positions) for i, positions in where if len(positions)]
        if not where:
            return
        dev = self.step.device
        up = lambda a: self.step.upload(torch.from_numpy(a)).to(dev, non_blocking=True)  # noqa: E731
        patches = np.concatenate([joins[i].prompt.patches.numpy()[positions] for i, positions in where])
        places = np.concatenate([i * embeds.shape[1] + positions for i, positions in where])  # in [k * length]
        flat = embeds.view(-1, embeds.shape[-1])
        for start in range(0, len(patches), EMBED_PATCHES):
            part = patches[start: start + EMBED_PATCHES]
            self.patches_in[: len(part)].copy_(up(part))
            self.embed(next(n for n in self.embed_buckets if n >= len(part)))
            flat.index_copy_(0, up(places[start: start + len(part)]), self.patches_out[: len(part)])

    def _embed(self, n: int):
        """LocEnc of the first n patches in (a bucket: the rest are stale, and only their own rows change)."""
        self.patches_out[:n] = self.step.embed_patches(self.patches_in[:n].unsqueeze(0))[0]

    def _batch_inputs(self, joins: list[Join], k: int, length: int) -> tuple:
        """The prompts padded to [k, length] on the device, as the prefill takes them, then each
        one's guidance: (tokens, text, audio, embeds, last patch, last, rows, cfg), in buffers of
        their own (the eager path's; the graphs' are static)."""
        ints, floats = self._pack(joins, k, length)
        dev = self.step.device
        t = staged(ints.to(dev, non_blocking=True), floats.to(dev, non_blocking=True), k, length, self.step.patch_shape)
        embeds = torch.zeros(k, length, self.step.lm_hidden.shape[-1], device=dev, dtype=self.step.dtype)
        self._embed_audio(joins, embeds)
        return t.tokens, t.text, t.audio, embeds, t.last_patch.to(self.step.dtype), t.last, t.rows, t.cfg

    def _padded_prefill(self, k: int, length: int):
        inputs = self.prompt_in[(k, length)]
        inputs[4].copy_(self.staged[(k, length)].last_patch)  # uploaded as float32 with the rest of the floats
        self.step.prefill(*inputs)

    # -- patches ------------------------------------------------------------------------------------
    def _denoise(self, b: int, iterations: int):
        self.step.prologue(b)
        for _ in range(iterations):
            self.step.euler(b)

    def bucket(self, rows_used: int) -> int:
        return next(b for b in self.buckets if b >= rows_used)

    def span(self, position: int) -> int:
        return next(s for s in self.spans if s > position)

    def launch(self, rows_used: int, position: int, iterations: int):
        """Queue one patch of rows 0..rows_used-1 (in a bucket), whose highest position is
        `position`, with `iterations` Euler steps, and the copy of its results to the host."""
        b = self.bucket(rows_used)
        if iterations == self.usual_iterations:
            self.denoise(b, iterations)
        else:
            self.prologue(b)
            for _ in range(iterations):
                self.euler(b)
        self.finish(b, self.span(position))
        slot = self.launches % 2
        to, source = self.homeward[slot, b]
        to.copy_(source, non_blocking=True)
        if self.copied[slot] is not None:
            self.copied[slot].record()
        self.in_flight.append((slot, b))
        self.launches += 1

    def collect(self) -> Collected:
        """The oldest launched patch, by row."""
        slot, b = self.in_flight.popleft()
        if self.copied[slot] is not None:
            self.copied[slot].synchronize()  # deliberate sync: the patch's audio, latents and stop flags
        raw = self.host[slot][:b].numpy().copy()  # one copy: the slot is written again by the next launch
        out = {name: raw[:, start:end].view(dtype) for name, (start, end, dtype) in self.fields.items()}
        host, n, (p, _) = out["staging"], self.step.patch_samples, self.step.patch_shape
        return Collected(host[:, :n], host[:, n:-1].reshape(b, -1, p), host[:, -1] == 1, out["pcm"], out["half"],
                         out["half_pcm"])

    def ran_since(self, row: int) -> bool:
        """Whether the patch still in flight (one at most, once the oldest is collected) runs `row`:
        its own next patch, or, the row's stream left out (at its segment's cap, parked), the
        harmless garbage of a row below the batch's highest. Either way the row's decoder state has
        moved past the patch just collected."""
        return any(row < b for _, b in self.in_flight)

    def drop_in_flight(self):
        """After a failure: forget launched patches (their results are not wanted)."""
        if self.step.device.type == "cuda":
            torch.cuda.synchronize()  # deliberate, on failure only: nothing in flight may still write
        self.in_flight.clear()
