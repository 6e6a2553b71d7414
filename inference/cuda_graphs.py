"""The CUDA fast path: each patch is decoded by replaying captured graphs on static buffers.

Per patch the host replays the DiT Euler-step graph (timesteps - 1 times) and one step graph
(stop head, streaming VAE decode of the patch, LocEnc feedback, both LM steps, the next patch's
noise and condition). Nothing waits on the GPU inside a step; the one deliberate sync per patch
is the wait for its audio, latents and stop flag, copied together into pinned host memory. The
next patch is launched before that wait, so host work overlaps GPU work.

Attention reads a bucket of cache slots (see `runner.span_buckets`), one step graph per bucket,
so its cost follows the real sequence length rather than the cache's capacity. Prefill replays a
graph captured for the smallest padded prompt length that holds the prompt.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator

import numpy as np
import torch

from .audio_vae import AudioVAE
from .locdit import euler_update, guidance_pair, zero_velocity_steps
from .model import VoxCPM2
from .prompt import Prompt
from .runner import EagerRunner, patches_to_frames


class CapturedGraph:
    """A no-argument function captured once; it reads and writes only static tensors."""

    def __init__(self, fn: Callable[[], None], pool, stream: torch.cuda.Stream):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, stream=stream):
            fn()

    def replay(self):
        self.graph.replay()


class GraphRunner(EagerRunner):
    """Same results as EagerRunner with the same compiled functions (tested step by step on a GPU).
    Its constructor allocates every static buffer; `capture()` (run by Engine.warmup) compiles,
    warms up and captures; `run()` then only copies a request in and replays."""

    def __init__(self, model: VoxCPM2, vae: AudioVAE, compile_ops: bool = True, max_timesteps: int = 100):
        super().__init__(model, vae, compile_ops)
        cfg = model.cfg
        self.capacity = model.base_cache.capacity
        self.patch_samples = cfg.patch_samples
        self.allocate_static(cfg, max_timesteps)
        self.graphs_ready = False

    def allocate_static(self, cfg, max_timesteps: int):
        dev, dt = self.device, self.dtype
        h, p, d, hd = cfg.base_lm.hidden_size, cfg.patch_size, cfg.feat_dim, cfg.local_dit.hidden_size
        z = lambda *shape, dtype=dt: torch.zeros(*shape, device=dev, dtype=dtype)  # noqa: E731
        self.lm_hidden, self.residual_hidden = z(1, h), z(1, h)
        self.prev_patch, self.x, self.patch = z(1, p, d), z(1, p, d), z(1, p, d)
        self.mu_pair, self.cond_pair = z(2, 2 * hd), z(2, p, d)
        self.noise = z(self.capacity + 1, p, d)
        self.time_table, self.dt_table = z(max_timesteps, hd), z(max_timesteps)
        self.cfg_value = z((), dtype=torch.float32)
        long = lambda: torch.zeros(1, device=dev, dtype=torch.long)  # noqa: E731
        self.position, self.patch_index, self.k, self.k_start = long(), long(), long(), long()
        self.decoder = self.vae.new_decoder_state(batch=1, device=dev, dtype=self.vae_dtype)
        self.staging = torch.zeros(self.patch_samples + p * d + 1, device=dev, dtype=torch.float32)
        self.pinned = [torch.zeros_like(self.staging, device="cpu").pin_memory() for _ in range(2)]
        self.copied = [torch.cuda.Event() for _ in range(2)]
        self.vae_stream = torch.cuda.Stream()
        self.allocate_prefill(cfg)

    def allocate_prefill(self, cfg, smallest: int = 64, largest: int = 4096):
        """Padded prompt buffers per captured prefill length; longer prompts prefill eagerly."""
        self.prefill_lengths, length = [], smallest
        while length <= min(largest, self.capacity // 2):
            self.prefill_lengths.append(length)
            length *= 2
        dev = self.device
        self.prefill_in = {n: (torch.zeros(1, n, dtype=torch.long, device=dev), torch.zeros(1, n, device=dev),
                               torch.zeros(1, n, device=dev),
                               torch.zeros(1, n, cfg.patch_size, cfg.feat_dim, device=dev, dtype=self.dtype))
                           for n in self.prefill_lengths}
        self.prefill_last = torch.zeros(1, dtype=torch.long, device=dev)

    # -- graph bodies: only static tensors in, static tensors out ------------------------------
    def prefill_body(self, length: int):
        state = self.model.prefill(*self.prefill_in[length], last=self.prefill_last)
        self.lm_hidden.copy_(state.lm_hidden)
        self.residual_hidden.copy_(state.residual_hidden)
        self.prev_patch.copy_(state.prev_patch)

    def dit_body(self):
        time_token = self.time_table.index_select(0, self.k)
        dt = self.dt_table.index_select(0, self.k)
        x = euler_update(self.model.dit, self.x, self.mu_pair, self.cond_pair, time_token, dt, self.cfg_value)
        self.x.copy_(x)
        self.k.add_(1)

    def prologue(self):
        """Condition and starting noise of the next patch."""
        mu = self.model.dit_condition(self.lm_hidden, self.residual_hidden)
        mu_pair, cond_pair = guidance_pair(mu, self.prev_patch)
        self.mu_pair.copy_(mu_pair)
        self.cond_pair.copy_(cond_pair)
        self.x.copy_(self.noise.index_select(0, self.patch_index))
        self.k.copy_(self.k_start)

    def step_body(self, span: int):
        patch = self.patch
        patch.copy_(self.x)  # a static copy: the VAE stream reads it while the next noise lands in x
        n, pd = self.patch_samples, patch.numel()
        self.staging[n : n + pd].copy_(patch[0].T.reshape(-1))
        self.staging[-1:].copy_(self.model.stop_logits(self.lm_hidden).argmax(-1))
        # The VAE decode depends only on this patch: run it on a second stream, beside the LM step.
        self.vae_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.vae_stream):
            frames = patches_to_frames(patch.unsqueeze(1).to(self.vae_dtype))
            self.staging[:n].copy_(self.vae.decode_chunk(frames, self.decoder)[0])
        nxt = self.model.advance(patch, self.position, span)
        self.lm_hidden.copy_(nxt.lm_hidden)
        self.residual_hidden.copy_(nxt.residual_hidden)
        self.prev_patch.copy_(patch)
        self.position.add_(1)
        self.patch_index.add_(1)
        self.prologue()
        torch.cuda.current_stream().wait_stream(self.vae_stream)

    # -- life cycle -------------------------------------------------------------------------------
    @torch.inference_mode()
    def capture(self) -> float:
        """Warms up and captures every graph; returns seconds taken."""
        start = time.perf_counter()
        self.load_schedule(10, 2.0)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        self.position.zero_()
        with torch.cuda.stream(stream):  # compiles, loads kernels and cuBLAS handles outside capture
            for _ in range(2):
                for length in self.prefill_lengths:
                    self.prefill_body(length)
                self.dit_body()
                for span in self.buckets:
                    self.step_body(span)
        torch.cuda.current_stream().wait_stream(stream)
        pool = torch.cuda.graph_pool_handle()
        self.dit_graph = CapturedGraph(self.dit_body, pool, stream)
        self.step_graphs = {span: CapturedGraph(lambda s=span: self.step_body(s), pool, stream)
                            for span in self.buckets}
        self.prefill_graphs = {n: CapturedGraph(lambda n=n: self.prefill_body(n), pool, stream)
                               for n in self.prefill_lengths}
        torch.cuda.synchronize()
        self.graphs_ready = True
        return time.perf_counter() - start

    def load_schedule(self, steps: int, cfg_value: float):
        tokens = self.time_tokens(steps)
        self.dt_table[:steps].copy_(torch.stack([dt for dt, _ in tokens]))
        self.time_table[:steps].copy_(torch.cat([t for _, t in tokens]))
        self.k_start.fill_(zero_velocity_steps(steps))
        self.cfg_value.fill_(cfg_value)

    def start_prefill(self, prompt: Prompt):
        """Replays the prefill graph of the smallest captured length that holds the prompt."""
        n = len(prompt)
        length = next((m for m in self.prefill_lengths if m >= n), None)
        if length is None:  # a very long prompt: eager, which costs launch time only
            state = self.prefill(prompt)
            self.lm_hidden.copy_(state.lm_hidden)
            self.residual_hidden.copy_(state.residual_hidden)
            self.prev_patch.copy_(state.prev_patch)
            return
        sources = (prompt.tokens, prompt.text_mask, prompt.audio_mask, prompt.patches)
        for buf, src in zip(self.prefill_in[length], sources):
            buf.zero_()
            buf[0, :n].copy_(src)
        self.prefill_last.fill_(n - 1)
        self.prefill_graphs[length].replay()

    def start(self, prompt: Prompt, noise: torch.Tensor, cfg_value: float, steps: int):
        """Prefill and load the request into the static buffers."""
        self.start_prefill(prompt)
        # Host-to-device copies of the request (noise, prompt): once per request, before any step.
        self.noise[: len(noise)].copy_(noise.to(self.dtype))
        self.position.fill_(len(prompt))
        self.patch_index.zero_()
        self.load_schedule(steps, cfg_value)
        self.decoder.reset()
        if len(prompt.decode_context):
            context = prompt.decode_context.to(self.device, self.dtype).to(self.vae_dtype)
            self.vae.decode_chunk(patches_to_frames(context.unsqueeze(0)), self.decoder)
        self.prologue()

    def launch(self, i: int, prompt_len: int, steps: int):
        """Enqueue patch i: its Euler steps, its step graph, and the copy of its results."""
        for _ in range(steps - zero_velocity_steps(steps)):
            self.dit_graph.replay()
        self.step_graphs[self.span(prompt_len + i)].replay()
        slot = i % 2
        self.pinned[slot].copy_(self.staging, non_blocking=True)
        self.copied[slot].record()

    def read(self, i: int) -> tuple[np.ndarray, np.ndarray, bool]:
        slot = i % 2
        self.copied[slot].synchronize()  # deliberate sync: patch i's audio, latents and stop flag
        host = self.pinned[slot].numpy()
        n = self.patch_samples
        latents = host[n:-1].reshape(-1, self.model.cfg.patch_size).copy()  # [D, P]
        return host[:n].copy(), latents, bool(host[-1] == 1)

    @torch.inference_mode()
    def run(self, prompt: Prompt, noise: torch.Tensor, cfg_value: float, steps: int,
            min_len: int, max_patches: int) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
        if not self.graphs_ready:
            raise RuntimeError("GraphRunner.capture() must run before requests (Engine.warmup does it)")
        self.start(prompt, noise, cfg_value, steps)
        self.launch(0, len(prompt), steps)
        for i in range(max_patches):
            if i + 1 < max_patches:
                self.launch(i + 1, len(prompt), steps)  # speculative: discarded if patch i stops
            audio, latents, stop = self.read(i)
            yield audio, latents, stop
            if i > min_len and stop:
                return
