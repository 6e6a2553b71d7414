"""A request made ready for a row, in two halves.

`prepare` is the host half, on the caller's thread (an HTTP handler's, a page handler's), before the
request reaches the engine's thread: the checks, the text normalized and cut into segments, every
text its prompts may read tokenized (continuation.Tokens), each clip decoded, resampled, trimmed and
padded (or a ReferenceClip's remembered patches looked up), and every segment's prompt checked
against the KV cache. It is thread-safe: it reads the tokenizer and the limits only.

`plan` is the device half, on the engine's thread: the clips through the VAE encoder, and the
Continuation that drives the segments from the prepared texts. Nothing in it waits on the host.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..errors import InputError
from ..model.loader import LoadedModel
from ..request.audio_input import load_audio, pad_to_multiple
from ..request.continuation import Continuation, Tokens
from ..request.feed import MoreText
from ..request.prompt import Prompt, Voice, control_prefix
from ..request.reference import Key, ReferenceClip, encoder_identity
from ..request.request import SynthesisRequest
from ..request.vad import trim_silence
from ..text.normalize import normalize_all
from ..text.segments import SEGMENT_WEIGHT
from ..text.spoken import SpokenText


@dataclass(frozen=True)
class HostClip:
    """A clip made ready on the host: its patches when a ReferenceClip remembers them, else its
    padded samples for the VAE encoder (and the clip and key to remember what it makes under)."""

    patches: torch.Tensor | None  # [n, P, D]
    audio: np.ndarray | None  # float32, a whole number of patches long
    length: int  # n: the positions it takes in a prompt
    clip: ReferenceClip | None = None
    key: Key | None = None


@dataclass(frozen=True)
class Prepared:
    """A request checked and made ready off the engine's thread (RequestPreparer.prepare)."""

    request: SynthesisRequest
    spoken: SpokenText
    tokens: Tokens
    transcript: str  # the prompt clip's, in ultimate cloning; "" otherwise
    reference: HostClip | None
    prompt: HostClip | None


