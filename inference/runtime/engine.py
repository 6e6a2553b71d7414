"""The public entry point: load a checkpoint, turn requests into streamed audio chunks."""
from __future__ import annotations

import collections
import heapq
import logging
import threading
import time
from typing import Iterator

import numpy as np
import torch

from ..request.audio_input import load_audio, pad_to_multiple
from ..errors import InputError
from .compiled import compile_step_functions
from .decode_step import DecodeStep, patches_to_frames, plan_rows
from ..model.loader import LoadedModel, load_checkpoint
from ..request.continuation import Continuation, SegmentStart
from ..request.prompt import Prompt, encode_voice
from ..request.reference import ReferenceClip, encoder_identity
from ..request.request import AudioChunk, SynthesisRequest
from .runner import BatchRunner, Join
from ..text.segments import SEGMENT_WEIGHT
from ..text.spoken import SpokenText
from .stream import Stream
from ..request.vad import trim_silence

log = logging.getLogger("voxcpm.engine")

# One warm-up at a time in the process, each on its own worker thread. torch.compile is not
# thread-safe: while one thread traces a function, a compiled function called on another thread
# raises ("Detected that you are using FX to symbolically trace a dynamo-optimized function"), which
# failed the second GPU's warm-up when two ran at once (2 x H200, bench/RESULTS.md). Dynamo
# compiles one function at a time anyway, so little is lost.
WARMUP_LOCK = threading.Lock()


