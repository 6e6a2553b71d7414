"""The per-patch algorithm, written once: static per-row buffers and the functions a step is made of.

Every stream owns one row of these buffers (and of the KV caches and the VAE decoder state). A
patch of rows 0..B-1 is `prologue(B)`, `euler(B)` once per Euler step, then `finish(B, span)`;
streams enter their rows through `prefill(...)` and `load_rows(...)`. On the CPU, or with graphs
off, the runner calls these functions directly; on CUDA it replays graphs captured from the very
same calls (inference/runtime/cuda_graphs.py), so the tests on the CPU exercise the code the GPU replays.
The model functions a step calls come from one StepFunctions bundle (inference/runtime/compiled.py),
plain or compiled, which this class holds and passes into every model call.

Rows of a bucket that hold no stream compute harmless garbage: rows never mix (attention,
matrix products and convolutions are per row), and positions are clamped inside the cache.
"""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..model.audio_vae import AudioVAE
from ..model.locdit import euler_update, guidance_pair, zero_velocity_steps
from ..model.transformer import LayerOps
from ..model.voxcpm2 import VoxCPM2
from ..request.continuation import DecoderStart
from ..request.listener import HALF_REACH, halving_taps
from ..request.prompt import Prompt
from .compiled import PLAIN, StepFunctions


@dataclass(frozen=True)
class Join:
    """A stream entering `row`: its prompt, starting noise [n, P, D], sampler settings, and how
    the row's VAE decoder starts (DecoderStart; a carried or rewound state is the one kept by
    `keep_end`)."""

    row: int
    prompt: Prompt
    noise: torch.Tensor
    steps: int
    cfg_value: float
    decoder: DecoderStart = DecoderStart.FRESH
    quiet: bool = False  # silence went out just before it: its half-rate patches start from silence (halve)


def patches_to_frames(patches: torch.Tensor) -> torch.Tensor:
    """[B, T, P, D] patches -> [B, D, T*P] latent frames, the VAE's layout."""
    b, t, p, d = patches.shape
    return patches.reshape(b, t * p, d).transpose(1, 2)


def int16_samples(audio: torch.Tensor) -> torch.Tensor:
    """float32 audio in [-1, 1] -> int16, as every door sends it (ui/services/audio.to_pcm: scaled
    by 32767 in float32, rounded half to even, only what overflows clipped): the same bytes."""
    return torch.round(audio * 32767.0).clamp_(-32768, 32767).to(torch.int16)


