"""Word timestamps of a KNOWN text (issue #47): where each word of the text that was asked for (each
character, in Chinese) starts and ends in the audio made from it.

Whisper is forced to the text rather than asked what it hears: one teacher-forced decoder pass over
`<|startoftranscript|><|lang|><|transcribe|><|notimestamps|> text <|endoftext|>` reads the
cross-attention of the heads that the checkpoint's generation config names as following the audio
(`alignment_heads`). Their weights, each clip's tokens by its audio frames (20 ms each), are
standardised over the tokens, median-filtered along time and averaged over the heads; a monotone
path then runs from the first token to the last through the frames that attend most, and each token
starts where the path first reaches it. This is how openai-whisper's `timing.find_alignment` and
stable-ts time words; written here for a text that is known, batched.

Attention alone placed boundaries hundreds of ms off (with whisper-base, p90 394 ms in English on
bench/alignment.py's truth; CTranslate2's align(), faster-whisper's aligner, 383 ms), so the path is
guided by the sound (sound_path.py, issue 57): rewarded for starting a word in a pause between words,
with the attention's lag behind the sound learned from the model's own clips, then each span fitted
to the sound inside it. Same truth: 54 ms (docs/benchmarks.md).

The median filter is transformers' own (`_median_filter` in
`transformers.models.whisper.generation_whisper`, there since before 4.40, the oldest release
requirements.txt allows), as is the DTW a clip with more tokens than frames falls back to. The
sound-guided path (sound_path.row_starts) is a loop over frames with the tokens vectorised: about
2 ms for 32 tokens by 10 s, where transformers' DTW (a Python loop over tokens x frames) took 28.
"""
from __future__ import annotations

import contextlib
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..text.pauses import Pause, split_pauses
from .loading import ModelUnavailable
from .sound_path import GAP_BONUS, SoundLag, gap_weights, row_starts, shifted

FRAME_S = 0.02  # one encoder frame: two 10 ms mel frames
MEDIAN_WIDTH = 7  # the median filter's width along time, in frames (openai-whisper's and transformers' default)
SOUND_FRAME_S = 0.01  # the loudness frames a unit's span is fitted to
SILENCE_DB = 35.0  # quieter than the clip's loud level by this much: silence (TTS silences are far quieter)
MIN_UNIT_S = 0.001  # the shortest a unit may last: its times are rounded to ms, and end must stay > start
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")


@dataclass(frozen=True)
class Unit:
    """A unit of the text as written, and whether a space came before it (it is tokenized so)."""
    text: str
    spaced: bool


def units(text: str, chinese: bool) -> list[str]:
    """The text's units, as the contract of issue #47 names them: whitespace-separated words with
    their punctuation as written; in Chinese one unit per CJK character (CJK punctuation dropped),
    a Latin word or number inside it whole. Pause tags are not words."""
    return [unit.text for unit in spoken_units(text, chinese)]


def spoken_units(text: str, chinese: bool) -> list[Unit]:
    # The project's own parser cuts the tags out (and refuses a malformed one, as synthesis did).
    pieces = [piece for piece in split_pauses(text) if not isinstance(piece, Pause)]
    found: list[Unit] = []
    for word in " ".join(pieces).split():
        found += _characters(word) if chinese else [Unit(word, True)]
    return [Unit(u.text, u.spaced and i > 0) for i, u in enumerate(found)]


def _characters(word: str) -> list[Unit]:
    """A whitespace word of Chinese text: each CJK character alone; runs of anything else together
    (a Latin word, a number) when they hold a letter or digit, else dropped as punctuation."""
    out: list[Unit] = []
    run = ""

    def close_run():
        if any(ch.isalnum() for ch in run):
            out.append(Unit(run, not out))  # only a word's first unit comes after a space
    for ch in word:
        if CJK.match(ch) or _is_wide_punctuation(ch):
            close_run()
            run = ""
            if CJK.match(ch):
                out.append(Unit(ch, not out))
        else:
            run += ch
    close_run()
    return out


