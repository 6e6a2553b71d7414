"""LocDiT and its conditional flow-matching solver: one latent patch from the LM hidden states.

The solver follows the official sampler: a sway-warped time grid, Euler steps, the first
steps with zero velocity, and classifier-free guidance with the CFG-Zero* scale, both branches
run as one batch of two.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .transformer import PLAIN_OPS, LayerOps, Transformer


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoid of t * 1000, sin half then cos half, computed in t's dtype as the official does."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=t.dtype, device=t.device) * -(math.log(10000) / (half - 1)))
    angles = 1000 * t.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimestepMLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(dim, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class LocDiT(nn.Module):
    """Velocity estimator over [2 condition tokens, time token, previous patch, noisy patch]."""

    def __init__(self, cfg: TransformerConfig, feat_dim: int):
        super().__init__()
        self.hidden = cfg.hidden_size
        self.in_proj = nn.Linear(feat_dim, cfg.hidden_size)
        self.cond_proj = nn.Linear(feat_dim, cfg.hidden_size)
        self.out_proj = nn.Linear(cfg.hidden_size, feat_dim)
        self.time_mlp = TimestepMLP(cfg.hidden_size)
        self.delta_time_mlp = TimestepMLP(cfg.hidden_size)
        self.decoder = Transformer(cfg)

    def time_token(self, t: torch.Tensor, dt: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[N] times -> [N, H]. Depends only on the schedule, so the fast path precomputes it."""
        tt = self.time_mlp(timestep_embedding(t, self.hidden).to(dtype))
        return tt + self.delta_time_mlp(timestep_embedding(dt, self.hidden).to(dtype))

    def velocity(self, x: torch.Tensor, mu: torch.Tensor, time: torch.Tensor, cond: torch.Tensor,
                 ops: LayerOps = PLAIN_OPS) -> torch.Tensor:
        """x [N, P, D] noisy patch, mu [N, 2H], time [N, H], cond [N, P, D] -> velocity [N, P, D]."""
        n, p, _ = x.shape
        tokens = torch.cat(
            (mu.view(n, -1, self.hidden), time.unsqueeze(1), self.cond_proj(cond), self.in_proj(x)), dim=1
        )
        return self.out_proj(self.decoder(tokens, causal=False, ops=ops, keep=p))


def euler_schedule(steps: int, dtype: torch.dtype, sway: float = 1.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(t, dt) of each Euler step, with the official's accumulation order and rounding (dtype)."""
    grid = torch.linspace(1, 0, steps + 1, dtype=dtype)
    grid = grid + sway * (torch.cos(torch.pi / 2 * grid) - 1 + grid)
    t, dt = grid[0], grid[0] - grid[1]
    schedule = []
    for step in range(1, steps + 1):
        schedule.append((t, dt))
        t = t - dt
        if step < steps:
            dt = t - grid[step + 1]
    return schedule


def zero_velocity_steps(steps: int) -> int:
    """CFG-Zero*: the first few Euler steps keep the noise as it is (one step for 10 timesteps)."""
    return max(1, int((steps + 1) * 0.04))


def guided_velocity(v_cond: torch.Tensor, v_uncond: torch.Tensor, cfg_value) -> torch.Tensor:
    """CFG-Zero*: rescale the unconditioned velocity by its projection on the conditioned one.
    cfg_value: a number, or float32 [B, 1, 1] (one per row)."""
    b = v_cond.shape[0]
    pos, neg = v_cond.reshape(b, -1), v_uncond.reshape(b, -1)
    scale = (pos * neg).sum(1, keepdim=True) / ((neg * neg).sum(1, keepdim=True) + 1e-8)
    scale = scale.view(b, 1, 1)
    diff = v_cond - v_uncond * scale
    # The product is taken in float32 and rounded once, as a float scalar times a bf16 tensor is.
    return v_uncond * scale + (cfg_value * diff.float()).to(diff.dtype)


def guided_euler(x, v, dt, cfg_value) -> torch.Tensor:
    """x - dt * (CFG-Zero* of the batch-of-two velocity v = [conditioned; unconditioned]).
    dt and cfg_value are [B, 1, 1], one per row; a row with dt 0 keeps its x exactly."""
    b = x.shape[0]
    return x - dt * guided_velocity(v[:b], v[b:], cfg_value)


def euler_update(dit: LocDiT, x, mu_pair, cond_pair, time, dt, cfg_value, ops: LayerOps = PLAIN_OPS,
                 combine=guided_euler) -> torch.Tensor:
    """One guided Euler step of B rows: x [B, P, D], time [B, H] and dt, cfg_value [B] per row;
    mu_pair/cond_pair are the [conditioned; unconditioned] batch of 2B. `ops` and `combine` (a
    function like guided_euler) are the plain functions or the runtime's compiled ones."""
    b = x.shape[0]
    v = dit.velocity(torch.cat((x, x), dim=0), mu_pair, torch.cat((time, time), dim=0), cond_pair, ops)
    return combine(x, v, dt.view(b, 1, 1), cfg_value.view(b, 1, 1))


def guidance_pair(mu: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The unconditioned branch sees zero LM conditioning and the same previous patch."""
    return torch.cat((mu, torch.zeros_like(mu)), dim=0), torch.cat((cond, cond), dim=0)