def halve(history: torch.Tensor, audio: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Rows of new audio [B, n] after their last 2 * HALF_REACH samples [B, 2 * HALF_REACH] ->
    the patch at half the rate, as AudioChunk's Half holds it [B, n / 2 + HALF_REACH]: soxr's
    filter (`taps`, listener.halving_taps, [1, 1, 2 * HALF_REACH + 1]) over the rows, silence after
    them. In float32 without TF32, as soxr computes (TF32's 10-bit products would miss by an int16 step)."""
    x = F.pad(torch.cat([history, audio], 1), (0, history.shape[1]))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        return F.conv1d(x.unsqueeze(1), taps, stride=2).squeeze(1)


def in_scope(method):
    """Runs a DecodeStep method inside its functions' scope (where they may compile)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self.fns.scope:
            return method(self, *args, **kwargs)
    return call


Layout = dict[str, tuple[int, int, torch.dtype]]  # a field's (start, end) bytes in a row, and its type


def output_layout(fields: dict[str, tuple[int, torch.dtype]]) -> tuple[Layout, int]:
    """Each field's bytes in a row of the outputs buffer, (start, end, dtype), and a row's length.
    Fields of wider types go first and a row is padded to 8 bytes, so that each field can be
    viewed as its type in every row."""
    layout, at = {}, 0
    for name, (count, dtype) in sorted(fields.items(), key=lambda kv: -kv[1][1].itemsize):
        layout[name], at = (at, at + count * dtype.itemsize, dtype), at + count * dtype.itemsize
    return layout, at + (-at) % 8


class DecodeStep:
    """Holds `rows` streams' generation state on the device; its methods only read and write these
    tensors, so each can be captured in a CUDA graph."""

    def __init__(self, model: VoxCPM2, vae: AudioVAE, rows: int, capacity: int, fns: StepFunctions = PLAIN,
                 max_timesteps: int = 100):
        self.model, self.vae, self.rows, self.capacity, self.fns = model, vae, rows, capacity, fns
        cfg = model.cfg
        weight = next(model.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        self.vae_dtype = next(vae.parameters()).dtype
        self.patch_samples, self.patch_shape = cfg.patch_samples, (cfg.patch_size, cfg.feat_dim)
        model.allocate_caches(capacity, rows)
        self._allocate(cfg, rows, capacity, max_timesteps)
        self.decoder = vae.new_decoder_state(batch=rows, device=self.device, dtype=self.vae_dtype)
        # Each row's decoder state before its latest patch: a segment that ended while its next
        # patch was already launched (the runner keeps one patch in flight) rewinds that patch.
        self.decoder_before = torch.zeros_like(self.decoder.flat)
        # Each row's decoder state at the start of its current segment, for a runaway's retry.
        self.decoder_at_segment = torch.zeros_like(self.decoder.flat)
        # The same three for each row's last samples, which the patch at half the rate starts from.
        history = torch.zeros(rows, 2 * HALF_REACH, device=self.device)
        self.half_history, self.half_before, self.half_at_segment = history, history.clone(), history.clone()
        taps = halving_taps(cfg.vae.out_sample_rate)[::-1].copy()  # conv1d correlates: the filter reversed
        self.half_taps = torch.tensor(taps, dtype=torch.float32, device=self.device).view(1, 1, -1)
        # The VAE decode depends only on the new patch: on CUDA it runs on a second stream, beside
        # the LM step.
        self.side_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._schedules: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # The DiT's layer functions per batch bucket where the runner's warm-up chose one of
        # fns.dit_choices over fns.ops (BatchRunner.choose_dit_ops, through run_dit_on).
        self.dit_ops: dict[int, LayerOps] = {}

    def _allocate(self, cfg, rows: int, capacity: int, max_timesteps: int):
        h, hd, (p, d) = cfg.base_lm.hidden_size, cfg.local_dit.hidden_size, self.patch_shape
        z = lambda *shape, dtype=self.dtype: torch.zeros(*shape, device=self.device, dtype=dtype)  # noqa: E731
        self.lm_hidden, self.residual_hidden = z(rows, h), z(rows, h)
        self.prev_patch, self.x, self.patch = z(rows, p, d), z(rows, p, d), z(rows, p, d)
        self.mu_pair, self.cond_pair = z(2 * rows, 2 * hd), z(2 * rows, p, d)  # [cond rows; uncond rows]
        self.noise = z(rows, capacity, p, d)  # row r's patch i starts from noise[r, i]
        self.time_rows, self.dt_rows = z(rows, max_timesteps, hd), z(rows, max_timesteps)
        self.cfg_value = z(rows, dtype=torch.float32)
        self.position, self.patch_index = z(rows, dtype=torch.long), z(rows, dtype=torch.long)
        self.k = z(1, dtype=torch.long)  # Euler step of the patch under way
        self.row_ids = torch.arange(rows, device=self.device)
        # What the host reads of each patch, per row, in one buffer of bytes so that it goes home in
        # one copy (each copy is a PyTorch call on the engine's thread, a wait for the GIL), as
        # typed views of it (self.layout): `staging` the patch's new audio, its latents [D, P] and its
        # stop flag; `half` the patch at half the model's rate (halve); `pcm` and `half_pcm` the
        # same audio as the int16 samples every door sends (int16_samples). Both rates are made
        # here for every row at once so that the event loop sends a chunk without NumPy loops or
        # a resampler of its own: each lets go of the GIL and waits behind the engine's thread to
        # get it back (bench/lab/loop_handoffs.py; docs/benchmarks.md).
        half = self.patch_samples // 2 + HALF_REACH
        self.layout, row_bytes = output_layout({"staging": (self.patch_samples + p * d + 1, torch.float32),
                                                "half": (half, torch.float32), "pcm": (self.patch_samples, torch.int16),
                                                "half_pcm": (half, torch.int16)})
        self.outputs = z(rows, row_bytes, dtype=torch.uint8)
        views = {name: self.outputs[:, start:end].view(dtype) for name, (start, end, dtype) in self.layout.items()}
        self.staging, self.half, self.pcm, self.half_pcm = (views[n] for n in ("staging", "half", "pcm", "half_pcm"))
        self.max_iterations = max_timesteps

    @staticmethod
    def bytes_per_row(model: VoxCPM2, vae: AudioVAE, capacity: int, max_timesteps: int = 100) -> int:
        """Device memory one more row costs: KV rows, noise, schedule, decoder state, staging."""
        cfg, itemsize = model.cfg, next(model.parameters()).dtype.itemsize
        noise = capacity * cfg.patch_size * cfg.feat_dim * itemsize
        schedule = max_timesteps * (cfg.local_dit.hidden_size + 1) * itemsize
        decoder = 3 * vae.decoder_state_numel() * next(vae.parameters()).dtype.itemsize  # live, before, at segment
        decoder += 3 * 2 * HALF_REACH * 4  # the same for the half-rate patches' history
        half = cfg.patch_samples // 2 + HALF_REACH
        staging = (cfg.patch_samples + cfg.patch_size * cfg.feat_dim + 1) * 4 + cfg.patch_samples * 2 + half * 6
        return model.cache_bytes_per_row(capacity) + noise + schedule + decoder + staging

    # -- entering a row (between steps) ----------------------------------------------------------
    @in_scope
    def embed_patches(self, patches: torch.Tensor) -> torch.Tensor:
        """LocEnc of prompt patches [B, T, P, D] with the step's ops (see BatchRunner.admit)."""
        return self.model.embed_patches(patches, self.fns.ops)

    @in_scope
    def prefill(self, tokens, text_mask, audio_mask, patch_embeds, last_patch, last, rows):
        """Prompts [B, T] (padded at the end; `last` [B] marks each one's end) into cache `rows` [B]."""
        state = self.model.prefill(tokens, text_mask, audio_mask, patch_embeds, last_patch, last, rows,
                                   self.fns.prefill)
        self.lm_hidden.index_copy_(0, rows, state.lm_hidden)
        self.residual_hidden.index_copy_(0, rows, state.residual_hidden)
        self.prev_patch.index_copy_(0, rows, state.prev_patch)
        self.position.index_copy_(0, rows, last + 1)
        self.patch_index.index_fill_(0, rows, 0)

    @in_scope
    def load_rows(self, joins: list[Join], rows: torch.Tensor, cfg: torch.Tensor):
        """The rest of entering streams' state: noise, Euler schedule and guidance (a few batched
        copies however many join), then each row's VAE decoder as its Join says. `rows` and `cfg`
        [n]: the joins' rows and guidance on the device, uploaded with their prompts (BatchRunner.admit)."""
        # A row's noise past its own length is never read; padded with zeros.
        noise = torch.nn.utils.rnn.pad_sequence([j.noise for j in joins], batch_first=True).to(self.dtype)
        self.noise[:, : noise.shape[1]].index_copy_(0, rows, self.upload(noise).to(self.device, non_blocking=True))
        schedules = [self.schedule(j.steps) for j in joins]
        self.time_rows.index_copy_(0, rows, torch.stack([time for time, _ in schedules]))
        self.dt_rows.index_copy_(0, rows, torch.stack([dt for _, dt in schedules]))
        self.cfg_value.index_copy_(0, rows, cfg)
        if any(j.decoder is not DecoderStart.FRESH for j in joins):
            # The states kept by keep_end, every joining row's in one copy each (a fresh row's is
            # reset right after): a live session's every clause enters this way, and at 128
            # sessions the seams come together, so not a copy or two per row.
            self.decoder.flat.index_copy_(0, rows, self.decoder_at_segment.index_select(0, rows))
            self.half_history.index_copy_(0, rows, self.half_at_segment.index_select(0, rows))
        fresh = [j.row for j in joins if j.decoder is DecoderStart.FRESH]
        if fresh:
            self.decoder.reset(rows if len(fresh) == len(joins) else self.upload_rows(fresh))
        silent = [j.row for j in joins if j.decoder is DecoderStart.FRESH or j.quiet]  # from silence (halve)
        if silent:
            self.half_history.index_fill_(0, rows if len(silent) == len(joins) else self.upload_rows(silent), 0.0)
        for j in joins:
            if j.decoder is DecoderStart.FRESH and len(j.prompt.decode_context):
                context = self.upload(j.prompt.decode_context).to(self.device, non_blocking=True)
                self._decode_context(j.row, context.to(self.dtype).to(self.vae_dtype))

    def warm_context_decodes(self, row: int, patches: int):
        """Decode zero contexts of 1..patches patches into `row`, then reset it: each shape a
        joining stream's context can take runs once in warm-up (on CUDA the VAE's Triton kernels
        time their tiles on a shape's first call), not on the GPU thread at a request's start."""
        for n in range(1, patches + 1):
            self._decode_context(row, torch.zeros(n, *self.patch_shape, device=self.device, dtype=self.vae_dtype))
        self.decoder.reset(row)

    def _decode_context(self, row: int, patches: torch.Tensor):
        """Run the row's VAE decoder over patches [C, P, D] (VAE dtype, on the device), output unused."""
        self.vae.decode_chunk(patches_to_frames(patches.unsqueeze(0)), self.decoder.row(row))

    def keep_end(self, row: int, overrun: bool):
        """The row's decoder state at the end of the segment just collected, kept as the next
        segment's start (and its retries'): the row runs on with every batch until it is
        re-prefilled, which may be steps later (admission paced by the listeners' slack, or a live
        request waiting for text). overrun: a patch launched after the segment's last one has
        already run through the row (the runner keeps one in flight: the stream's own next patch,
        or, the stream left out of it at its cap, the garbage of a row below the batch's highest:
        BatchRunner.ran_since), so the state before it is the segment's end. Queued behind that
        patch, so it reads what the patch left."""
        self.decoder_at_segment[row].copy_(self.decoder_before[row] if overrun else self.decoder.flat[row])
        self.half_at_segment[row].copy_(self.half_before[row] if overrun else self.half_history[row])

    def upload_rows(self, rows: list[int]) -> torch.Tensor:
        """Row indices on the device (a list indexing a CUDA tensor would copy from pageable memory,
        which waits for the queued steps)."""
        return self.upload(torch.tensor(rows)).to(self.device, non_blocking=True)

    def upload(self, host: torch.Tensor) -> torch.Tensor:
        """Pinned, so the copy to the GPU does not wait for the steps already queued."""
        return host.pin_memory() if self.device.type == "cuda" else host

    def schedule(self, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Time tokens and dt of the Euler steps that move x, padded with dt = 0 (x stays)."""
        if steps not in self._schedules:
            tokens = self.model.time_tokens(steps, self.device)[zero_velocity_steps(steps):]
            time = torch.zeros(self.max_iterations, self.time_rows.shape[-1], device=self.device, dtype=self.dtype)
            dt = torch.zeros(self.max_iterations, device=self.device, dtype=self.dtype)
            if tokens:
                time[: len(tokens)] = torch.cat([t for _, t in tokens])
                dt[: len(tokens)] = torch.stack([d for d, _ in tokens])
            self._schedules[steps] = (time, dt)
        return self._schedules[steps]

    @staticmethod
    def iterations(steps: int) -> int:
        """Euler steps per patch that call the DiT."""
        return steps - zero_velocity_steps(steps)

    # -- one patch of rows 0..b-1 ---------------------------------------------------------------
    def prologue(self, b: int):
        """Each row's DiT condition and the patch's starting noise."""
        mu = self.model.dit_condition(self.lm_hidden[:b], self.residual_hidden[:b])
        mu_pair, cond_pair = guidance_pair(mu, self.prev_patch[:b])
        self.mu_pair[: 2 * b].copy_(mu_pair)
        self.cond_pair[: 2 * b].copy_(cond_pair)
        self.x[:b].copy_(self.noise[self.row_ids[:b], self.patch_index[:b]])
        self.k.zero_()

    def run_dit_on(self, b: int, name: str):
        """Bucket b's Euler steps call the DiT through fns.dit_options[name] from now on."""
        self.dit_ops[b] = self.fns.dit_options[name]

    @in_scope
    def euler(self, b: int):
        """One guided Euler step of every row, each at its own schedule's step k."""
        time = self.time_rows[:b].index_select(1, self.k).squeeze(1)
        dt = self.dt_rows[:b].index_select(1, self.k).squeeze(1)
        x = euler_update(self.model.dit, self.x[:b], self.mu_pair[: 2 * b], self.cond_pair[: 2 * b], time, dt,
                         self.cfg_value[:b], self.dit_ops.get(b, self.fns.ops), self.fns.guided_euler)
        self.x[:b].copy_(x)
        self.k.add_(1)

    @in_scope
    def finish(self, b: int, span: int):
        """Stop flags, the streamed audio of the new patches, and the LM step that feeds them back.
        `span` covers every live row's position."""
        patch, n = self.patch[:b], self.patch_samples
        patch.copy_(self.x[:b])  # a static copy: the VAE stream reads it while x moves on
        self.staging[:b, n:-1].copy_(patch.transpose(1, 2).reshape(b, -1))
        self.staging[:b, -1].copy_(self.model.stop_logits(self.lm_hidden[:b]).argmax(-1))
        with self.on_side_stream():
            self.decoder_before[:b].copy_(self.decoder.flat[:b])
            frames = patches_to_frames(patch.unsqueeze(1).to(self.vae_dtype))
            audio = self.staging[:b, :n]
            audio.copy_(self.vae.decode_chunk(frames, self.decoder.rows(b)))
            self.pcm[:b].copy_(int16_samples(audio))
            self.half_before[:b].copy_(self.half_history[:b])
            half = halve(self.half_history[:b], audio, self.half_taps)
            self.half[:b].copy_(half)
            self.half_pcm[:b].copy_(int16_samples(half))
            self.half_history[:b].copy_(torch.cat([self.half_history[:b], audio], 1)[:, -2 * HALF_REACH:])
        nxt = self.model.advance(patch, self.position[:b], span, self.fns.ops)
        self.lm_hidden[:b].copy_(nxt.lm_hidden)
        self.residual_hidden[:b].copy_(nxt.residual_hidden)
        self.prev_patch[:b].copy_(patch)
        # Clamped so that rows with no stream (they run on) never index past the cache.
        self.position[:b].add_(1).clamp_(max=self.capacity - 1)
        self.patch_index[:b].add_(1).clamp_(max=self.capacity - 1)
        self.join_side_stream()

    @contextlib.contextmanager
    def on_side_stream(self):
        if self.side_stream is None:
            yield
            return
        self.side_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side_stream):
            yield

    def join_side_stream(self):
        if self.side_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.side_stream)


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory. Available as the kernel counts it (MemAvailable:
    free pages plus the page cache it can drop), not the free pages alone, which a busy machine's
    cache keeps small: that refused a start with 2.4 GB "free" while 19 GB were available."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = os.sysconf("SC_PHYS_PAGES") * page
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, total
    except OSError:  # not Linux
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * page, total


def plan_rows(model, vae, device: torch.device, max_streams: int) -> tuple[int, int]:
    """(rows to allocate, rows the free memory would hold). Each row costs its KV cache rows,
    noise, schedule, decoder state and staging; a tenth of the memory (at least 2 GiB) stays free
    for activations, graphs and the allocator's slack."""
    if not (isinstance(max_streams, int) and max_streams >= 1):
        raise ValueError(f"max_streams must be a whole number of at least 1, got {max_streams!r}")
    per_row = DecodeStep.bytes_per_row(model, vae, model.cfg.max_length)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
    else:
        free, total = host_memory()
    fit = (free - max(2 << 30, total // 10)) // per_row
    if fit < 1:
        raise MemoryError(f"not enough free {device.type} memory for one stream: each needs "
                          f"{per_row / 2**20:.0f} MB beyond the weights, and {free / 2**20:.0f} MB are free")
    return min(fit, max_streams), fit
