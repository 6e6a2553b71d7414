"""The public entry point: load a checkpoint, turn requests into streamed audio chunks."""
from __future__ import annotations

import logging
import secrets
import time
from typing import Iterator

import numpy as np
import torch

from .audio_input import load_audio, pad_to_multiple
from .errors import InputError
from .loader import LoadedModel, load_checkpoint
from .prompt import Prompt, build_prompt
from .request import AudioChunk, SynthesisRequest
from .runner import EagerRunner, patches_to_frames

log = logging.getLogger("voxcpm.engine")


def warmup_tone(seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    """A short voiced-like clip for warm-up requests (not silence, which is refused)."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)


class Engine:
    """Not thread-safe: one worker thread owns an engine (see inference/worker.py). It generates
    one stream at a time, since the KV caches and the decoder state are the engine's: starting a
    stream makes any unfinished earlier one fail at its next chunk instead of yielding wrong audio."""

    def __init__(self, loaded: LoadedModel, *, cuda_graphs: bool = True, compile: bool = True,
                 max_audio_seconds: float = 60.0, max_text_chars: int = 2000):
        self.cfg, self.model, self.vae, self.tokenizer = loaded.cfg, loaded.model, loaded.vae, loaded.tokenizer
        self.device = loaded.device
        self.max_audio_seconds = max_audio_seconds
        self.max_text_chars = max_text_chars
        on_gpu = self.device.type == "cuda"
        if cuda_graphs and on_gpu:
            from .cuda_graphs import GraphRunner

            self.runner = GraphRunner(self.model, self.vae, compile_ops=compile)
        else:
            self.runner = EagerRunner(self.model, self.vae, compile_ops=compile and on_gpu)
        self.warmup_seconds: float | None = None
        self._streams_started = 0  # the newest stream owns the caches

    @classmethod
    def from_pretrained(cls, name_or_path: str = "openbmb/VoxCPM2", *, device: str | None = None,
                        dtype: str | None = None, vae_dtype: str = "float32", warmup: bool = True,
                        cuda_graphs: bool = True, compile: bool = True, cache_dir: str | None = None,
                        local_files_only: bool = False, **limits) -> "Engine":
        """name_or_path: a hub id (downloaded into the hub cache) or a local checkpoint folder.
        device defaults to CUDA when present; dtype to bfloat16 on CUDA, float32 on CPU. On CUDA,
        `cuda_graphs` replays captured graphs per patch and `compile` fuses each layer's kernels
        (both switch off for debugging); warm-up does all capture and compilation."""
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

    def warmup(self) -> float:
        """Captures the CUDA graphs (fast path) and runs a short request, so that no request pays
        for capture, kernel loading or allocator growth. Returns and logs the seconds taken."""
        start = time.perf_counter()
        if hasattr(self.runner, "capture") and not self.runner.graphs_ready:
            log.info("capturing CUDA graphs for %d attention buckets", len(self.runner.buckets))
            self.runner.capture()
        clip = (16000, warmup_tone())
        for req in (SynthesisRequest(text="Warm up.", min_len=2, max_len=3, seed=0),
                    SynthesisRequest(text="Warm up.", reference_audio=clip, max_len=2, seed=0),
                    SynthesisRequest(text="Warm up.", prompt_audio=clip, prompt_text="Warm.", max_len=2, seed=0)):
            # Each mode once: the VAE encoder and the continuation's decoder warm-up have their own
            # kernels, which would otherwise load during someone's first request.
            for _ in self.stream(req):
                pass
        self.warmup_seconds = time.perf_counter() - start
        log.info("warm-up took %.1f s", self.warmup_seconds)
        return self.warmup_seconds

    def stream(self, req: SynthesisRequest) -> Iterator[AudioChunk]:
        """Validates the request (raising InputError at once), then returns a generator of chunks.
        Closing the generator stops generation before the next patch."""
        prompt = self.prepare(req)
        cap = self.length_cap(req, prompt)
        noise = self.initial_noise(req, cap)
        self._streams_started += 1
        return self._generate(prompt, noise, req, min(cap, noise.shape[0]), self._streams_started)

    def synthesize(self, req: SynthesisRequest) -> np.ndarray:
        chunks = [c.audio for c in self.stream(req)]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)

    def prepare(self, req: SynthesisRequest) -> Prompt:
        if not isinstance(req, SynthesisRequest):
            raise InputError("expected a SynthesisRequest")
        if len(req.text) > self.max_text_chars:
            raise InputError(f"text is {len(req.text)} characters long; the limit is {self.max_text_chars}")
        shape = (self.cfg.patch_size, self.cfg.feat_dim)
        prompt = build_prompt(req, self.tokenizer.encode, self.encode_audio, shape)
        if len(prompt) >= self.model.base_cache.capacity:
            raise InputError(f"the prompt is {len(prompt)} positions long; the model holds at most "
                             f"{self.model.base_cache.capacity - 1}: use a shorter text or clip")
        return prompt

    def length_cap(self, req: SynthesisRequest, prompt: Prompt) -> int:
        """The official cap, min(6 * target tokens + 10, max_len), bounded by the cache's room."""
        room = self.model.base_cache.capacity - len(prompt)
        return max(1, min(int(prompt.target_tokens * 6 + 10), req.max_len, room))

    @torch.inference_mode()
    def encode_audio(self, source, side: str, label: str = "audio") -> torch.Tensor:
        """An audio clip -> its latent patches [n, P, D] (float32, on the host)."""
        rate = self.cfg.vae.sample_rate
        audio = load_audio(source, target_rate=rate, max_seconds=self.max_audio_seconds, label=label)
        audio = pad_to_multiple(audio, self.cfg.prompt_pad_samples, side)
        wave = torch.from_numpy(audio).to(self.device, next(self.vae.parameters()).dtype).unsqueeze(0)
        frames = self.vae.encode(wave)[0].float()  # [D, F]
        d, p = self.cfg.feat_dim, self.cfg.patch_size
        # Deliberate sync, once per clip: the prompt is assembled on the host.
        return frames.view(d, -1, p).permute(1, 2, 0).cpu()

    def initial_noise(self, req: SynthesisRequest, cap: int) -> torch.Tensor:
        """[n, P, D] starting noise of each patch: the request's own, or drawn from its seed on the
        host so a seed gives the same audio on every device."""
        d, p = self.cfg.feat_dim, self.cfg.patch_size
        if req.noise is not None:
            noise = torch.from_numpy(noise_array(req.noise))
            if noise.ndim != 3 or tuple(noise.shape[1:]) != (d, p) or noise.shape[0] < 1:
                raise InputError(f"noise must have shape [steps, {d}, {p}], got {list(noise.shape)}")
            if not torch.isfinite(noise).all():
                raise InputError("noise holds NaN or infinite values")
            needed = min(req.min_len, cap)  # its rows cap the length, as max_len does
            if noise.shape[0] < needed:
                raise InputError(f"noise has {noise.shape[0]} rows (one per patch) but min_len asks for "
                                 f"{needed} patches: give at least {needed} rows or lower min_len")
            return noise.transpose(1, 2).contiguous()
        seed = req.seed if req.seed is not None else secrets.randbits(63)
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(cap, d, p, generator=gen).transpose(1, 2).contiguous()

    def _generate(self, prompt, noise, req, cap, number: int) -> Iterator[AudioChunk]:
        steps = self.runner.run(prompt, noise, float(req.cfg_value), req.inference_timesteps, req.min_len, cap)
        try:
            for index, (audio, latents, _stop) in enumerate(steps):
                yield AudioChunk(audio=audio, latents=latents, index=index)
                if number != self._streams_started:  # checked before the caches are touched again
                    raise RuntimeError("a newer stream was started on this engine before this one ended: "
                                       "an engine generates one stream at a time (finish or close one first)")
        finally:
            steps.close()

    def decode_whole(self, latents: np.ndarray, context: torch.Tensor | None = None) -> np.ndarray:
        """Offline reference decode of [n, D, P] latents (after optional context patches [C, P, D])."""
        patches = torch.as_tensor(latents).transpose(1, 2)
        if context is not None and len(context):
            patches = torch.cat((context.to(self.runner.dtype).float(), patches))
        vae_dtype = next(self.vae.parameters()).dtype
        with torch.inference_mode():
            audio = self.vae.decode(patches_to_frames(patches.unsqueeze(0)).to(self.device, vae_dtype))[0]
        skip = 0 if context is None else len(context) * self.cfg.patch_samples
        return audio[skip:].float().cpu().numpy()


def noise_array(noise) -> np.ndarray:
    """A request's noise as float32 on the host, from a tensor of any dtype or device or an array."""
    try:
        if isinstance(noise, torch.Tensor):
            return noise.detach().to("cpu", torch.float32).numpy()
        return np.asarray(noise, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"noise must be a tensor or array of numbers [steps, feat_dim, patch_size] ({exc})") from exc
