"""AudioVAE V2: the causal convolutional codec between 16 kHz audio, 64-dim latents and 48 kHz audio.

Module and parameter names follow the official checkpoint once its weight norm is folded
(`checkpoint.fold_weight_norm`), so `load_state_dict(..., strict=True)` catches any missing or misnamed key.

Every convolution is causal (zero padding on the left only), so the decoder can stream: a
`DecoderState` keeps, per request, the left context each convolution would otherwise read from the
zero padding. Decoding chunk by chunk with one state equals decoding the whole sequence at once.

A decoder layer computes in two forms: `forward`, the reference convolutions (`decode`, parity with
the official model), and `stream`, vae_stream.py's channels-last form that `decode_chunk` runs
(on CUDA, the Triton kernels of vae_kernel_stream.py do the same work).
"""
from __future__ import annotations

from bisect import bisect_left

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import VAEConfig
from .vae_stream import ChunkContext, DecoderState, compiled, conv_precision, dense, depthwise, snake, upsample

RESIDUAL_DILATIONS = (1, 3, 9)


class Snake1d(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        return snake(x, self.alpha)

    def stream(self, x: Tensor, state: ChunkContext) -> Tensor:
        return snake(x, self.alpha.view(-1))


class Tanh(nn.Module):
    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        return torch.tanh(x)

    stream = forward


class CausalConv1d(nn.Conv1d):
    """Conv1d with `left_pad` zeros in front, or, when streaming, the previous inputs instead."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1,
                 groups: int = 1, left_pad: int | None = None):
        super().__init__(cin, cout, kernel, stride=stride, dilation=dilation, groups=groups)
        self.left_pad = (kernel - 1) * dilation if left_pad is None else left_pad
        self.slot = -1  # index into DecoderState.buffers; only decoder convs get one

    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        if self.left_pad == 0:
            return self._conv_forward(x, self.weight, self.bias)
        if state is None:
            return self._conv_forward(F.pad(x, (self.left_pad, 0)), self.weight, self.bias)
        return self._conv_forward(state.extend(self.slot, x), self.weight, self.bias)

    def stream(self, x: Tensor, state: ChunkContext) -> Tensor:
        """[rows, T, Cin] -> [rows, T, Cout]: decoder convolutions only (stride 1)."""
        full = x if self.left_pad == 0 else state.extend(self.slot, x)
        if self.groups == 1:
            return dense(full, self.weight, self.bias, self.dilation[0])
        return depthwise(full, self.weight, self.bias, self.dilation[0])


class CausalConvTranspose1d(nn.ConvTranspose1d):
    """Upsampling by `stride` with kernel 2*stride: output frame t mixes input frames t and t-1.

    The full transposed convolution yields one frame too many at the end; the causal form drops it.
    Streaming prepends the previous chunk's last input frame and drops its output frame too.
    """

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__(cin, cout, 2 * stride, stride=stride)
        self.slot = -1

    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        hop = self.stride[0]
        if state is None:
            return F.conv_transpose1d(x, self.weight, self.bias, stride=hop)[..., :-hop]
        return F.conv_transpose1d(state.extend(self.slot, x), self.weight, self.bias, stride=hop)[..., hop:-hop]

    def stream(self, x: Tensor, state: ChunkContext) -> Tensor:
        return upsample(state.extend(self.slot, x), self.weight, self.bias, self.stride[0])


class Chain(nn.Sequential):
    """nn.Sequential whose layers all take the streaming state along."""

    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        for layer in self:
            x = layer(x, state)
        return x

    def stream(self, x: Tensor, state: ChunkContext) -> Tensor:
        for layer in self:
            x = layer.stream(x, state)
        return x


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int, groups: int):
        super().__init__()
        self.block = Chain(Snake1d(dim), CausalConv1d(dim, dim, 7, dilation=dilation, groups=groups),
                           Snake1d(dim), CausalConv1d(dim, dim, 1))

    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        return x + self.block(x, state)

    def stream(self, x: Tensor, state: ChunkContext) -> Tensor:
        return x + self.block.stream(x, state)


def residual_units(dim: int, groups: int) -> list[nn.Module]:
    return [ResidualUnit(dim, d, groups) for d in RESIDUAL_DILATIONS]


class EncoderBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        # The official padding arithmetic (2*ceil(s/2) - s%2) always comes to s zeros on the left.
        down = CausalConv1d(cin, cout, 2 * stride, stride=stride, left_pad=stride)
        self.block = Chain(*residual_units(cin, groups), Snake1d(cin), down)

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class Encoder(nn.Module):
    def __init__(self, cfg: VAEConfig):
        super().__init__()
        dim = cfg.encoder_dim
        layers = [CausalConv1d(1, dim, 7)]
        for stride in cfg.encoder_rates:
            layers.append(EncoderBlock(dim, 2 * dim, stride, dim if cfg.depthwise else 1))
            dim *= 2
        self.block = nn.Sequential(*layers)
        self.fc_mu = CausalConv1d(dim, cfg.latent_dim, 3)
        # Never used at inference; kept so that the checkpoint loads with a strict key check.
        self.fc_logvar = CausalConv1d(dim, cfg.latent_dim, 3)

    def forward(self, audio: Tensor) -> Tensor:
        return self.fc_mu(self.block(audio))


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.block = Chain(Snake1d(cin), CausalConvTranspose1d(cin, cout, stride), *residual_units(cout, groups))
        self.input_channels = cin

    def forward(self, x: Tensor, state: DecoderState | None = None) -> Tensor:
        return self.block(x, state)

    def stream(self, x: Tensor, state: ChunkContext) -> Tensor:
        return self.block.stream(x, state)


class SampleRateCondition(nn.Module):
    """Per-channel scale and bias chosen by the output sample-rate bucket, before a decoder block."""

    def __init__(self, dim: int, buckets: int, bucket: int):
        super().__init__()
        self.scale_embed = nn.Embedding(buckets, dim)
        self.bias_embed = nn.Embedding(buckets, dim)
        # The bucket is fixed by the config, so a Python int selects the row: no index tensor to
        # build or upload per call, and the row is a view a CUDA graph can read in place.
        self.bucket = bucket

    def weights(self) -> tuple[Tensor, Tensor]:
        """This bucket's scale and bias, [dim] each (views of the embeddings)."""
        return self.scale_embed.weight[self.bucket], self.bias_embed.weight[self.bucket]

    def forward(self, x: Tensor, channels_last: bool = False) -> Tensor:
        scale, bias = self.weights()
        if channels_last:
            return x * scale + bias
        return x * scale.unsqueeze(-1) + bias.unsqueeze(-1)


class Decoder(nn.Module):
    def __init__(self, cfg: VAEConfig):
        super().__init__()
        latent, dim = cfg.latent_dim, cfg.decoder_dim
        if cfg.depthwise:
            layers = [CausalConv1d(latent, latent, 7, groups=latent), CausalConv1d(latent, dim, 1)]
        else:
            layers = [CausalConv1d(latent, dim, 7)]
        for i, stride in enumerate(cfg.decoder_rates):
            cin, cout = dim >> i, dim >> (i + 1)
            layers.append(DecoderBlock(cin, cout, stride, cout if cfg.depthwise else 1))
        layers += [Snake1d(cout), CausalConv1d(cout, 1, 7), Tanh()]
        self.model = nn.ModuleList(layers)
        self.sr_cond_model = None
        if cfg.sr_bin_boundaries is not None:
            self._add_sample_rate_condition(cfg.sr_bin_boundaries, cfg.out_sample_rate)
        self.state_shapes = self._assign_state_slots()
        self.depthwise = cfg.depthwise
        # decode_chunk's `stream`, eager or fast: unbound, so that a deep copy uses its own weights.
        self.stream_impl = Decoder.stream

    def compile_stream(self, enabled: bool = True, kernels: bool = True, split_blocks: int | None = None) -> None:
        """The fast `stream` for CUDA, which the engine turns on: the Triton kernels (depthwise decoders;
        split_blocks: see KernelStream), else (or kernels=False) torch.compile of `stream`; enabled=False: eager."""
        self.stream_impl = compiled(Decoder.stream) if enabled else Decoder.stream
        if enabled and kernels and self.depthwise:
            from . import vae_kernel_stream  # imports Triton, which a CPU-only install may lack
            self.stream_impl = vae_kernel_stream.KernelStream(split_blocks)

    def _add_sample_rate_condition(self, boundaries: tuple[int, ...], out_rate: int) -> None:
        self.register_buffer("sr_bin_boundaries", torch.tensor(boundaries, dtype=torch.int32))
        # bisect_left is torch.bucketize(right=False): boundaries[i-1] < rate <= boundaries[i].
        bucket = bisect_left(sorted(boundaries), out_rate)
        # None entries keep the official numbering: condition i sits in front of model layer i.
        self.sr_cond_model = nn.ModuleList(SampleRateCondition(layer.input_channels, len(boundaries) + 1, bucket)
                                           if isinstance(layer, DecoderBlock) else None for layer in self.model)

    def _assign_state_slots(self) -> list[tuple[int, int]]:
        """Number the stateful convolutions; return each one's (channels, context samples)."""
        shapes = []
        for module in self.modules():
            if isinstance(module, CausalConvTranspose1d):
                context = 1
            elif isinstance(module, CausalConv1d) and module.left_pad > 0:
                context = module.left_pad
            else:
                continue
            module.slot = len(shapes)
            shapes.append((module.in_channels, context))
        return shapes

    def forward(self, z: Tensor, state: DecoderState | None = None, streaming: bool = False) -> Tensor:
        x = z
        for i, layer in enumerate(self.model):
            if self.sr_cond_model is not None and self.sr_cond_model[i] is not None:
                x = self.sr_cond_model[i](x, channels_last=streaming)
            x = layer.stream(x, state) if streaming else layer(x, state)
        return x

    def stream(self, z: Tensor, root: Tensor, rows: Tensor) -> Tensor:
        """z [B, F, latent] (channels-last) -> [B, F * hop]: continues the streams whose states
        are rows `rows` [B] of `root` (a DecoderState's), and updates those in place."""
        state = ChunkContext(root.index_select(0, rows), self.state_shapes)
        x = self(z, state, streaming=True)
        root.index_copy_(0, rows, state.updated())
        return x.squeeze(-1)


class AudioVAE(nn.Module):
    """Encoder (16 kHz audio to latents) and streaming decoder (latents to 48 kHz audio).

    The official model runs in float32; `.to(dtype)` works, and the inputs and a state must then
    have that dtype too.
    """

    def __init__(self, cfg: VAEConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def encode(self, audio: Tensor) -> Tensor:
        """[B, T] audio at cfg.sample_rate, T a multiple of encode_hop -> [B, latent, T / hop]."""
        if audio.shape[-1] % self.cfg.encode_hop:
            raise ValueError(f"audio length {audio.shape[-1]} is not a multiple of {self.cfg.encode_hop}")
        return self.encoder(audio.unsqueeze(1))

    def decode(self, z: Tensor, state: DecoderState | None = None) -> Tensor:
        """[B, latent, F] -> [B, F * decode_hop] audio at cfg.out_sample_rate, from silence, or
        continuing the reference convolutions from `state` (updated in place)."""
        return self.decoder(z, state).squeeze(1)

    def new_decoder_state(self, batch: int = 1, device=None, dtype=None) -> DecoderState:
        """A zeroed state (the same as the causal zero padding) for `batch` rows, one stream each."""
        weight = self.decoder.model[0].weight
        root = torch.zeros(batch, self.decoder_state_numel(), device=device or weight.device, dtype=dtype or weight.dtype)
        return DecoderState(root, self.decoder.state_shapes)

    def decoder_state_numel(self) -> int:
        """Numbers of context one stream carries between chunks."""
        return sum(channels * context for channels, context in self.decoder.state_shapes)

    def decode_chunk(self, z_chunk: Tensor, state: DecoderState) -> Tensor:
        """Decode the next frames of a stream: [B, latent, F] -> [B, F * decode_hop].

        Consecutive chunks through one state give exactly the `decode` of their concatenation.
        """
        if z_chunk.shape[0] != state.flat.shape[0]:
            raise ValueError(f"chunk batch {z_chunk.shape[0]} != state batch {state.flat.shape[0]}")
        # A new tensor, not a view: what the compiled function is given stays the same kind of
        # input whatever the caller sliced it from (no guards on the base, no recompiles).
        z = z_chunk.transpose(1, 2).clone(memory_format=torch.contiguous_format)
        torch._dynamo.mark_static(state.root)  # its size is fixed: never mistaken for the rows' count
        with conv_precision():
            return self.decoder.stream_impl(self.decoder, z, state.root, state.row_ids())