def _is_wide_punctuation(ch: str) -> bool:
    """CJK punctuation: full-width punctuation or symbols (，。！？「」、…)."""
    return unicodedata.category(ch)[0] in "PS" and unicodedata.east_asian_width(ch) in "WF"


def token_ranges(tokenizer, spoken: list[Unit]) -> tuple[list[int], list[int]]:
    """The text's tokens, unit by unit (so each unit owns a range of them), and each unit's count."""
    ids, counts = [], []
    for unit in spoken:
        mine = tokenizer.encode((" " if unit.spaced else "") + unit.text, add_special_tokens=False)
        ids += mine
        counts.append(len(mine))
    return ids, counts


def prompt(model, tokenizer, chinese: bool) -> list[int]:
    """<|startoftranscript|><|en or zh|><|transcribe|><|notimestamps|>; an English-only checkpoint
    (is_multilingual false, as openai/whisper-*.en) knows no language or task: its prompt has neither."""
    config = model.generation_config
    sot = config.decoder_start_token_id
    if not getattr(config, "is_multilingual", True):
        return [sot, config.no_timestamps_token_id]
    language = "<|zh|>" if chinese else "<|en|>"
    ids = [tokenizer.convert_tokens_to_ids(token) for token in (language, "<|transcribe|>")]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        raise ModelUnavailable(f"the speech recognition model has no {language} or <|transcribe|> token, "
                               "so it cannot be forced to a text in that language")
    return [sot, *ids, config.no_timestamps_token_id]


def unit_times(matrix: np.ndarray, counts: list[int], seconds: float, gaps: np.ndarray | None = None,
               lag: int = 0) -> list[tuple[float, float]]:
    """Each unit's (start s, end s) from the alignment matrix: one row per text token then one for
    <|endoftext|> (higher: that token attends more to that frame), one column per 20 ms frame.
    A token starts where the path first reaches it; a unit at its first token, and ends where the
    next unit starts (the last one where <|endoftext|> does). `gaps` (sound_path.gap_weights): the
    path is rewarded for starting a unit in a pause; `lag`: how many frames later (earlier when
    negative) the attention is moved to meet the sound (sound_path.SoundLag)."""
    if not counts:
        return []
    edges = np.concatenate([[0], np.cumsum(counts)])  # row of each unit's first token; the last: <|endoftext|>
    rewarded = np.zeros(len(matrix))
    rewarded[edges[1:]] = 1.0
    starts = row_starts(shifted(-matrix.astype(np.float64), lag), rewarded,
                        None if gaps is None else GAP_BONUS * gaps)
    if starts is None:  # more tokens than frames: transformers' DTW, which lets tokens share a frame
        from transformers.models.whisper.generation_whisper import _dynamic_time_warping

        rows, cols = _dynamic_time_warping(-matrix.astype(np.float64))
        starts = cols[np.concatenate([[True], np.diff(rows) > 0])]  # where the path's row changes
    return spaced_out(starts[edges] * FRAME_S, seconds)


