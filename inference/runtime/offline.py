"""The offline decode: a stream's latents through the VAE in one call, as the official model
renders a whole utterance (the reference the streamed audio is compared with, and the offline
render of a finished stream)."""
from __future__ import annotations

import numpy as np
import torch

from ..model.audio_vae import AudioVAE
from .decode_step import patches_to_frames


@torch.inference_mode()
def decode_whole(vae: AudioVAE, latents: np.ndarray, context: torch.Tensor | None, lm_dtype: torch.dtype,
                 patch_samples: int, device: torch.device) -> np.ndarray:
    """[n, D, P] latents (after optional context patches [C, P, D], rounded to the LM's dtype as
    the streamed decoder's warm-up saw them) -> audio, the context's samples cut."""
    patches = torch.as_tensor(latents).transpose(1, 2)
    if context is not None and len(context):
        patches = torch.cat((context.to(lm_dtype).float(), patches))
    vae_dtype = next(vae.parameters()).dtype
    audio = vae.decode(patches_to_frames(patches.unsqueeze(0)).to(device, vae_dtype))[0]
    skip = 0 if context is None else len(context) * patch_samples
    return audio[skip:].float().cpu().numpy()
