"""VoxCPM2's language-model side: the two LMs, LocEnc, LocDiT, FSQ, projections and stop head.

Module names equal the checkpoint's key prefixes (model.safetensors), so weights load strictly.
The generation step is split into small functions that the one step body (inference/runtime/decode_step.py)
calls for a batch of rows: `prefill`, `dit_condition`, `stop_logits`, `advance`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .locdit import LocDiT, euler_schedule
from .locenc import LocEnc
from .transformer import PLAIN_OPS, KVCache, LayerOps, Transformer


class ScalarQuantizer(nn.Module):
    """FSQ bottleneck applied to the base LM output at audio positions."""

    def __init__(self, dim: int, latent: int, scale: int):
        super().__init__()
        self.in_proj = nn.Linear(dim, latent)
        self.out_proj = nn.Linear(latent, dim)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.round(torch.tanh(self.in_proj(x)) * self.scale) / self.scale)


class FeatDecoder(nn.Module):
    """Holds the LocDiT under the checkpoint's `feat_decoder.estimator` prefix."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.estimator = LocDiT(cfg.local_dit, cfg.feat_dim)


@dataclass
class StepState:
    """What the next patch is generated from; never leaves the device."""

    lm_hidden: torch.Tensor  # [B, H] base LM output (FSQ'd at audio positions)
    residual_hidden: torch.Tensor  # [B, H]
    prev_patch: torch.Tensor  # [B, P, D] the patch the DiT is conditioned on


class VoxCPM2(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.base_lm.hidden_size
        self.base_lm = Transformer(cfg.base_lm)
        self.residual_lm = Transformer(cfg.residual_lm)
        self.feat_encoder = LocEnc(cfg.local_encoder, cfg.feat_dim)
        self.feat_decoder = FeatDecoder(cfg)
        self.fsq_layer = ScalarQuantizer(h, cfg.fsq_latent_dim, cfg.fsq_scale)
        self.enc_to_lm_proj = nn.Linear(cfg.local_encoder.hidden_size, h)
        self.lm_to_dit_proj = nn.Linear(h, cfg.local_dit.hidden_size)
        self.res_to_dit_proj = nn.Linear(h, cfg.local_dit.hidden_size)
        self.fusion_concat_proj = nn.Linear(2 * h, h)
        self.stop_proj = nn.Linear(h, h)
        self.stop_head = nn.Linear(h, 2, bias=False)
        self.base_cache: KVCache | None = None
        self.residual_cache: KVCache | None = None

    def allocate_caches(self, capacity: int, rows: int = 1):
        """Static KV caches, one row per concurrent stream, sized once; every request reuses them."""
        p = next(self.parameters())
        self.base_cache = KVCache(self.cfg.base_lm, capacity, rows, p.device, p.dtype)
        self.residual_cache = KVCache(self.cfg.residual_lm, capacity, rows, p.device, p.dtype)

    def cache_bytes_per_row(self, capacity: int) -> int:
        dtype = next(self.parameters()).dtype
        return sum(KVCache.bytes_per_row(c, capacity, dtype) for c in (self.cfg.base_lm, self.cfg.residual_lm))

    @property
    def dit(self) -> LocDiT:
        return self.feat_decoder.estimator

    def embed_patches(self, patches: torch.Tensor, ops: LayerOps = PLAIN_OPS) -> torch.Tensor:
        """[B, T, P, D] -> LM-space embeddings [B, T, H]."""
        return self.enc_to_lm_proj(self.feat_encoder(patches, ops))

    def fuse_projections(self):
        """After loading: one matrix per q/k/v and per gate/up in every transformer."""
        for module in (self.base_lm, self.residual_lm, self.feat_encoder.encoder, self.dit.decoder):
            module.fuse_projections()

    def transformers(self) -> tuple[Transformer, ...]:
        return self.base_lm, self.residual_lm, self.feat_encoder.encoder, self.dit.decoder

    def prefill(self, tokens, text_mask, audio_mask, patch_embeds, last_patch, last: torch.Tensor,
                rows: torch.Tensor, ops: LayerOps = PLAIN_OPS) -> StepState:
        """Run B prompts through both LMs, filling cache `rows` ([B] long). Masks are [B, T] in 0/1;
        patch_embeds [B, T, H] are the LocEnc embeddings at audio positions (anything finite at
        text positions: the mask removes them), last_patch [B, P, D] each prompt's final patch.
        Prompts shorter than T are padded at the end and `last` ([B] long) marks each one's final
        position: causal attention keeps the padding from reaching the real positions. `ops`: the
        layers' functions (the runtime passes ones compiled for any batch and length)."""
        dtype = patch_embeds.dtype
        text_mask, audio_mask = text_mask.to(dtype).unsqueeze(-1), audio_mask.to(dtype).unsqueeze(-1)
        text_embed = self.base_lm.embed_tokens(tokens) * self.cfg.base_lm.embed_scale
        lm_in = text_mask * text_embed + audio_mask * patch_embeds
        lm_out = self.base_lm(lm_in, causal=True, cache=self.base_cache, rows=rows, ops=ops)
        lm_out = self.fsq_layer(lm_out) * audio_mask + lm_out * text_mask
        res_in = self.fusion_concat_proj(torch.cat((lm_out, audio_mask * patch_embeds), dim=-1))
        res_out = self.residual_lm(res_in, causal=True, cache=self.residual_cache, rows=rows, ops=ops)
        batch = torch.arange(tokens.shape[0], device=tokens.device)
        return StepState(lm_out[batch, last], res_out[batch, last], last_patch)

    def time_tokens(self, steps: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(dt, time token) per Euler step; mean mode off means the DiT's dt input is zero."""
        dtype = next(self.parameters()).dtype
        out = []
        for t, dt in euler_schedule(steps, dtype):
            t, dt = t.to(device).view(1), dt.to(device)
            dt_in = dt.view(1) if self.cfg.dit_mean_mode else torch.zeros_like(t)
            out.append((dt, self.dit.time_token(t, dt_in, dtype)))
        return out

    def dit_condition(self, lm_hidden: torch.Tensor, residual_hidden: torch.Tensor) -> torch.Tensor:
        """The two LM states as the DiT's two condition tokens, [B, 2 * H_dit]."""
        return torch.cat((self.lm_to_dit_proj(lm_hidden), self.res_to_dit_proj(residual_hidden)), dim=-1)

    def stop_logits(self, lm_hidden: torch.Tensor) -> torch.Tensor:
        return self.stop_head(F.silu(self.stop_proj(lm_hidden)))

    def advance(self, patch: torch.Tensor, position: torch.Tensor, span: int, ops: LayerOps = PLAIN_OPS) -> StepState:
        """Feed each row's new patch [B, P, D] back through LocEnc and one step of each LM, at the
        row's position ([B] long)."""
        embed = self.embed_patches(patch.unsqueeze(1), ops)[:, 0]
        lm_hidden = self.fsq_layer(self.base_lm.step(embed, position, self.base_cache, span, ops))
        res_in = self.fusion_concat_proj(torch.cat((lm_hidden, embed), dim=-1))
        residual_hidden = self.residual_lm.step(res_in, position, self.residual_cache, span, ops)
        return StepState(lm_hidden, residual_hidden, patch)