def fitted_to_sound(clip: np.ndarray, rate: int, times: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each unit's span shrunk to the sound inside it. The path gives every frame to some token, so
    a unit followed by silence would end where the next begins (hundreds of ms late after a pause),
    and one after a pause may start in it; as stable-ts suppresses silence, a unit here starts at its
    first and ends at its last 10 ms frame louder than SILENCE_DB below the clip's loud level. A unit
    with no such frame (the path put it in a silence) keeps its span."""
    hop = max(1, int(rate * SOUND_FRAME_S))
    frames = len(clip) // hop
    if frames == 0 or not times:
        return times
    rms = np.sqrt(np.mean(np.square(clip[:frames * hop].reshape(frames, hop), dtype=np.float64), axis=1))
    loud = rms > np.percentile(rms, 99) * 10 ** (-SILENCE_DB / 20)
    out = []
    for start, end in times:
        # The frames from the one its start falls in up to its end: a frame its end cuts is the next unit's.
        lo, hi = int(start / SOUND_FRAME_S + 1e-9), min(frames, int(end / SOUND_FRAME_S + 1e-9))
        heard = np.flatnonzero(loud[lo:hi])
        if len(heard) == 0:
            out.append((start, end))
            continue
        first, last = (lo + heard[0]) * SOUND_FRAME_S, (lo + heard[-1] + 1) * SOUND_FRAME_S
        out.append((round(max(start, first), 3), round(max(min(end, last), max(start, first) + MIN_UNIT_S), 3)))
    return out


def spaced_out(bounds: np.ndarray, seconds: float) -> list[tuple[float, float]]:
    """Boundaries b0..bn (unit i from b_i to b_i+1) made monotone, kept within the clip, and each
    unit at least MIN_UNIT_S long (less when the clip is too short to give every unit that much)."""
    n = len(bounds) - 1
    step = min(MIN_UNIT_S, seconds / max(n, 1))
    b = np.clip(np.maximum.accumulate(np.asarray(bounds, dtype=np.float64)), 0.0, seconds)
    for i in range(1, n + 1):  # forwards: each boundary at least a step after the one before...
        b[i] = max(b[i], b[i - 1] + step)
    b[n] = min(b[n], seconds)
    for i in range(n - 1, -1, -1):  # ...and backwards, so that none passes the clip's end
        b[i] = min(b[i], b[i + 1] - step)
    return [(float(b[i]), float(b[i + 1])) for i in range(n)]


def alignment_matrix(weights: torch.Tensor) -> np.ndarray:
    """[heads, tokens, frames] cross-attention of one clip (its own tokens and frames only) -> the
    [tokens, frames] matrix DTW reads: standardised over the tokens (each frame then says which
    token it belongs to most), median-filtered along time, averaged over the heads."""
    from transformers.models.whisper.generation_whisper import _median_filter

    weights = weights.float()
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = (weights - mean) / std.clamp_min(1e-12)  # a frame every token attends alike: 0, not NaN
    matrix = _median_filter(weights, MEDIAN_WIDTH).mean(dim=0)
    return matrix.cpu().numpy()  # deliberate device->host copy: the DTW is numpy


@contextlib.contextmanager
def attention_weights_returned(model):
    """The decoder's attention as weights, for the call inside only. transformers' sdpa returns none
    (5.24: nothing comes back, only a warning); eager does, but leaving the model on eager would
    slow the encoder of every later recognition. So eager for the forced decoder pass alone, then
    sdpa again: what transformers loads Whisper with where torch has it (and what it falls back from
    by itself where a call needs weights, as Recognizer.hear's generate does). Safe here: the
    analysis process runs one batch at a time on one thread. A transformers without
    set_attn_implementation had Whisper's sdpa attention fall back to eager by itself."""
    if not hasattr(model, "set_attn_implementation"):
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        try:
            model.set_attn_implementation("sdpa")
        except (ValueError, ImportError):  # a model or torch without sdpa: it stays on eager, as it loaded
            pass


def has_alignment_heads(pipe) -> bool:
    """Whether Whisper can time words: its generation config names the cross-attention heads that
    follow the audio."""
    config = getattr(getattr(pipe, "model", None), "generation_config", None)
    return bool(getattr(config, "alignment_heads", None))


@torch.inference_mode()
def align(recognizer, clips: list[np.ndarray], texts: list[str],
          chinese: list[bool]) -> list[list[tuple[str, float, float]]]:
    """Each clip's units (of its text) with their (start s, end s) in the clip, in order, every unit
    present. Clips: float32 mono at recognizer.rate, each at most recognition.MAX_SECONDS. One
    encoder pass and one forced decoder pass for the whole batch. Until the shift that brings the
    model's attention onto the sound is settled (sound_path.SoundLag), each call also teaches it, so
    the same clip aligned again early on may move by a frame or two."""
    pipe = recognizer.pipe
    if not has_alignment_heads(pipe):
        raise ModelUnavailable("the speech recognition model cannot time words: its generation config names no "
                               "alignment_heads (the cross-attention heads that follow the audio). Every "
                               "openai/whisper-* checkpoint names them: give one with --asr-model")
    for clip in clips:
        recognizer.check_length(len(clip) / recognizer.rate)
    spoken = [spoken_units(text, zh) for text, zh in zip(texts, chinese)]
    if any(found and len(clip) == 0 for clip, found in zip(clips, spoken)):
        raise InputError("a text cannot be aligned with no audio: the clip is empty", "file")
    todo = [i for i, found in enumerate(spoken) if found]  # an empty text has nothing to time
    out: list[list[tuple[str, float, float]]] = [[] for _ in clips]
    if todo:
        timed = _forced(recognizer, [clips[i] for i in todo], [spoken[i] for i in todo], [chinese[i] for i in todo])
        for i, times in zip(todo, timed):
            out[i] = [(unit.text, round(start, 3), round(end, 3)) for unit, (start, end) in zip(spoken[i], times)]
    return out


def _forced(recognizer, clips, spoken, chinese) -> list[list[tuple[float, float]]]:
    pipe = recognizer.pipe
    model, tokenizer = pipe.model, pipe.tokenizer
    eot = model.generation_config.eos_token_id
    eot = eot[0] if isinstance(eot, list) else eot
    sequences, starts, counts = [], [], []
    for units_, zh in zip(spoken, chinese):
        head = prompt(model, tokenizer, zh)
        ids, mine = token_ranges(tokenizer, units_)
        sequences.append(head + ids + [eot])
        starts.append(len(head) - 1)  # the row of <|notimestamps|>: it predicts the first text token
        counts.append(mine)
    longest = max(map(len, sequences))
    if longest > model.config.max_target_positions:
        raise InputError(f"the text is too long to align in one clip: {longest} tokens, the speech recognition "
                         f"model reads at most {model.config.max_target_positions}", "text")
    # Trailing padding: the decoder is causal, so it changes nothing at the positions before it.
    tokens = torch.tensor([s + [eot] * (longest - len(s)) for s in sequences], device=model.device)
    features = pipe.feature_extractor(clips, sampling_rate=recognizer.rate, return_tensors="pt")
    encoded = model.get_encoder()(features.input_features.to(model.device, model.dtype)).last_hidden_state
    with attention_weights_returned(model):
        decoded = model.get_decoder()(input_ids=tokens, encoder_hidden_states=encoded, output_attentions=True,
                                      use_cache=False)
    heads = model.generation_config.alignment_heads
    # [batch, heads named, tokens, frames]: only the named heads stay on the device.
    weights = torch.stack([decoded.cross_attentions[layer][:, head] for layer, head in heads], dim=1)
    found = []  # (clip, matrix, gap weights) of each clip
    for b, clip in enumerate(clips):
        frames = max(1, min(weights.shape[-1], -(-len(clip) // (2 * pipe.feature_extractor.hop_length))))
        rows = slice(starts[b], starts[b] + sum(counts[b]) + 1)  # the text's tokens, then <|endoftext|>
        matrix = alignment_matrix(weights[b, :, rows, :frames])
        found.append((clip, matrix, gap_weights(clip, recognizer.rate, frames, SILENCE_DB)))
    lag = learned_lag(recognizer, found, counts)
    return [fitted_to_sound(clip, recognizer.rate, unit_times(matrix, mine, len(clip) / recognizer.rate, gaps, lag))
            for (clip, matrix, gaps), mine in zip(found, counts)]


def learned_lag(recognizer, found, counts) -> int:
    """The shift that brings the model's attention onto the sound (sound_path.SoundLag), in frames,
    once it has heard what these clips say."""
    lag = getattr(recognizer, "sound_lag", None)
    if lag is None:  # a recognizer of another making: it learns from this call alone
        lag = SoundLag()
    if not lag.settled:  # settled: the path without the sound's reward is not needed
        for (clip, matrix, gaps), mine in zip(found, counts):
            plain = row_starts(-matrix.astype(np.float64), np.zeros(len(matrix)), None)
            if plain is not None:
                lag.add(plain[np.cumsum(mine)[:-1]], gaps)
    return lag.lag
