"""The public entry point: load a checkpoint, turn requests into streamed audio chunks.

The engine composes the parts that do the work: a RequestPreparer (inference/runtime/prepare.py:
the host half of a request, `prepare`, on the caller's thread; the voice encoded and the first
prompt on the engine's), a BatchRunner over the step's functions (runner.py, decode_step.py,
compiled.py), the Scheduler that owns rows and streams (scheduler.py), and the offline decode
(offline.py).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from typing import Iterator

import numpy as np
import torch

from ..config import LIMITS
from ..model.loader import LoadedModel, load_checkpoint
from ..request.listener import Listener
from ..request.request import AudioChunk, SynthesisRequest
from .compiled import step_functions
from .decode_step import DecodeStep, plan_rows
from .offline import OfflineDecode
from .prepare import Prepared, RequestPreparer
from .runner import BatchRunner
from .scheduler import EngineFull, Scheduler
from .stream import Stream

__all__ = ["Engine", "EngineFull", "WARMUP_LOCK", "warmup_tone"]

log = logging.getLogger("voxcpm.engine")

# One warm-up at a time in the process, each on its own worker thread. torch.compile is not
# thread-safe: while one thread traces a function, a compiled function called on another thread
# raises ("Detected that you are using FX to symbolically trace a dynamo-optimized function"), which
# failed the second GPU's warm-up when two ran at once (2 x H200, docs/benchmarks.md). Dynamo
# compiles one function at a time anyway, so little is lost.
WARMUP_LOCK = threading.Lock()


def warmup_tone(seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    """A short voiced-like clip for warm-up requests (not silence, which is refused)."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


