"""A tiny random-weight VoxCPM2 checkpoint laid out exactly like openbmb/VoxCPM2.

Used by the golden parity tests (the official package loads the same files) and by the app's
`--random-weights` mode. It must not import the official package: the app ships without it.
Tensor names and shapes mirror the official modules; tests/unit/test_golden_parity.py checks that.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from .tiny_tokenizer import vocabulary, write_json, write_tokenizer  # noqa: F401  (re-exported)


def tiny_config(seed: int = 0) -> dict:
    """config.json of the tiny model, in the published schema (factors drawn from `seed`)."""
    gen = torch.Generator().manual_seed(seed + 7919)
    factors = lambda: [round(1.0 + float(x), 4) for x in torch.rand(8, generator=gen)]  # noqa: E731
    small = {"hidden_dim": 32, "ffn_dim": 64, "num_heads": 2, "num_layers": 2, "kv_channels": 16}
    lm = {"bos_token_id": 1, "eos_token_id": 2, "hidden_size": 64, "intermediate_size": 128,
          "max_position_embeddings": 8192, "num_attention_heads": 4, "num_hidden_layers": 2,
          "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_theta": 10000, "kv_channels": 16,
          "rope_scaling": {"type": "longrope", "long_factor": factors(), "short_factor": factors(),
                           "original_max_position_embeddings": 4096},
          "vocab_size": len(vocabulary()[0]), "use_mup": False, "scale_emb": 12,
          "dim_model_base": 256, "scale_depth": 1.4}
    return {
        "architecture": "voxcpm2", "lm_config": lm, "patch_size": 4, "feat_dim": 64,
        "scalar_quantization_latent_dim": 32, "scalar_quantization_scale": 9,
        "residual_lm_num_layers": 2, "residual_lm_no_rope": True,
        "encoder_config": dict(small),
        "dit_config": dict(small, dit_mean_mode=False, cfm_config={
            "sigma_min": 1e-06, "solver": "euler", "t_scheduler": "log-norm", "inference_cfg_rate": 2.0}),
        "audio_vae_config": {"encoder_dim": 8, "encoder_rates": [2, 5, 8, 8], "latent_dim": 64,
                             "decoder_dim": 64, "decoder_rates": [8, 6, 5, 2, 2, 2],
                             "sr_bin_boundaries": [20000, 30000, 40000], "sample_rate": 16000,
                             "out_sample_rate": 48000},
        "max_length": 512, "dtype": "bfloat16",
    }


# ----------------------------------------------------------------------------------------------
# Tensor names and shapes, mirroring the official module tree


def _linear(prefix: str, out_dim: int, in_dim: int, bias: bool = True) -> dict:
    spec = {f"{prefix}.weight": (out_dim, in_dim)}
    if bias:
        spec[f"{prefix}.bias"] = (out_dim,)
    return spec


def _transformer(prefix: str, hidden: int, ffn: int, layers: int, heads: int, kv_heads: int,
                 head_dim: int, vocab: int = 0) -> dict:
    spec = {f"{prefix}.embed_tokens.weight": (vocab, hidden)} if vocab else {}
    for i in range(layers):
        p = f"{prefix}.layers.{i}"
        spec.update(_linear(f"{p}.self_attn.q_proj", heads * head_dim, hidden, bias=False))
        spec.update(_linear(f"{p}.self_attn.k_proj", kv_heads * head_dim, hidden, bias=False))
        spec.update(_linear(f"{p}.self_attn.v_proj", kv_heads * head_dim, hidden, bias=False))
        spec.update(_linear(f"{p}.self_attn.o_proj", hidden, heads * head_dim, bias=False))
        spec.update(_linear(f"{p}.mlp.gate_proj", ffn, hidden, bias=False))
        spec.update(_linear(f"{p}.mlp.up_proj", ffn, hidden, bias=False))
        spec.update(_linear(f"{p}.mlp.down_proj", hidden, ffn, bias=False))
        spec[f"{p}.input_layernorm.weight"] = (hidden,)
        spec[f"{p}.post_attention_layernorm.weight"] = (hidden,)
    spec[f"{prefix}.norm.weight"] = (hidden,)
    return spec


def model_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of model.safetensors (everything but the VAE), name -> shape."""
    lm, enc, dit = cfg["lm_config"], cfg["encoder_config"], cfg["dit_config"]
    h, feat, fsq = lm["hidden_size"], cfg["feat_dim"], cfg["scalar_quantization_latent_dim"]
    kv, lm_head = lm["num_key_value_heads"], lm.get("kv_channels") or h // lm["num_attention_heads"]

    def local(prefix: str, c: dict) -> dict:
        # LocEnc and LocDiT copy the LM config, so they keep its number of KV heads.
        head = c.get("kv_channels") or c["hidden_dim"] // c["num_heads"]
        return _transformer(prefix, c["hidden_dim"], c["ffn_dim"], c["num_layers"], c["num_heads"], kv, head)

    spec = _transformer("base_lm", h, lm["intermediate_size"], lm["num_hidden_layers"],
                        lm["num_attention_heads"], kv, lm_head, lm["vocab_size"])
    spec.update(_transformer("residual_lm", h, lm["intermediate_size"], cfg["residual_lm_num_layers"],
                             lm["num_attention_heads"], kv, lm_head))
    he, hd = enc["hidden_dim"], dit["hidden_dim"]
    spec["feat_encoder.special_token"] = (1, 1, 1, he)
    spec.update(_linear("feat_encoder.in_proj", he, feat))
    spec.update(local("feat_encoder.encoder", enc))
    est = "feat_decoder.estimator"
    spec.update(_linear(f"{est}.in_proj", hd, feat))
    spec.update(_linear(f"{est}.cond_proj", hd, feat))
    spec.update(_linear(f"{est}.out_proj", feat, hd))
    for mlp in ("time_mlp", "delta_time_mlp"):
        spec.update(_linear(f"{est}.{mlp}.linear_1", hd, hd))
        spec.update(_linear(f"{est}.{mlp}.linear_2", hd, hd))
    spec.update(local(f"{est}.decoder", dit))
    spec.update(_linear("fsq_layer.in_proj", fsq, h))
    spec.update(_linear("fsq_layer.out_proj", h, fsq))
    spec.update(_linear("enc_to_lm_proj", h, he))
    spec.update(_linear("lm_to_dit_proj", hd, h))
    spec.update(_linear("res_to_dit_proj", hd, h))
    spec.update(_linear("fusion_concat_proj", h, 2 * h))
    spec.update(_linear("stop_proj", h, h))
    spec.update(_linear("stop_head", 2, h, bias=False))
    return spec


