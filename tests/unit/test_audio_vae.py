"""AudioVAE port: weight-norm folding, parity with the official V2 model, and streaming decode."""
import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from inference.model.audio_vae import AudioVAE
from inference.model.checkpoint import fold_weight_norm
from inference.model.config import VAEConfig

TINY = VAEConfig(
    encoder_dim=8, encoder_rates=(2, 5, 8, 8), latent_dim=64, decoder_dim=64,
    decoder_rates=(8, 6, 5, 2, 2, 2), depthwise=True, sample_rate=16000, out_sample_rate=48000,
    sr_bin_boundaries=(20000, 30000, 40000),
)
FRAMES = 12


def official_module():
    """Load the official audio_vae_v2.py by path: the package's __init__ needs torchaudio."""
    spec = importlib.util.find_spec("voxcpm")
    if spec is None:
        pytest.skip("the official voxcpm package is not installed")
    path = Path(spec.submodule_search_locations[0]) / "modules" / "audiovae" / "audio_vae_v2.py"
    module_spec = importlib.util.spec_from_file_location("official_audio_vae_v2", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def randomize(model: nn.Module, seed: int = 0) -> None:
    """Random weights everywhere, scaled so that activations neither vanish nor saturate the tanh."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("alpha") or name.endswith("scale_embed.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("weight_g"):
                p.copy_(0.5 + 0.5 * torch.rand(p.shape, generator=gen))
            elif name.endswith("weight_v"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.01 * torch.randn(p.shape, generator=gen))


@pytest.fixture(scope="module")
def official():
    ref = official_module()
    cfg = ref.AudioVAEConfig(**{k: list(v) if isinstance(v, tuple) else v for k, v in vars(TINY).items()})
    model = ref.AudioVAE(cfg).eval()
    randomize(model)
    return model


@pytest.fixture(scope="module")
def ours(official):
    model = AudioVAE(TINY).eval()
    model.load_state_dict(fold_weight_norm(official.state_dict()), strict=True)
    return model


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def latents(seed: int, frames: int = FRAMES, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(2, TINY.latent_dim, frames, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_activations_are_not_trivial(official):
    with torch.no_grad():
        audio = official.decode(latents(0)).squeeze(1)
        mu = official.encode(torch.randn(2, 4 * TINY.encode_hop), TINY.sample_rate)
    # The two rows' latents differ, so their outputs must too: the input has to matter.
    assert (audio[0] - audio[1]).std() > 0.1 and (mu[0] - mu[1]).std() > 0.1
    assert (audio.abs() > 0.99).float().mean() < 0.1


def test_encode_matches_official(official, ours):
    audio = torch.randn(2, 4 * TINY.encode_hop, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = official.encode(audio, TINY.sample_rate)
        got = ours.encode(audio)
    assert got.shape == (2, TINY.latent_dim, 4)
    assert rel_err(got, expected) < 1e-5


def test_decode_matches_official(official, ours):
    z = latents(2)
    with torch.no_grad():
        expected = official.decode(z).squeeze(1)
        got = ours.decode(z)
    assert got.shape == (2, FRAMES * TINY.decode_hop)
    assert rel_err(got, expected) < 1e-5


def stream(model: AudioVAE, z: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    state = model.new_decoder_state(batch=z.shape[0])
    bounds = torch.tensor([0] + sizes).cumsum(0).tolist()
    assert bounds[-1] == z.shape[-1]
    return torch.cat([model.decode_chunk(z[..., a:b], state) for a, b in zip(bounds, bounds[1:])], dim=-1)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("sizes", [[4, 4, 4], [1, 3, 4, 1, 3], [1] * FRAMES, [5, 7]])
def test_streamed_decode_equals_whole(ours, dtype, tol, sizes):
    model = AudioVAE(TINY).to(dtype).eval()
    model.load_state_dict(ours.state_dict())
    z = latents(3, dtype=dtype)
    with torch.no_grad():
        assert rel_err(stream(model, z, sizes), model.decode(z)) < tol


def test_interleaved_states_are_independent(ours):
    za, zb = latents(4), latents(5)
    with torch.no_grad():
        alone_a, alone_b = stream(ours, za, [4, 4, 4]), stream(ours, zb, [4, 4, 4])
        sa, sb = ours.new_decoder_state(2), ours.new_decoder_state(2)
        out_a, out_b = [], []
        for i in range(0, FRAMES, 4):
            out_a.append(ours.decode_chunk(za[..., i:i + 4], sa))
            out_b.append(ours.decode_chunk(zb[..., i:i + 4], sb))
    assert torch.equal(torch.cat(out_a, -1), alone_a)
    assert torch.equal(torch.cat(out_b, -1), alone_b)


def test_reset_restarts_the_stream(ours):
    z = latents(6)
    with torch.no_grad():
        state = ours.new_decoder_state(2)
        first = ours.decode_chunk(z, state)
        state.reset()
        assert torch.equal(ours.decode_chunk(z, state), first)


def test_state_tensors_are_updated_in_place(ours):
    state = ours.new_decoder_state(2)
    pointers = [buf.data_ptr() for buf in state.buffers]
    with torch.no_grad():
        ours.decode_chunk(latents(7, frames=4), state)
    assert [buf.data_ptr() for buf in state.buffers] == pointers
    assert all(buf.abs().sum() > 0 for buf in state.buffers)


def test_missing_or_renamed_key_is_named(official):
    folded = fold_weight_norm(official.state_dict())
    missing = dict(folded)
    del missing["decoder.model.3.block.1.weight"]
    with pytest.raises(RuntimeError, match=r"decoder\.model\.3\.block\.1\.weight"):
        AudioVAE(TINY).load_state_dict(missing, strict=True)
    renamed = dict(folded)
    renamed["encoder.fc_sigma.weight"] = renamed.pop("encoder.fc_logvar.weight")
    with pytest.raises(RuntimeError, match=r"encoder\.fc_sigma\.weight"):
        AudioVAE(TINY).load_state_dict(renamed, strict=True)


def test_without_sample_rate_condition_matches_official():
    ref = official_module()
    cfg = VAEConfig(**{**vars(TINY), "sr_bin_boundaries": None, "depthwise": False, "decoder_dim": 128})
    official = ref.AudioVAE(ref.AudioVAEConfig(**{k: list(v) if isinstance(v, tuple) else v
                                                 for k, v in vars(cfg).items()})).eval()
    randomize(official, seed=9)
    ours = AudioVAE(cfg).eval()
    ours.load_state_dict(fold_weight_norm(official.state_dict()), strict=True)
    z = latents(8, frames=4)
    with torch.no_grad():
        assert rel_err(ours.decode(z), official.decode(z).squeeze(1)) < 1e-5
