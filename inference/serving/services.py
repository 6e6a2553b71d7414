"""The work besides streams that the app asks of an engine: a finished job's offline render and a
saved voice's encoding. Each runs on an engine's own worker thread between two steps
(Serving.call), and speaks plain types at the boundary (arrays, ids, strings), so the HTTP layer
never holds an engine or a tensor. (Transcripts and scores are not the engine's work: they run in
the analysis process, inference/analysis/.)
"""
from __future__ import annotations

import concurrent.futures

import numpy as np

from ..request.reference import ReferenceClip
from ..runtime.offline import OfflineDecode
from .interfaces import ServiceEngine, Serving
from .latent_store import KeptLatents


class OfflineRender:
    """A finished job's kept latents decoded from silence, `piece_patches` patches per call on an
    engine's thread (bounded memory whatever the length; runtime/offline.OfflineDecode). One
    piece at a time, in order: the next is asked for once the last has come back."""

    def __init__(self, kept: KeptLatents, piece_patches: int):
        self._decode = OfflineDecode(kept.latents, kept.context, piece_patches, kept.pauses)
        self.patches = len(kept.latents)

    @property
    def done(self) -> bool:
        return self._decode.done

    @property
    def samples(self) -> int:
        """The render's length, known before its first piece."""
        return self._decode.samples

    def next_piece(self, serving: Serving) -> concurrent.futures.Future:
        """The next piece of the render: (float32 audio in [-1, 1], is a pause's silence) parts."""
        return serving.call(self._next, "render")

    def _next(self, engine: ServiceEngine) -> list[tuple[np.ndarray, bool]]:
        return engine.decode_next(self._decode)


def encode_voice(serving: Serving, reference: ReferenceClip, transcript: str | None,
                 identity: str) -> concurrent.futures.Future:
    """The clip encoded on each side a request with the voice will want, as the request would
    (RequestPreparer.encode_clip): padded on the right as a reference, and on the left as
    a continuation prompt when there is a transcript. The future holds {side: float32 patches}, the
    encoder `identity`'s, for the voice library to keep (the ReferenceClip keeps them too)."""
    def encode_sides(engine: ServiceEngine) -> dict[str, np.ndarray]:
        engine.encode_audio(reference, "right", "reference audio")
        if transcript:
            engine.encode_audio(reference, "left", "prompt audio")
        # Deliberate GPU->CPU copy (it waits for the encoder): the library stores host arrays, and
        # this runs between two steps, on the engine's thread, once per saved voice.
        return {side: patches.cpu().numpy() for side, patches in reference.known(identity).items()}
    return serving.call(encode_sides, "encode")