def _wn_conv(prefix: str, out_ch: int, in_ch: int, kernel: int, groups: int = 1, transpose=False) -> dict:
    # Old-style weight norm (dim 0): g has one entry per row of the stored weight.
    weight = (in_ch, out_ch // groups, kernel) if transpose else (out_ch, in_ch // groups, kernel)
    return {f"{prefix}.bias": (out_ch,), f"{prefix}.weight_g": (weight[0], 1, 1), f"{prefix}.weight_v": weight}


def _residual_unit(prefix: str, dim: int, groups: int) -> dict:
    spec = {f"{prefix}.block.0.alpha": (1, dim, 1), f"{prefix}.block.2.alpha": (1, dim, 1)}
    spec.update(_wn_conv(f"{prefix}.block.1", dim, dim, 7, groups))
    spec.update(_wn_conv(f"{prefix}.block.3", dim, dim, 1))
    return spec


def vae_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of audiovae.pth (depthwise, scale_bias sample-rate conditioning)."""
    vae = cfg["audio_vae_config"]
    assert vae.get("depthwise", True), "the tiny writer only lays out the depthwise VAE"
    d = vae["encoder_dim"]
    spec = _wn_conv("encoder.block.0", d, 1, 7)
    for i, stride in enumerate(vae["encoder_rates"], start=1):
        p = f"encoder.block.{i}.block"
        for j in range(3):
            spec.update(_residual_unit(f"{p}.{j}", d, groups=d))
        spec[f"{p}.3.alpha"] = (1, d, 1)
        spec.update(_wn_conv(f"{p}.4", 2 * d, d, 2 * stride))
        d *= 2
    spec.update(_wn_conv("encoder.fc_mu", vae["latent_dim"], d, 3))
    spec.update(_wn_conv("encoder.fc_logvar", vae["latent_dim"], d, 3))
    latent, ch = vae["latent_dim"], vae["decoder_dim"]
    spec.update(_wn_conv("decoder.model.0", latent, latent, 7, groups=latent))
    spec.update(_wn_conv("decoder.model.1", ch, latent, 1))
    buckets = len(vae["sr_bin_boundaries"]) + 1
    for i, stride in enumerate(vae["decoder_rates"]):
        n, p = i + 2, f"decoder.model.{i + 2}.block"
        cin, cout = ch // 2 ** i, ch // 2 ** (i + 1)
        spec[f"{p}.0.alpha"] = (1, cin, 1)
        spec.update(_wn_conv(f"{p}.1", cout, cin, 2 * stride, transpose=True))
        for j in range(3):
            spec.update(_residual_unit(f"{p}.{j + 2}", cout, groups=cout))
        spec[f"decoder.sr_cond_model.{n}.scale_embed.weight"] = (buckets, cin)
        spec[f"decoder.sr_cond_model.{n}.bias_embed.weight"] = (buckets, cin)
    last = len(vae["decoder_rates"]) + 2
    spec[f"decoder.model.{last}.alpha"] = (1, cout, 1)
    spec.update(_wn_conv(f"decoder.model.{last + 1}", 1, cout, 7))
    spec["decoder.sr_bin_boundaries"] = (buckets - 1,)
    return spec


# ----------------------------------------------------------------------------------------------
# Values


def _gain(name: str) -> float:
    """Output-scale of each weight family, picked so activations stay O(1) without saturating."""
    if "fsq_layer.in_proj" in name:
        return 0.6  # tanh input std ~0.6: quantised values spread over several levels
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 0.5  # keeps the residual stream from doubling per layer
    if "stop_head" in name:
        return 4.0  # clear margins, so the stop decision is not a numerical coin toss
    return 1.0


_RESIDUAL_CONV = re.compile(r"\.block\.\d+\.block\.[13]\.weight_g$")


def _vae_value(name: str, shape: tuple, gen: torch.Generator, output_conv: str) -> torch.Tensor:
    randn = lambda s=shape: torch.randn(s, generator=gen)  # noqa: E731
    if name.endswith("alpha"):
        return (1.0 + 0.2 * randn()).clamp(0.5, 1.5)
    if name.endswith("weight_g"):
        # g is the norm of each filter row: about 1 keeps the variance; residual branches smaller.
        base = 0.5 if _RESIDUAL_CONV.search(name) else 1.0
        if name.startswith(output_conv):
            base = 0.3  # the output tanh: keep speech-like levels well inside its linear range
        return base * (1.0 + 0.1 * randn()).abs()
    if name.endswith("weight_v"):
        return randn()
    if "scale_embed" in name:
        return 1.0 + 0.1 * randn()
    return 0.05 * randn()  # conv biases, bias_embed


def _model_value(name: str, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    randn = lambda: torch.randn(shape, generator=gen)  # noqa: E731
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * randn()
    if name.endswith(("embed_tokens.weight", "special_token")):
        return randn()
    if name.endswith(".bias"):
        return 0.1 * randn()
    return randn() * (_gain(name) / math.sqrt(shape[-1]))


def _lean_stop_head(model: dict, scale: int, gen: torch.Generator, target: float = -1.1) -> None:
    """Shift the stop head so its logit margin averages `target` over random FSQ'd LM states.

    Left alone, a random stop head tends to either always or never fire. Leaning it towards
    "continue" makes stopping an occasional event that depends on the generated audio. Real
    generation states are correlated, so the estimate is off by a unit or two and depends on the
    seed: -1.1 is what makes seed 0 (the golden checkpoint) stop after 4 to ~16 patches.
    """
    f, m = torch.nn.functional, model
    x = torch.randn(4096, m["fsq_layer.in_proj.weight"].shape[1], generator=gen)
    q = torch.tanh(f.linear(x, m["fsq_layer.in_proj.weight"], m["fsq_layer.in_proj.bias"]))
    h = f.linear(torch.round(q * scale) / scale, m["fsq_layer.out_proj.weight"], m["fsq_layer.out_proj.bias"])
    s = f.silu(f.linear(h, m["stop_proj.weight"], m["stop_proj.bias"]))
    w = model["stop_head.weight"]
    margin = s @ (w[1] - w[0])
    w[0] += (margin.mean() - target) / s.sum(dim=1).mean()


def random_state_dicts(cfg: dict, seed: int = 0) -> tuple[dict, dict]:
    """(model state dict, VAE state dict) in float32, a pure function of (cfg, seed)."""
    gen = torch.Generator().manual_seed(seed)
    model = {k: _model_value(k, s, gen) for k, s in model_tensor_shapes(cfg).items()}
    _lean_stop_head(model, cfg["scalar_quantization_scale"], gen)
    vae_cfg = cfg["audio_vae_config"]
    output_conv = f"decoder.model.{len(vae_cfg['decoder_rates']) + 3}."  # the conv feeding the final tanh
    vae = {}
    for name, shape in vae_tensor_shapes(cfg).items():
        if name == "decoder.sr_bin_boundaries":
            vae[name] = torch.tensor(vae_cfg["sr_bin_boundaries"], dtype=torch.int32)
        else:
            vae[name] = _vae_value(name, shape, gen, output_conv)
    return model, vae


def write_tiny_checkpoint(path, *, seed: int = 0, model_format: str = "safetensors",
                          vae_format: str = "pth", dtype: torch.dtype = torch.float32,
                          fast_vae: bool = False, never_stops: bool = False) -> Path:
    """Write config, weights, VAE and tokenizer of the tiny model into `path`; returns it.

    `dtype` applies to model weights only; the VAE is stored in float32, as published.
    `fast_vae` gives the VAE decoder two wide upsampling blocks on 8 channels instead of six on
    64 (the same 1,920 samples per frame), about 10x faster on a CPU, for tests that decode
    thousands of patches; `never_stops` makes the stop head say "continue" whatever the state: every
    utterance runs to its cap.
    """
    from safetensors.torch import save_file

    if model_format not in ("safetensors", "bin") or vae_format not in ("pth", "pth-plain", "safetensors"):
        raise ValueError(f"unknown format: model {model_format!r}, vae {vae_format!r}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(out)
    cfg = tiny_config(seed)
    assert cfg["lm_config"]["vocab_size"] == vocab_size
    if fast_vae:
        cfg["audio_vae_config"].update(decoder_dim=8, decoder_rates=[40, 48])
    write_json(out / "config.json", cfg)
    model, vae = random_state_dicts(cfg, seed)
    if never_stops:  # a constant stop_proj output, and a head that always prefers "continue"
        model["stop_proj.weight"].zero_()
        model["stop_proj.bias"].fill_(1.0)
        model["stop_head.weight"][0], model["stop_head.weight"][1] = 1.0, -1.0
    model = {k: v.to(dtype).contiguous() for k, v in model.items()}
    for stale in ("model.safetensors", "pytorch_model.bin", "audiovae.pth", "audiovae.safetensors"):
        (out / stale).unlink(missing_ok=True)  # the official loader would prefer a leftover safetensors
    if model_format == "safetensors":
        save_file(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    else:
        torch.save(model, out / "pytorch_model.bin")
    if vae_format == "safetensors":
        save_file(vae, str(out / "audiovae.safetensors"), metadata={"format": "pt"})
    else:
        torch.save({"state_dict": vae} if vae_format == "pth" else vae, out / "audiovae.pth")
    return out
