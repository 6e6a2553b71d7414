"""A request made ready for a row: its text checked and split into segments, its voice encoded
once (a ReferenceClip's patches remembered per side), its first segment's prompt and noise."""
from __future__ import annotations

import torch

from ..errors import InputError
from ..model.loader import LoadedModel
from ..request.audio_input import load_audio, pad_to_multiple
from ..request.continuation import Continuation
from ..request.prompt import Prompt, encode_voice
from ..request.reference import ReferenceClip, encoder_identity
from ..request.request import SynthesisRequest
from ..request.vad import trim_silence
from ..text.segments import SEGMENT_WEIGHT
from ..text.spoken import SpokenText


class RequestPreparer:
    def __init__(self, loaded: LoadedModel, max_audio_seconds: float, max_text_chars: int):
        self.cfg, self.model, self.vae, self.tokenizer = loaded.cfg, loaded.model, loaded.vae, loaded.tokenizer
        self.device = loaded.device
        self.max_audio_seconds, self.max_text_chars = max_audio_seconds, max_text_chars
        self.segment_weight = SEGMENT_WEIGHT  # the bound on one segment of a long text (inference/text/segments.py)
        # What encoded patches depend on: a ReferenceClip's memo from another checkpoint is not used.
        self.encoder_identity = encoder_identity(self.vae, self.cfg.vae.sample_rate, self.cfg.prompt_pad_samples)

    @property
    def capacity(self) -> int:
        """Positions the KV cache holds per row."""
        return self.model.base_cache.capacity

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
        plan = Continuation(req, voice, spoken, self.tokenizer.encode, shape, self.length_cap, self.capacity, out)
        if len(plan.start.prompt) >= self.capacity:
            plan.close()
            raise InputError(f"the prompt is {len(plan.start.prompt)} positions long; the model holds at most "
                             f"{self.capacity - 1}: use a shorter text or clip")
        return plan

    def length_cap(self, req: SynthesisRequest, prompt: Prompt) -> int:
        """The official cap, min(6 * target tokens + 10, max_len), bounded by the cache's room."""
        room = self.capacity - len(prompt)
        return max(1, min(int(prompt.target_tokens * 6 + 10), req.max_len, room))

    @torch.inference_mode()
    def encode_audio(self, source, side: str, label: str = "audio", trim: bool = False) -> torch.Tensor:
        """An audio clip -> its latent patches [n, P, D] (float32, on the host); `trim` cuts the
        silence at its ends first (inference/request/vad.py). A ReferenceClip is encoded once per side and
        trim: later requests with it reuse the patches (inference/request/reference.py)."""
        if not isinstance(source, ReferenceClip):
            return self.encode(source, side, label, trim)
        key = (self.encoder_identity, f"{side}-trimmed" if trim else side)
        patches = source.latents(key)
        if patches is None:
            patches = self.encode(source.samples(), side, label, trim)
            source.remember(key, patches)
        return patches

    def encode(self, source, side: str, label: str, trim: bool) -> torch.Tensor:
        """One clip through the VAE encoder, no memo."""
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
