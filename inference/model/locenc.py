"""LocEnc: turns one latent patch into the single embedding the LMs read."""
from __future__ import annotations

import torch
from torch import nn

from .config import TransformerConfig
from .transformer import PLAIN_OPS, LayerOps, Transformer


class LocEnc(nn.Module):
    def __init__(self, cfg: TransformerConfig, feat_dim: int):
        super().__init__()
        self.in_proj = nn.Linear(feat_dim, cfg.hidden_size)
        # A learned token in front of the patch; its output position is the patch summary.
        self.special_token = nn.Parameter(torch.zeros(1, 1, 1, cfg.hidden_size))
        self.encoder = Transformer(cfg)

    def forward(self, patches: torch.Tensor, ops: LayerOps = PLAIN_OPS) -> torch.Tensor:
        """patches [B, T, P, D] -> embeddings [B, T, H] (non-causal within each patch)."""
        b, t, p, _ = patches.shape
        x = self.in_proj(patches)
        x = torch.cat((self.special_token.expand(b, t, 1, -1), x), dim=2)
        out = self.encoder(x.reshape(b * t, p + 1, -1), causal=False, ops=ops)
        return out[:, 0].reshape(b, t, -1)