class RequestPreparer:
    def __init__(self, loaded: LoadedModel, max_audio_seconds: float, max_text_chars: int,
                 max_output_seconds: float = float("inf")):
        self.cfg, self.model, self.vae, self.tokenizer = loaded.cfg, loaded.model, loaded.vae, loaded.tokenizer
        self.device = loaded.device
        self.max_audio_seconds, self.max_text_chars = max_audio_seconds, max_text_chars
        self.max_output_seconds = max_output_seconds  # the serving layer cuts the speech at it; pauses are known now
        self.segment_weight = SEGMENT_WEIGHT  # the bound on one segment of a long text (inference/text/segments.py)
        # What encoded patches depend on: a ReferenceClip's memo from another checkpoint is not used.
        self.encoder_identity = encoder_identity(self.vae, self.cfg.vae.sample_rate, self.cfg.prompt_pad_samples)
        # One encoder call takes at most as much audio as the longest clip a request may send alone,
        # so batching never needs more memory than one such clip did.
        self.batch_samples = int(max_audio_seconds * self.cfg.vae.sample_rate) + self.cfg.prompt_pad_samples
        self.ahead: dict[int, tuple[HostClip, torch.Tensor]] = {}  # encode_ahead's, by id of a clip without a memo

    @property
    def capacity(self) -> int:
        """Positions the KV cache holds per row."""
        return self.model.base_cache.capacity

    # -- the host half ----------------------------------------------------------------------------
    def prepare(self, req: SynthesisRequest, normalizer: Callable[[list[str], str], list[str]] = normalize_all) -> Prepared:
        """Everything but GPU work, raising InputError at once; thread-safe. normalizer: what
        normalizes the text, when the request asks (a served one: normalize.Normalizer's processes)."""
        if not isinstance(req, SynthesisRequest):
            raise InputError("expected a SynthesisRequest")
        if len(req.text) > self.max_text_chars:
            raise InputError(f"text is {len(req.text)} characters long; the limit is {self.max_text_chars}", "text")
        for name, label in (("control", "voice description or style instruction"), ("prompt_text", "transcript")):
            value = getattr(req, name)
            if value is not None and len(value) > self.max_text_chars:
                raise InputError(f"the {label} has {len(value)} characters; the limit is {self.max_text_chars}", name)
        trim = req.trim_silence
        reference = None if req.reference_audio is None else self.load_clip(req.reference_audio, "right",
                                                                             "reference audio", trim)
        prompt = None if req.prompt_audio is None else self.load_clip(req.prompt_audio, "left", "prompt audio", trim)
        transcript = req.prompt_text if prompt is not None else ""
        spoken = SpokenText(req.text, req.normalize, self.segment_weight, normalizer=normalizer)
        self.check_silence(spoken)
        tokens = Tokens(self.tokenizer.encode, spoken.segments, control_prefix(req.control), transcript)
        prepared = Prepared(req, spoken, tokens, transcript, reference, prompt)
        self.check_room(prepared)
        if req.feed is not None:  # a live request: its later clauses are made ready as this text was
            req.feed.open(functools.partial(self.prepare_more, prepared, normalizer), spoken)
        return prepared

    def prepare_more(self, prepared: Prepared, normalizer: Callable[[list[str], str], list[str]],
                     before: list[str], text: str) -> MoreText:
        """A live request's next clause made ready off the engine's thread, as prepare() makes a
        text: cut into segments, every text its prompts may read tokenized (after the segments
        `before` it, as spoken, for the tails), each segment's prompt checked against the cache;
        normalized by what prepare() was given. Raises InputError at once; thread-safe."""
        req = prepared.request
        if len(text) > self.max_text_chars:
            raise InputError(f"the text is {len(text)} characters long; the limit is {self.max_text_chars}", "text")
        spoken = SpokenText(text, req.normalize, self.segment_weight, follows=True, normalizer=normalizer)
        segments = list(before) + spoken.segments
        texts = Tokens.texts(segments, len(before), prepared.transcript)
        ids = {t: list(self.tokenizer.encode(t)) for t in texts}
        self.check_room(Prepared(req, spoken, Tokens.of(ids), prepared.transcript, prepared.reference,
                                 prepared.prompt), first=False)
        return MoreText(spoken, ids)

    def check_silence(self, spoken: SpokenText):
        """Refuses a text whose pauses alone (as long as written, whoever listens) last longer than a
        request's audio may."""
        silence = sum(p["ms"] for p in spoken.pauses) / 1000.0
        if silence > self.max_output_seconds:
            raise InputError(f"the text's pause tags add up to {silence:.1f} s of silence; a request may produce "
                             f"at most {self.max_output_seconds:g} s of audio, speech and pauses together: use "
                             f"fewer or shorter pauses, or split the text", "text")

    def check_room(self, p: Prepared, first: bool = True):
        """Every segment's shortest prompt (the voice, without the tail a continuation drops when
        it does not fit) leaves the cache room for speech; checked before any audio is made.
        first: the text's first segment is the request's first (a live request's later clause's is not)."""
        voice = (p.reference.length + 2 if p.reference else 0) + (p.prompt.length if p.prompt else 0) + 1
        segments = p.spoken.segments
        for k, segment in enumerate(segments):
            text = p.transcript + (control_prefix(p.request.control) if k == 0 and first else "") + segment
            length = voice + len(p.tokens(text))
            if length < self.capacity:
                continue
            if len(segments) == 1:
                raise InputError(f"the prompt is {length} positions long; the model holds at most "
                                 f"{self.capacity - 1}: use a shorter text or clip")  # no one field: text or clip
            spelled = " as normalized" if p.request.normalize else ""
            raise InputError(f"segment {k + 1} of {len(segments)} of the text ({len(segment)} characters{spelled}: "
                             f"{segment.strip()[:40]!r}...) makes a prompt of {length} positions; the model holds "
                             f"at most {self.capacity - 1}: shorten that part or break it with punctuation"
                             + (", or turn normalization off" if p.request.normalize else ""), "text")

    def load_clip(self, source, side: str, label: str, trim: bool) -> HostClip:
        """A clip's remembered patches, or its samples ready for the encoder (no GPU work)."""
        if not isinstance(source, ReferenceClip):
            audio = self.load(source, side, label, trim)
            return HostClip(None, audio, audio.shape[0] // self.cfg.prompt_pad_samples)
        key = (self.encoder_identity, f"{side}-trimmed" if trim else side)
        patches = source.latents(key)
        if patches is not None:
            return HostClip(patches, None, patches.shape[0])
        audio = self.load(source.samples(), side, label, trim)
        return HostClip(None, audio, audio.shape[0] // self.cfg.prompt_pad_samples, source, key)

    def load(self, source, side: str, label: str, trim: bool) -> np.ndarray:
        """One clip decoded, resampled, optionally trimmed, and padded to whole patches."""
        rate = self.cfg.vae.sample_rate
        audio = load_audio(source, target_rate=rate, max_seconds=self.max_audio_seconds, label=label)
        if trim:
            audio = trim_silence(audio, rate, label)
        return pad_to_multiple(audio, self.cfg.prompt_pad_samples, side)

    # -- the device half --------------------------------------------------------------------------
    def plan(self, prepared: Prepared | SynthesisRequest) -> Continuation:
        """The prepared request's voice encoded and its Continuation (first segment's prompt and
        noise). A SynthesisRequest is prepared first."""
        p = prepared if isinstance(prepared, Prepared) else self.prepare(prepared)
        voice = Voice(self.encode_clip(p.reference), p.transcript, self.encode_clip(p.prompt))
        shape = (self.cfg.patch_size, self.cfg.feat_dim)
        output = (self.cfg.vae.out_sample_rate, self.cfg.patch_samples)
        return Continuation(p.request, voice, p.spoken, p.tokens, shape, self.length_cap, self.capacity, output)

    def length_cap(self, req: SynthesisRequest, prompt: Prompt) -> int:
        """The official cap, min(6 * target tokens + 10, max_len), bounded by the cache's room."""
        room = self.capacity - len(prompt)
        return max(1, min(int(prompt.target_tokens * 6 + 10), req.max_len, room))

    def encode_clip(self, host: HostClip | None) -> torch.Tensor | None:
        """A prepared clip's patches [n, P, D]: remembered, or through the VAE encoder (then
        remembered by its ReferenceClip, unless another request's encoding got there first)."""
        if host is None or host.patches is not None:
            return None if host is None else host.patches
        known = host.clip.latents(host.key) if host.clip is not None else None
        if known is not None:
            return known
        early = self.ahead.get(id(host))
        if early is not None and early[0] is host:  # the id of a clip since gone may have been reused
            return early[1]
        patches = self.encode(host.audio)
        if host.clip is not None:
            host.clip.remember(host.key, patches)
        return patches

    def encode_audio(self, source, side: str, label: str = "audio", trim: bool = False) -> torch.Tensor:
        """An audio clip (or a ReferenceClip, encoded once per side and trim) -> its latent
        patches [n, P, D] (float32, on the host): both halves at once."""
        return self.encode_clip(self.load_clip(source, side, label, trim))

    def encode_ahead(self, prepared: list[Prepared | None]) -> None:
        """The clips of requests that join in one step, through the VAE encoder in as few calls as
        fit `batch_samples` (zero-padded on the right: the encoder is causal, so a clip's patches do
        not see the padding); each plan() of this round then finds its clips encoded. Never raises:
        a batch that fails is left for each request's own plan(), where a bad clip fails alone."""
        self.ahead = {}
        waiting = unencoded([h for p in prepared if p is not None for h in (p.reference, p.prompt)])
        for group in batches(waiting, self.batch_samples):
            if len(group) < 2:
                continue  # nothing to share: plan() encodes it as before
            try:
                encoded = self.encode_many([host.audio for host in group])
            except Exception:
                continue
            for host, patches in zip(group, encoded):
                if host.clip is not None:
                    host.clip.remember(host.key, patches)
                else:
                    self.ahead[id(host)] = (host, patches)

    @torch.inference_mode()
    def encode_many(self, audios: list[np.ndarray]) -> list[torch.Tensor]:
        """Clips of whole patches through the encoder at once: each one's patches [n, P, D] (host)."""
        longest = max(a.shape[0] for a in audios)
        batch = np.zeros((len(audios), longest), np.float32)
        for row, audio in enumerate(audios):
            batch[row, :audio.shape[0]] = audio
        wave = torch.from_numpy(batch).to(self.device, next(self.vae.parameters()).dtype)
        # Deliberate sync, once per batch: prompts are assembled on the host.
        frames = self.vae.encode(wave).float().cpu()  # [B, D, F]
        hop = longest // frames.shape[-1]
        d, p = self.cfg.feat_dim, self.cfg.patch_size
        return [frames[row, :, :a.shape[0] // hop].reshape(d, -1, p).permute(1, 2, 0).contiguous()
                for row, a in enumerate(audios)]

    @torch.inference_mode()
    def encode(self, audio: np.ndarray) -> torch.Tensor:
        """Padded samples through the VAE encoder, no memo."""
        wave = torch.from_numpy(audio).to(self.device, next(self.vae.parameters()).dtype).unsqueeze(0)
        frames = self.vae.encode(wave)[0].float()  # [D, F]
        d, p = self.cfg.feat_dim, self.cfg.patch_size
        # Deliberate sync, once per clip: the prompt is assembled on the host.
        return frames.view(d, -1, p).permute(1, 2, 0).cpu()


def unencoded(hosts: list[HostClip | None]) -> list[HostClip]:
    """The clips that still need the encoder, a ReferenceClip's once per padding side and trim."""
    out, seen = [], set()
    for host in hosts:
        if host is None or host.patches is not None or host.audio is None:
            continue
        if host.clip is not None:
            if host.clip.latents(host.key) is not None or (id(host.clip), host.key) in seen:
                continue
            seen.add((id(host.clip), host.key))
        out.append(host)
    return out


def batches(hosts: list[HostClip], budget: int) -> list[list[HostClip]]:
    """Longest first, each group's padded size (count x its longest) within `budget` samples."""
    groups: list[list[HostClip]] = []
    for host in sorted(hosts, key=lambda h: -h.audio.shape[0]):
        if groups and (len(groups[-1]) + 1) * groups[-1][0].audio.shape[0] <= budget:
            groups[-1].append(host)
        else:
            groups.append([host])
    return groups
