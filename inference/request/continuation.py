"""One request's text as a chain of segments on one engine row, and the runaway guard.

Segment 1 is generated in the request's mode. Each next segment re-prefills the same row with a
continuation prompt: the request's voice (reference prefix, ultimate-cloning prompt) followed by
the tail, which is the text and latent patches of the last segment that ended properly (the
official `merge_prompt_cache` idea). The prompt is bounded by the segment bound however long the
text, so memory and per-patch time stay flat. The row's VAE decoder state is not reset: the
audio continues across the boundary as it does across any patch.

Runaway guard: a segment that reaches the official bad-case length (6 patches per text token)
is a runaway. After the first segment, a segment's audio is held until the segment has ended
properly; a runaway is then regenerated from the same prompt with the next seed, the decoder
rewound to the segment's start, up to 3 attempts in all (the official retry count), the last one
streamed and cut at the official cap (6 x tokens + 10). The first segment streams at once and is
only cut.

A hold never makes a gap the listener would hear: when the scheduler sees the listener's buffer
about to run dry (inference/runtime/scheduler.py) it calls `release_held()`, and the attempt
streams from then on like the first segment: released audio cannot be taken back, so that
attempt is not retried, only cut at the cap (Report.released_early names such segments).

Pauses (inference/text/pauses.py): the silence a text asks for before a segment goes out as
zero chunks once the segment before it has ended (before the first patch for a leading pause,
after the last for a trailing one), between the two segments' audio; the decoder is not touched,
so the next segment continues the voice as across any boundary, and an offline decode of the
same latents with the same zeros inserted gives the same audio.
"""
from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, field

import numpy as np
import torch

from .prompt import Prompt, Voice, control_prefix, voice_prompt
from .request import AudioChunk, Half, SynthesisRequest, initial_noise, seed_noise, silence
from ..text.spoken import SpokenText

BAD_CASE_RATIO = 6  # patches per target token at which the official retry calls a case bad
MAX_ATTEMPTS = 3  # the official retry_badcase_max_times


# A tail from this many segments back is tokenized ahead; an older one (after two cut segments in
# a row) is left out, and the segment follows the voice alone.
TAIL_REACH = 2


class Tokens:
    """Every text a stream's prompts may read, tokenized when the request is prepared (off the
    engine's thread): each segment alone and after the voice's transcript (and, for the first,
    the control prefix), and after each tail it may carry. `__call__` is voice_prompt's tokenize."""

    def __init__(self, tokenize, segments: list[str], control: str, transcript: str):
        texts = {control + segments[0], transcript + control + segments[0]} | self.texts(segments, 1, transcript)
        self.ids = {text: list(tokenize(text)) for text in texts}

    def __call__(self, text: str) -> list[int]:
        return self.ids[text]

    @classmethod
    def of(cls, ids: dict[str, list[int]]) -> "Tokens":
        """Tokens already made (RequestPreparer.prepare_more)."""
        tokens = cls.__new__(cls)
        tokens.ids = dict(ids)
        return tokens

    def update(self, ids: dict[str, list[int]]):
        """The texts a live request's later clause may read (RequestPreparer.prepare_more)."""
        self.ids.update(ids)

    @staticmethod
    def texts(segments: list[str], first: int, transcript: str) -> set[str]:
        """The texts segments[first:] may read after the first segment: each alone, after the
        voice's transcript, and after a tail from up to TAIL_REACH segments back."""
        texts = set()
        for k in range(max(1, first), len(segments)):
            texts.update((segments[k], transcript + segments[k]))
            texts.update(transcript + segments[j] + segments[k] for j in range(max(0, k - TAIL_REACH), k))
        return texts

    def __contains__(self, text: str) -> bool:
        return text in self.ids


class DecoderStart(enum.Enum):
    """How a row's VAE decoder starts an attempt at a segment (DecodeStep.load_rows)."""

    FRESH = "fresh"  # a new stream: reset, warmed on the prompt's last patches in ultimate cloning
    CARRY = "carry"  # the next segment: the state after the last one's final patch, kept as its start
    REWIND = "rewind"  # another attempt at a segment: the state kept at its start


# What add() returns when a live request's stream has spoken all the text it has: the scheduler
# parks it (row and voice kept) until resume() has more, or ends it when the feed closes.
PARK = "park"


@dataclass(frozen=True)
class SegmentStart:
    """What the engine loads into the row for the next attempt at a segment."""

    prompt: Prompt
    noise: torch.Tensor  # [n, P, D]
    cap: int
    decoder: DecoderStart
    quiet: bool = False  # silence went out just before it (a pause): the step's half-rate patches start from silence