def warmup_tone(seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    """A short voiced-like clip for warm-up requests (not silence, which is refused)."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


class Engine:
    """Generates up to `rows` streams at once, one patch of every live stream per `step()`.

    Not thread-safe: one thread owns an engine (inference/serving/worker.py runs its batch loop), except
    `Stream.cancel()`, which any thread may call. `start()` validates a request and gives it a row;
    it joins the batch at the next step. `stream()` is the one-request view: a generator that
    drives the steps (other streams progress too) and yields this request's chunks.
    """

    def __init__(self, loaded: LoadedModel, *, cuda_graphs: bool = True, compile: bool = True,
                 max_streams: int = 64, max_audio_seconds: float = 60.0, max_text_chars: int = 20000):
        self.cfg, self.model, self.vae, self.tokenizer = loaded.cfg, loaded.model, loaded.vae, loaded.tokenizer
        self.device = loaded.device
        self.max_audio_seconds = max_audio_seconds
        self.max_text_chars = max_text_chars
        self.segment_weight = SEGMENT_WEIGHT  # the bound on one segment of a long text (inference/text/segments.py)
        on_gpu = self.device.type == "cuda"
        self.rows, self.rows_fit = plan_rows(self.model, self.vae, self.device, max_streams)
        log.info("%d concurrent streams (memory holds %d; --max-streams caps it at %d), %.0f MB each",
                 self.rows, self.rows_fit, max_streams,
                 DecodeStep.bytes_per_row(self.model, self.vae, self.cfg.max_length) / 2**20)
        if compile and on_gpu:
            compile_step_functions(self.model, self.vae)
        self.runner = BatchRunner(self.model, self.vae, self.rows)
        self.cuda_graphs = cuda_graphs and on_gpu
        # What encoded patches depend on: a ReferenceClip's memo from another checkpoint is not used.
        self.encoder_identity = encoder_identity(self.vae, self.cfg.vae.sample_rate, self.cfg.prompt_pad_samples)
        self.warmup_seconds: float | None = None
        self._free = list(range(self.rows))  # a heap: the lowest free row first keeps buckets small
        self._joining: list[Stream] = []
        self._live: list[Stream] = []
        self._launched: collections.deque[list[tuple[Stream, int]]] = collections.deque()

    @classmethod
    def from_pretrained(cls, name_or_path: str = "openbmb/VoxCPM2", *, device: str | None = None,
                        dtype: str | None = None, vae_dtype: str = "float32", warmup: bool = True,
                        cuda_graphs: bool = True, compile: bool = True, cache_dir: str | None = None,
                        local_files_only: bool = False, **limits) -> "Engine":
        """name_or_path: a hub id (downloaded into the hub cache) or a local checkpoint folder.
        device defaults to CUDA when present; dtype to bfloat16 on CUDA, float32 on CPU. On CUDA,
        `cuda_graphs` replays captured graphs per patch and `compile` fuses each layer's kernels
        (both switch off for debugging); warm-up does all capture and compilation. `limits`:
        max_streams, max_audio_seconds, max_text_chars."""
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
        loaded = load_checkpoint(name_or_path, device=device, dtype=dtype, vae_dtype=vae_dtype,
                                 cache_dir=cache_dir, local_files_only=local_files_only)
        engine = cls(loaded, cuda_graphs=cuda_graphs, compile=compile, **limits)
        if warmup:
            engine.warmup()
        return engine

    @property
    def sample_rate(self) -> int:
        return self.cfg.vae.out_sample_rate

    @property
    def free_rows(self) -> int:
        return len(self._free)

    @property
    def active(self) -> int:
        """Streams holding a row (joining or live)."""
        return len(self._joining) + len(self._live)

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
    def start(self, req: SynthesisRequest) -> Stream:
        """Validates the request (raising InputError at once) and gives it a row; it joins at the
        next step. Raises EngineFull when every row is taken."""
        stream = Stream(0, req.min_len, 1, DecodeStep.iterations(req.inference_timesteps))
        plan = self.plan(req, stream.chunks)
        if not self._free:
            plan.close()
            raise EngineFull(f"all {self.rows} streams are in use: wait for one to end")
        stream.plan, stream.row = plan, heapq.heappop(self._free)
        stream.decode_context = plan.start.prompt.decode_context  # for the offline render of its latents
        self._enter(stream, plan.start)
        return stream

    def _enter(self, stream: Stream, start: SegmentStart):
        """Into the joining streams, to be (re-)prefilled with `start` at the next step."""
        stream.restart(len(start.prompt), start.cap)
        stream.join = Join(stream.row, start.prompt, start.noise, stream.plan.req.inference_timesteps,
                           float(stream.plan.req.cfg_value), start.decoder)
        self._joining.append(stream)

    def stream(self, req: SynthesisRequest) -> Iterator[AudioChunk]:
        """Validates the request (raising InputError at once), then returns a generator of its
        chunks. Closing the generator stops this request before its next patch."""
        return self._follow(self.start(req))

    def synthesize(self, req: SynthesisRequest) -> np.ndarray:
        chunks = [c.audio for c in self.stream(req)]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)

    def _follow(self, stream: Stream) -> Iterator[AudioChunk]:
        try:
            while True:
                if stream.chunks:
                    yield stream.chunks.popleft()
                elif stream.done:
                    if stream.error is not None:
                        raise stream.error
                    return
                else:
                    self.step()
        finally:
            self.stop(stream)

    def stop(self, stream: Stream):
        """Ends a stream now and frees its row (the owner thread; others use Stream.cancel())."""
        self._retire(stream)

    # -- the batch loop -----------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self):
        """Admits the streams started since the last step, launches the next patch of every live
        stream, and collects the oldest patch in flight into each stream's chunks. Failures land
        on the streams they concern (Stream.error); the engine goes on."""
        for stream in [s for s in self._joining + self._live if s.cancelled]:
            self._retire(stream)
        if self._joining:
            self._admit()
        try:
            launched = self._launch()
            if len(self._launched) > 1 or (self._launched and not launched):
                self._collect()
        except Exception as exc:  # the patch of every live stream is lost: they all fail
            self.runner.drop_in_flight()
            self._launched.clear()
            for stream in list(self._live):
                self._fail(stream, exc)

    def _admit(self):
        joining, self._joining = self._joining, []
        try:
            self._admit_group(joining)
        except Exception as exc:
            if len(joining) == 1:
                self._fail(joining[0], exc)
            else:  # one at a time, so that a stream that cannot fit fails alone
                for stream in joining:
                    try:
                        self._admit_group([stream])
                    except Exception as single:
                        self._fail(stream, single)
        for stream in joining:
            stream.join = None  # the prompt and noise are on the device now

    def _admit_group(self, streams: list[Stream]):
        self.runner.admit([s.join for s in streams])
        self._live += streams

    def _launch(self) -> bool:
        streams = [s for s in self._live if s.wants_patch()]
        if not streams:
            return False
        self.runner.launch(max(s.row for s in streams) + 1, max(s.position for s in streams),
                           max(s.iterations for s in streams))
        self._launched.append([(s, s.launched, s.generation) for s in streams])
        for s in streams:
            s.launched += 1
        return True

    def _collect(self):
        audio, latents, stop = self.runner.collect()
        for stream, index, generation in self._launched.popleft():
            # Retired since this patch was launched (its row may be someone else's), or re-prefilled
            # for another segment (the patch ran past the end of the last one).
            if stream.done or generation != stream.generation:
                continue
            row = stream.row
            chunk = AudioChunk(audio=audio[row].copy(), latents=latents[row].copy(), index=index)
            after = stream.plan.add(chunk, stream.stops_after(index, bool(stop[row])))
            if after is True:
                self._retire(stream)
            elif after is not None:
                if after.decoder == "carry" and stream.launched > index + 1:
                    after.decoder = "carry_undo"
                self._live.remove(stream)
                self._enter(stream, after)

    def _retire(self, stream: Stream):
        if stream.done:
            return
        stream.done = True
        if stream.plan is not None:
            stream.plan.close()
        for group in (self._joining, self._live):
            if stream in group:
                group.remove(stream)
        heapq.heappush(self._free, stream.row)

    def _fail(self, stream: Stream, exc: BaseException):
        stream.error = exc
        self._retire(stream)

    # -- request preparation ------------------------------------------------------------------------
    def plan(self, req: SynthesisRequest, out=None) -> Continuation:
        """The request's segments, its voice encoded once, and its first segment's prompt and
        noise; released chunks go to `out`."""
        if not isinstance(req, SynthesisRequest):
            raise InputError("expected a SynthesisRequest")
        if len(req.text) > self.max_text_chars:
            raise InputError(f"text is {len(req.text)} characters long; the limit is {self.max_text_chars}")
        shape = (self.cfg.patch_size, self.cfg.feat_dim)
        voice = encode_voice(req, self.encode_audio)
        spoken = SpokenText(req.text, req.normalize, self.segment_weight)
        plan = Continuation(req, voice, spoken, self.tokenizer.encode, shape, self.length_cap,
                            self.model.base_cache.capacity, out)
        if len(plan.start.prompt) >= self.model.base_cache.capacity:
            plan.close()
            raise InputError(f"the prompt is {len(plan.start.prompt)} positions long; the model holds at most "
                             f"{self.model.base_cache.capacity - 1}: use a shorter text or clip")
        return plan

    def prepare(self, req: SynthesisRequest) -> Prompt:
        """The prompt of the request's first segment."""
        return self.plan(req).start.prompt

    def length_cap(self, req: SynthesisRequest, prompt: Prompt) -> int:
        """The official cap, min(6 * target tokens + 10, max_len), bounded by the cache's room."""
        room = self.model.base_cache.capacity - len(prompt)
        return max(1, min(int(prompt.target_tokens * 6 + 10), req.max_len, room))

    @torch.inference_mode()
    def encode_audio(self, source, side: str, label: str = "audio", trim: bool = False) -> torch.Tensor:
        """An audio clip -> its latent patches [n, P, D] (float32, on the host); `trim` cuts the
        silence at its ends first (inference/request/vad.py). A ReferenceClip is encoded once per side and
        trim: later requests with it reuse the patches (inference/request/reference.py)."""
        if not isinstance(source, ReferenceClip):
            return self._encode(source, side, label, trim)
        key = (self.encoder_identity, f"{side}-trimmed" if trim else side)
        patches = source.latents(key)
        if patches is None:
            patches = self._encode(source.samples(), side, label, trim)
            source.remember(key, patches)
        return patches

    def _encode(self, source, side: str, label: str, trim: bool) -> torch.Tensor:
        rate = self.cfg.vae.sample_rate
        audio = load_audio(source, target_rate=rate, max_seconds=self.max_audio_seconds, label=label)
        if trim:
            audio = trim_silence(audio, rate, label)
        audio = pad_to_multiple(audio, self.cfg.prompt_pad_samples, side)
        wave = torch.from_numpy(audio).to(self.device, next(self.vae.parameters()).dtype).unsqueeze(0)
        frames = self.vae.encode(wave)[0].float()  # [D, F]
        d, p = self.cfg.feat_dim, self.cfg.patch_size
        # Deliberate sync, once per clip: the prompt is assembled on the host.
        return frames.view(d, -1, p).permute(1, 2, 0).cpu()

    def decode_whole(self, latents: np.ndarray, context: torch.Tensor | None = None) -> np.ndarray:
        """Offline reference decode of [n, D, P] latents (after optional context patches [C, P, D])."""
        patches = torch.as_tensor(latents).transpose(1, 2)
        if context is not None and len(context):
            patches = torch.cat((context.to(self.runner.step.dtype).float(), patches))
        vae_dtype = next(self.vae.parameters()).dtype
        with torch.inference_mode():
            audio = self.vae.decode(patches_to_frames(patches.unsqueeze(0)).to(self.device, vae_dtype))[0]
        skip = 0 if context is None else len(context) * self.cfg.patch_samples
        return audio[skip:].float().cpu().numpy()


class EngineFull(RuntimeError):
    """Every row holds a stream; the caller should wait for one to end (the worker queues)."""
