"""The offline decode: a stream's latents through the VAE from silence, as the official model
renders a whole utterance (the reference the streamed audio is compared with, and the offline
render of a finished stream).

A long utterance is decoded a piece at a time (`OfflineDecode`): the decoder's activations grow
with the frames decoded at once (several MB per second of audio, GBs for the longest job on the
published model), while a piece of a few patches, continued from the previous one's causal
state, gives the same samples as decoding all of them in one call (audio_vae.py: chunks through
one DecoderState equal the decode of their concatenation). The state is kept on the CPU between
pieces, so that each piece is a short call of its own on whichever engine runs it.

A stream's pauses (inference/text/pauses.py) are zeros its decoder never saw: the render inserts
the same zeros between the same patches, so it stays sample for sample the stream's reference.
"""
from __future__ import annotations

import numpy as np
import torch

from ..model.audio_vae import AudioVAE
from .decode_step import patches_to_frames


class OfflineDecode:
    """[n, D, P] latents, after optional context patches [C, P, D] (rounded to the LM's dtype as
    the streamed decoder's warm-up saw them), decoded at most `piece_patches` patches per call of
    `decode_next`; the context's samples are cut. `pauses`: (i, samples) for each run of silence
    the stream had before latent patch i (i = n: after the last). Calls run one at a time, in order."""

    def __init__(self, latents: np.ndarray, context: np.ndarray | torch.Tensor | None, piece_patches: int,
                 pauses: tuple[tuple[int, int], ...] = ()):
        if piece_patches < 1:
            raise ValueError("a piece needs at least one patch")
        self.latents = latents
        self.pauses = tuple(pauses)
        self.context = None if context is None or len(context) == 0 else torch.as_tensor(context)
        self.piece_patches = piece_patches
        self.skip = 0 if self.context is None else len(self.context)  # context patches first
        self.total = self.skip + len(latents)
        self.next_patch = 0
        self.patch_samples: int | None = None  # known once a piece was decoded
        self._state: torch.Tensor | None = None  # the decoder's causal context after the last piece (CPU)

    @property
    def done(self) -> bool:
        return self.next_patch >= self.total

    @property
    def samples(self) -> int:
        """The whole render's length (once `decode_next` has run)."""
        if self.patch_samples is None:
            raise RuntimeError("the length is known after the first piece")
        return len(self.latents) * self.patch_samples + sum(n for _, n in self.pauses)

    def decode_next(self, vae: AudioVAE, lm_dtype: torch.dtype, device: torch.device) -> np.ndarray:
        """The next piece's audio (float32, empty while only context was decoded), pauses included."""
        parts = self.next_parts(vae, lm_dtype, device)
        return parts[0][0] if len(parts) == 1 else np.concatenate([audio for audio, _ in parts])

    @torch.inference_mode()
    def next_parts(self, vae: AudioVAE, lm_dtype: torch.dtype, device: torch.device) -> list[tuple[np.ndarray, bool]]:
        """The next piece's audio as (float32 audio, whether it is a pause's silence) parts, in
        order: a listener hears speech and pauses differently (inference/request/listener.py)."""
        first = self.next_patch
        last = min(first + self.piece_patches, self.total)
        vae_dtype = next(vae.parameters()).dtype
        state = vae.new_decoder_state(1, device, vae_dtype)
        if self._state is not None:
            state.flat.copy_(self._state)
        frames = patches_to_frames(self._patches(first, last, lm_dtype).unsqueeze(0))
        audio = vae.decode(frames.to(device, vae_dtype), state)[0]
        self._state = state.flat.cpu()
        self.next_patch = last
        self.patch_samples = vae.cfg.decode_hop * frames.shape[-1] // (last - first)
        cut = max(0, self.skip - first) * self.patch_samples
        return self._paused(audio[cut:].float().cpu().numpy(), max(first, self.skip) - self.skip, last - self.skip)

    def _paused(self, audio: np.ndarray, lo: int, hi: int) -> list[tuple[np.ndarray, bool]]:
        """The audio of latent patches [lo, hi) with the zeros of the pauses that fall among them
        (and, in the last piece, of a trailing one), as (audio, is a pause) parts."""
        inside = [(i, n) for i, n in self.pauses if lo <= i < hi or i == hi == len(self.latents)]
        if hi <= lo or not inside:
            return [(audio, False)]
        parts, at = [], 0
        for i, n in inside:
            cut = (i - lo) * self.patch_samples
            parts += [(audio[at:cut], False), (np.zeros(n, audio.dtype), True)]
            at = cut
        return [(part, pause) for part, pause in parts + [(audio[at:], False)] if len(part)]

    def _patches(self, first: int, last: int, lm_dtype: torch.dtype) -> torch.Tensor:
        """Patches [first, last) of context + latents, as [k, P, D] float32."""
        parts = []
        if first < self.skip:
            parts.append(self.context[first:min(last, self.skip)].to(lm_dtype).float())
        if last > self.skip:
            lo, hi = max(first, self.skip) - self.skip, last - self.skip
            parts.append(torch.as_tensor(self.latents[lo:hi]).float().transpose(1, 2))
        return torch.cat(parts) if len(parts) > 1 else parts[0]


def decode_whole(vae: AudioVAE, latents: np.ndarray, context: torch.Tensor | None, lm_dtype: torch.dtype,
                 device: torch.device, pauses: tuple[tuple[int, int], ...] = ()) -> np.ndarray:
    """The whole offline decode in one call (one piece), the context's samples cut."""
    whole = OfflineDecode(latents, context, max(1, len(latents) + (0 if context is None else len(context))), pauses)
    return whole.decode_next(vae, lm_dtype, device)