@dataclass
class Report:
    """What a listener may want to know about the text's progress; a fresh object per change."""

    segments: list[str] = field(default_factory=list)  # the spoken (normalized) text of each ready segment
    segment_count: int = 0
    seeds: list[int] = field(default_factory=list)  # the seed whose attempt each finished segment kept
    retries: list[dict] = field(default_factory=list)  # {"segment", "patches", "seed"} of each rejected attempt
    cut: list[int] = field(default_factory=list)  # segments that ended at the cap (no stop)
    released_early: list[int] = field(default_factory=list)  # later segments streamed before their end
    pauses: list[dict] = field(default_factory=list)  # {"before", "ms", "tag"} of each pause (SpokenText.pauses)

    def spoken_text(self) -> str:
        """The ready segments as spoken, each pause's tags where it falls, so a listener sees them."""
        tags = {p["before"]: p["tag"] for p in self.pauses}
        parts = [(f" {tags[k]}" if k else f"{tags[k]} ") if k in tags else "" for k in range(len(self.segments) + 1)]
        return "".join(p + s for p, s in zip(parts, self.segments + [""]))


class Continuation:
    """Drives one stream's segments. `add` is called with each collected patch; it returns the
    chunks it releases (made here, complete: the listener's index and the segment are known only
    here) and says when the row must be re-prefilled or retired."""

    def __init__(self, req: SynthesisRequest, voice: Voice, spoken: SpokenText, tokenize: Tokens, patch_shape,
                 length_cap, capacity: int, output: tuple[int, int]):
        """tokenize: the texts its prompts read, tokenized ahead; length_cap(req, prompt) ->
        patches; capacity: the KV cache's positions; output: the audio's sample rate and samples
        per patch (a pause's silence is cut in patches)."""
        self.req, self.voice, self.spoken, self.tokenize = req, voice, spoken, tokenize
        self.output = output
        self.patch_shape, self.length_cap, self.capacity = patch_shape, length_cap, capacity
        self.seed = req.seed if req.seed is not None else secrets.randbits(63)
        self.next_seed = self.seed  # each attempt takes the next one
        self.seed_in_use: int | None = None  # None while the request's own noise is used
        self.segment, self.attempt = 0, 0
        self.tail: tuple[str, torch.Tensor] | None = None
        self.latents: list[np.ndarray] = []  # this attempt's patches [D, P]
        self.held: list[tuple[np.ndarray, np.ndarray, bytes | None, Half | None]] = []  # not yet released
        self.out: list[AudioChunk] = []  # released by the call under way, returned by it
        self.streaming = True  # the attempt's audio goes out as it comes: the first segment's does
        self.released = 0  # chunks handed to the listener: the next chunk's index
        self.released_samples = 0  # their audio, silence included
        self.opened = False  # whether the first patch (and a leading pause before it) went out
        self.after_pause = False  # the last chunk that went out was a pause's silence
        self.report = Report(segment_count=len(spoken), pauses=spoken.pauses)
        self.feed = req.feed  # a live request's later clauses (inference/request/feed.py); None: the text is whole
        self.start = self._first()

    # -- segment starts -----------------------------------------------------------------------
    def _first(self) -> SegmentStart:
        prompt = self._prompt(control_prefix(self.req.control) + self.spoken.segment(0))
        cap = self.length_cap(self.req, prompt)
        if self.req.noise is not None:
            noise = initial_noise(self.req, cap, self.patch_shape[1], self.patch_shape[0])
            cap = min(cap, noise.shape[0])
        else:
            noise = self._noise(cap)
        return SegmentStart(prompt, noise, cap, DecoderStart.FRESH)

    def _prompt(self, text: str) -> Prompt:
        tail = self.tail if self.tail and self.voice.prompt_text + self.tail[0] + text in self.tokenize else None
        prompt = voice_prompt(self.voice, text, self.tokenize, self.patch_shape, tail)
        if tail is not None and len(prompt) + self.length_cap(self.req, prompt) > self.capacity:
            # The cache cannot hold the tail, this segment and its longest speech (only a model
            # with a small cache, or a very long reference clip): the voice alone continues.
            prompt = voice_prompt(self.voice, text, self.tokenize, self.patch_shape)
        return prompt

    def _noise(self, cap: int) -> torch.Tensor:
        self.seed_in_use, self.next_seed = self.next_seed, (self.next_seed + 1) % 2**63
        return seed_noise(self.seed_in_use, cap, self.patch_shape[1], self.patch_shape[0])

    def _again(self, decoder: DecoderStart) -> SegmentStart:
        """The current segment from its start: its next attempt, or its first after another."""
        # The last attempt cannot be retried: nothing is gained by holding it.
        self.latents, self.held, self.streaming = [], [], self.attempt + 1 >= MAX_ATTEMPTS
        rewind = decoder is DecoderStart.REWIND
        prompt = self.start.prompt if rewind else self._prompt(self.spoken.segment(self.segment))
        cap = self.length_cap(self.req, prompt)
        # A retry is held, so nothing went out since the first attempt: after_pause is still its.
        self.start = SegmentStart(prompt, self._noise(cap), cap, decoder, self.after_pause)
        return self.start

    # -- patches in --------------------------------------------------------------------------
    def add(self, audio: np.ndarray, latents: np.ndarray, ended: bool, pcm: bytes | None = None,
            half: Half | None = None) -> tuple[list[AudioChunk], SegmentStart | None | bool]:
        """One collected patch of the current attempt: its float32 audio and its latents [D, P]
        (`pcm`: the audio as int16 bytes, `half`: the patch at half the rate, when the step made
        them). `ended`: the stop head fired or the cap was reached. Returns the chunks released
        now, and None while the segment goes on, a SegmentStart when the row must be re-prefilled
        (a retry or the next segment), PARK when a live request waits for more text, or True when
        the stream is over."""
        if not self.opened:
            self.opened = True
            self._pause(0)
        self.latents.append(latents)
        self.held.append((audio, latents, pcm, half))
        if self.streaming:
            self._release()
        runaway = len(self.latents) >= BAD_CASE_RATIO * self.start.prompt.target_tokens
        if runaway and not self.streaming:  # held, so not the last attempt: it can be retried
            after = self._retry()
        elif not ended:
            after = None
        else:
            after = self._segment_done(runaway)
        return self._released(), after

    def _released(self) -> list[AudioChunk]:
        out, self.out = self.out, []
        return out

    def _retry(self) -> SegmentStart:
        self.report.retries = self.report.retries + [
            {"segment": self.segment, "patches": len(self.latents), "seed": self.seed_in_use}]
        self.attempt += 1
        return self._again(DecoderStart.REWIND)

    def _segment_done(self, runaway: bool) -> SegmentStart | bool:
        self._release()
        self._pause(self.segment + 1)
        self.report.seeds = self.report.seeds + [self.seed_in_use]
        if runaway:
            self.report.cut = self.report.cut + [self.segment]
        else:  # a runaway's tail would lead the next segment astray: the last good one stays
            self.tail = (self.spoken.segment(self.segment), torch.from_numpy(np.stack(self.latents)).transpose(1, 2))
        self.segment, self.attempt = self.segment + 1, 0
        if self.segment < len(self.spoken):
            return self._again(DecoderStart.CARRY)
        return self.resume() or PARK

    def resume(self) -> SegmentStart | bool | None:
        """A live request's stream has spoken all its text: the next segment's start when more has
        arrived, True when the feed is closed and nothing follows, None while it waits (the
        scheduler parks it, its decoder state kept at the segment's end as for any next segment).
        Chunks made meanwhile (a pause the new clause opens with) are returned by `resumed()`."""
        if self.feed is None:
            return True
        arrived, closed = self.feed.take()
        if not arrived:
            return True if closed else None
        lead = arrived[0].spoken.pause_ms(0)
        for more in arrived:
            self.tokenize.update(more.ids)
            self.spoken.extend(more.spoken)
        # The silence the first new clause opens with goes out now, after what went out (a pause the
        # text ended with went out already: only the clause's own is left). Those of the clauses after
        # it sit before their first segments, and go out as any pause does, when the segment before ends.
        if lead:
            rate, piece = self.output
            for audio in silence(lead, rate, piece):
                self._emit(audio, None, max(0, self.segment - 1), pause=True)
        self.report.segment_count = len(self.spoken)
        self.report.pauses = self.spoken.pauses
        return self._again(DecoderStart.CARRY)

    def resumed(self) -> list[AudioChunk]:
        """The chunks resume() released (a pause's silence)."""
        return self._released()

    @property
    def holding(self) -> bool:
        """Whether the current attempt's audio is held until the segment ends."""
        return not self.streaming

    def release_held(self) -> list[AudioChunk]:
        """The listener's buffer is about to run dry: what the attempt holds goes out now (the
        chunks returned), and its later patches as they come. It can no longer be retried: a
        runaway is cut at the cap."""
        if self.streaming:
            return []
        self.streaming = True
        self.report.released_early = self.report.released_early + [self.segment]
        self._release()
        return self._released()

    def _release(self):
        for audio, latents, pcm, half in self.held:
            self._emit(audio, latents, self.segment, pcm=pcm, half=half)
        self.held = []

    def _emit(self, audio: np.ndarray, latents: np.ndarray | None, segment: int, pause: bool = False,
              pcm: bytes | None = None, half: Half | None = None):
        self.out.append(AudioChunk(audio, latents, self.released, segment, pause, pcm, half))
        self.after_pause = pause
        self.released += 1
        self.released_samples += len(audio)

    def _pause(self, k: int):
        """The silence before segment k, if the text asks for one, after what went out so far."""
        rate, piece = self.output
        for audio in silence(self.spoken.pause_ms(k), rate, piece):
            self._emit(audio, None, max(0, k - 1), pause=True)

    def snapshot(self) -> Report:
        # Called for every patch a stream delivers: only the segments not yet reported are looked
        # at, and the list is replaced (not grown in place) since the status route reads it.
        new = self.spoken.ready(len(self.report.segments))
        if new:
            self.report.segments = self.report.segments + new
        return self.report

    def close(self):
        """The stream ended (nothing of it runs elsewhere)."""
