"""A reference clip encoded once: its latent patches are kept per VAE encoder and padding side.

Encoding a clip costs a VAE encoder pass that grows with the clip (24 ms for 5 s, 80 ms for 50 s of
TTFP on an H200), and a voice that is used again and again would pay it on every request. A
`ReferenceClip` passed as `reference_audio` or `prompt_audio` remembers what the engine made of it:
the next request with the same clip object skips decoding and encoding. The memo lives as long as
the clip (an upload's lifetime, a saved voice's), so it is bounded by whatever holds the clips.

Patches depend on the encoder's weights and on the side the clip is padded on (a reference is
padded on the right, a continuation prompt on the left), so both are part of the key; a memo made
by another checkpoint is never used.
"""
from __future__ import annotations

import hashlib
import threading
from typing import Callable

import numpy as np
import torch

Key = tuple[str, str]  # (encoder identity, padding side)


class ReferenceClip:
    """Mono float32 audio at the engine's input rate, or a loader of it, plus its encoded patches.

    `on_encoded(key, patches)` is told of each new encoding (a saved voice writes it to disk); it
    runs on the engine's thread, so it must only hand the work on."""

    def __init__(self, rate: int, audio: np.ndarray | None = None, *, load: Callable[[], np.ndarray] | None = None,
                 latents: dict[Key, torch.Tensor | np.ndarray] | None = None,
                 on_encoded: Callable[[Key, torch.Tensor], None] | None = None):
        if audio is None and load is None:
            raise ValueError("a ReferenceClip needs its audio or a way to load it")
        self.rate = int(rate)
        self._audio, self._load = audio, load
        # Arrays too (a voice library's files): held as tensors, the engine's own type.
        self._latents: dict[Key, torch.Tensor] = {k: torch.as_tensor(v) for k, v in (latents or {}).items()}
        self._on_encoded = on_encoded
        self._lock = threading.Lock()

    def samples(self) -> tuple[int, np.ndarray]:
        """(rate, audio) as the engine's audio input takes it; loaded on first need."""
        with self._lock:
            if self._audio is None:
                self._audio = self._load()
            return self.rate, self._audio

    def latents(self, key: Key) -> torch.Tensor | None:
        return self._latents.get(key)

    def remember(self, key: Key, patches: torch.Tensor):
        self._latents[key] = patches
        if self._on_encoded is not None:
            self._on_encoded(key, patches)

    def known(self, identity: str) -> dict[str, torch.Tensor]:
        """The patches made by one encoder, by padding side."""
        return {side: p for (ident, side), p in list(self._latents.items()) if ident == identity}


def encoder_identity(vae: torch.nn.Module, *extra) -> str:
    """A short fingerprint of the VAE encoder's weights (a sample of each tensor) and whatever else
    the patches depend on (`extra`: rates, padding). Cheap enough for start-up on a GPU: it reads a
    few hundred numbers per tensor, not the whole encoder."""
    digest = hashlib.sha256(repr(extra).encode())
    for name, tensor in sorted(vae.encoder.state_dict().items()):
        flat = tensor.detach().reshape(-1)
        sample = torch.cat((flat[:128], flat[-128:])).to("cpu", torch.float32)  # deliberate sync, at load only
        digest.update(f"{name}{tuple(tensor.shape)}".encode())
        digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:16]