class Engine:
    """Generates up to `rows` streams at once, one patch of every live stream per `step()`.

    Not thread-safe: one thread owns an engine (inference/serving/worker.py runs its batch loop), except
    `Stream.cancel()` and `prepare()`, which any thread may call. `prepare()` checks a request against
    the engine's limits and does its host work, returning an opaque handle; `start()` gives it a row
    (the Stream, which only the scheduler changes); it joins the batch at the next step. `step()`
    returns what it produced, each stream's new chunks: the one output path. `stream()` is the
    one-request view: a generator that drives the steps (other streams progress too) and yields this
    request's chunks.
    """

    def __init__(self, loaded: LoadedModel, *, cuda_graphs: bool = True, compile: bool = True, hopper: bool = True,
                 max_streams: int = LIMITS.max_streams, max_audio_seconds: float = LIMITS.max_audio_seconds,
                 max_text_chars: int = LIMITS.max_text_chars, max_output_seconds: float = LIMITS.max_output_seconds):
        self.cfg, self.model, self.vae, self.tokenizer = loaded.cfg, loaded.model, loaded.vae, loaded.tokenizer
        self.device = loaded.device
        on_gpu = self.device.type == "cuda"
        self.rows, self.rows_fit = plan_rows(self.model, self.vae, self.device, max_streams)
        log.info("%d concurrent streams (memory holds %d; --max-streams caps it at %d), %.0f MB each",
                 self.rows, self.rows_fit, max_streams,
                 DecodeStep.bytes_per_row(self.model, self.vae, self.cfg.max_length) / 2**20)
        if compile and on_gpu:
            # The VAE decoder owns its streaming function; it fuses it itself (vae_stream.py).
            self.vae.decoder.compile_stream()
        self.runner = BatchRunner(self.model, self.vae, self.rows, step_functions(compile and on_gpu, hopper))
        self.cuda_graphs = cuda_graphs and on_gpu
        self.preparer = RequestPreparer(loaded, max_audio_seconds, max_text_chars, max_output_seconds)
        # prepare(request): checked against the engine's limits (InputError at once; its values were
        # checked when it was made) and made ready on the host: text, segments, tokens, clips'
        # samples (inference/runtime/prepare.py). Any thread may call it. The result is the engine's
        # own, for start() (and encode_ahead()). The preparer's own method: no hop in between.
        self.prepare = self.preparer.prepare
        self.scheduler = Scheduler(self.runner, self.rows)
        self.warmup_seconds: float | None = None
        # The chunks of each stream() generator not yet taken, made by any caller's step. Only
        # stream() reads step()'s return into it (a caller that runs streams itself takes
        # step()'s return); weak, so a generator dropped unstarted leaves nothing behind.
        self.followed: weakref.WeakKeyDictionary[Stream, collections.deque[AudioChunk]] = weakref.WeakKeyDictionary()

    @classmethod
    def from_pretrained(cls, name_or_path: str = "openbmb/VoxCPM2", *, device: str | None = None,
                        dtype: str | None = None, vae_dtype: str = "float32", warmup: bool = True,
                        cuda_graphs: bool = True, compile: bool = True, hopper: bool = True,
                        cache_dir: str | None = None,
                        local_files_only: bool = False, lora: str | None = None, **limits) -> "Engine":
        """name_or_path: a hub id (downloaded into the hub cache) or a local checkpoint folder.
        device defaults to CUDA when present; dtype to bfloat16 on CUDA, float32 on CPU. On CUDA,
        `cuda_graphs` replays captured graphs per patch and `compile` fuses each layer's kernels
        (both switch off for debugging); `hopper` lets the DiT take the optional Hopper kernels
        (requirements-gpu.txt) on the batch buckets where they measure faster at warm-up (off: never
        tried); warm-up does all capture, compilation and that measurement. `lora`: a
        folder or hub id of LoRA weights from the official fine-tuning, merged into the weights
        at load (inference/model/lora.py). `limits`: max_streams, max_audio_seconds, max_text_chars,
        max_output_seconds (Limits.engine_options())."""
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
        loaded = load_checkpoint(name_or_path, device=device, dtype=dtype, vae_dtype=vae_dtype,
                                 cache_dir=cache_dir, local_files_only=local_files_only, lora=lora)
        engine = cls(loaded, cuda_graphs=cuda_graphs, compile=compile, hopper=hopper, **limits)
        if warmup:
            engine.warmup()
        return engine

    # -- what the engine is ------------------------------------------------------------------------
    @property
    def sample_rate(self) -> int:
        return self.cfg.vae.out_sample_rate

    @property
    def patch_samples(self) -> int:
        """The samples of audio one patch makes (at sample_rate)."""
        return self.runner.step.patch_samples

    @property
    def clip_rate(self) -> int:
        """The rate it encodes reference clips at (the VAE's input)."""
        return self.cfg.vae.sample_rate

    @property
    def free_rows(self) -> int:
        return len(self.scheduler.free)

    @property
    def max_text_chars(self) -> int:
        return self.preparer.max_text_chars

    @property
    def max_audio_seconds(self) -> float:
        return self.preparer.max_audio_seconds

    @property
    def max_output_seconds(self) -> float:
        return self.preparer.max_output_seconds

    @property
    def encoder_identity(self) -> str:
        return self.preparer.encoder_identity

    # -- warm-up ------------------------------------------------------------------------------------
    def warmup(self) -> float:
        """Captures the CUDA graphs (fast path) and runs short requests, so that no request pays
        for capture, kernel loading or allocator growth. Returns and logs the seconds taken
        (from when its turn came: engines on other GPUs warm up one at a time, see WARMUP_LOCK)."""
        with WARMUP_LOCK:
            return self._warmup()

    def _warmup(self) -> float:
        start = time.perf_counter()
        if self.cuda_graphs and not self.runner.graphs:
            log.info("capturing CUDA graphs: %d batch buckets x %d attention spans",
                     len(self.runner.buckets), len(self.runner.spans))
            self.runner.capture()
            log.info("%d graphs captured in %.1f s", self.runner.graphs, time.perf_counter() - start)
        clip = (16000, warmup_tone())
        modes = [SynthesisRequest(text="Warm up.", min_len=2, max_len=3, seed=0),
                 SynthesisRequest(text="Warm up.", reference_audio=clip, max_len=2, seed=0),
                 SynthesisRequest(text="Warm up.", prompt_audio=clip, prompt_text="Warm.", max_len=2, seed=0)]
        # Each mode once (the VAE encoder and the continuation's decoder warm-up have their own
        # kernels), then all together (a batched prefill), so none loads during a real request.
        for req in modes:
            for _ in self.stream(req):
                pass
        streams = [self.start(req) for req in modes[: min(len(modes), self.rows)]]
        while not all(s.done for s in streams):
            self.step()
        self.warmup_seconds = time.perf_counter() - start
        logging.getLogger("voxcpm.engine.warmup").info("warm-up took %.1f s on %s", self.warmup_seconds, self.device)
        return self.warmup_seconds

    # -- requests in ------------------------------------------------------------------------------
    def start(self, req: Prepared | SynthesisRequest, listener: Listener | None = None) -> Stream:
        """Gives a prepared request a row (its clips encoded now); it joins at the next step (its
        prefill may be queued now: Scheduler.add). A SynthesisRequest is prepared first, on this
        thread. listener: who hears it (the serving layer's job shares it; by default, one at the
        request's own settings). Raises EngineFull when every row is taken."""
        prepared = req if isinstance(req, Prepared) else self.prepare(req)
        r = prepared.request
        listener = listener or r.listener(self.sample_rate)
        listener.halves = self.patch_samples % 2 == 0  # the step makes each patch at half the rate (Half)
        stream = Stream(0, r.min_len, 1, DecodeStep.iterations(r.inference_timesteps), listener)
        self.scheduler.add(stream, self.preparer.plan(prepared))
        return stream

    def encode_ahead(self, prepared: list) -> None:
        """The clips of requests about to start() together, encoded in a few batched calls instead of
        one a clip (never raises: a clip that fails is left to its own start())."""
        self.preparer.encode_ahead([p for p in prepared if isinstance(p, Prepared)])

    def stream(self, req: SynthesisRequest) -> Iterator[AudioChunk]:
        """Validates the request (raising InputError at once), then returns a generator of its
        chunks. Closing the generator stops this request before its next patch. Generators
        consumed in turn share the batch: each one's steps keep what they made for the others."""
        stream = self.start(req)
        self.followed[stream] = collections.deque()
        return self._follow(stream)

    def synthesize(self, req: SynthesisRequest) -> np.ndarray:
        chunks = [c.audio for c in self.stream(req)]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)

    def _follow(self, stream: Stream) -> Iterator[AudioChunk]:
        waiting = self.followed[stream]
        try:
            while True:
                if waiting:
                    yield waiting.popleft()
                elif stream.done:
                    if stream.error is not None:
                        raise stream.error
                    return
                else:
                    for s, chunks in self.step():
                        if s in self.followed:  # another stream() generator's: kept for it
                            self.followed[s].extend(chunks)
        finally:
            self.followed.pop(stream, None)
            self.stop(stream)

    def stop(self, stream: Stream):
        """Ends a stream now and frees its row (the owner thread; others use Stream.cancel())."""
        self.scheduler.retire(stream)

    @property
    def working(self) -> bool:
        """Whether a step would do anything (False while every stream it holds waits for text)."""
        return self.scheduler.working

    def slack(self) -> float | None:
        """The least audio, in seconds, a playing stream's listener still holds once what is released
        now has reached them (the scheduler's WAY_TO_LISTENER_S less); None while none plays."""
        return self.scheduler.least_slack()

    @torch.inference_mode()
    def step(self) -> list[tuple[Stream, list[AudioChunk]]]:
        """One turn of the batch loop (Scheduler.step): admits, launches, collects. Returns what it
        produced: each stream that released chunks or ended, with its new chunks (oldest first)."""
        return self.scheduler.step()

    # -- work for the owner thread between steps (ui's services) -----------------------------------
    def encode_audio(self, source, side: str, label: str = "audio", trim: bool = False) -> torch.Tensor:
        """An audio clip (or a ReferenceClip, encoded once per side) -> latent patches [n, P, D]."""
        return self.preparer.encode_audio(source, side, label, trim)

    def decode_next(self, render: OfflineDecode) -> list[tuple[np.ndarray, bool]]:
        """The next piece of an offline decode a piece at a time (bounded memory; offline.py), as
        (audio, is a pause) parts."""
        return render.next_parts(self.vae, self.runner.step.dtype, self.device)
