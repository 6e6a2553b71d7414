"""--asr-model takes a CTranslate2 Whisper folder (faster-whisper's format) as well as a
transformers one (inference/analysis/ctranslate2_whisper.py): its model.bin read from the
documented layout, converted once, and loaded by the app's own loader. Checked on a tiny made-up
folder written in that layout from the tests' tiny random Whisper: the converted model must compute
what the original computes."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from inference.analysis import ctranslate2_whisper as ct2
from inference.analysis.recognition import load_recognizer

from ..fixtures.tiny_ctranslate2 import ALIGNMENT_HEADS, write_model_bin, write_tiny_ctranslate2
from ..fixtures.tiny_whisper import MAX_NEW_TOKENS, write_tiny_whisper

RATE = 16000


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(the CTranslate2 folder, the transformers folder it was written from)"""
    root = tmp_path_factory.mktemp("ct2")
    return write_tiny_ctranslate2(root / "tiny-ct2", root / "tiny-hf"), root / "tiny-hf"


def test_model_bin_is_read_with_names_shapes_types_and_aliases(tmp_path):
    variables = {"a/weight": np.arange(6, dtype=np.float16).reshape(2, 3), "a/num_heads": np.array(4, np.int16),
                 "b/flag": np.array(1, np.int8), "c/ids": np.array([7, 8], np.int32)}
    write_model_bin(tmp_path / "model.bin", variables, {"b/weight": "a/weight"}, spec="SomeSpec")
    spec, found = ct2.read_model_bin(tmp_path / "model.bin")
    assert spec == "SomeSpec"
    assert set(found) == {*variables, "b/weight"}
    for name, value in variables.items():
        assert found[name].dtype == value.dtype and found[name].shape == value.shape
        assert np.array_equal(found[name], value)
    assert np.array_equal(found["b/weight"], variables["a/weight"])


def test_bfloat16_and_quantized_weights_come_back_as_floats(tmp_path):
    bf16 = np.array([1.5, -2.25, 3e-3], np.float32)
    upper = (bf16.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # bfloat16: a float32's upper 16 bits
    assert np.allclose(ct2._array(upper, 5, [3], "x"), bf16, rtol=1e-2)
    weight = np.array([[0.5, -1.0], [2.0, 4.0]], np.float32)
    scale = 127 / np.abs(weight).max(axis=1)  # one per output row, as CTranslate2's int8 stores it
    stored = {"l/weight": np.round(weight * scale[:, None]).astype(np.int8), "l/weight_scale": scale.astype(np.float32)}
    floats = ct2.weights(stored)
    assert set(floats) == {"l/weight"}
    assert np.allclose(floats["l/weight"], weight, atol=0.02)


def test_an_unknown_binary_version_or_a_cut_file_is_refused_with_the_reason(tmp_path):
    write_model_bin(tmp_path / "model.bin", {"a": np.zeros(2, np.float32)}, {}, version=4)
    with pytest.raises(ct2.NotConvertible, match="binary version 4"):
        ct2.read_model_bin(tmp_path / "model.bin")
    write_model_bin(tmp_path / "model.bin", {"a": np.zeros(2, np.float32)}, {})
    data = (tmp_path / "model.bin").read_bytes()
    (tmp_path / "model.bin").write_bytes(data[:-5])
    with pytest.raises(ct2.NotConvertible, match="ends early"):
        ct2.read_model_bin(tmp_path / "model.bin")


def test_a_ctranslate2_folder_is_told_from_a_transformers_one(folders):
    ctranslate2, transformers_folder = folders
    assert ct2.is_ctranslate2_folder(ctranslate2)
    assert not ct2.is_ctranslate2_folder(transformers_folder)


def test_the_converted_model_computes_what_the_original_computes(folders, tmp_path):
    from transformers import WhisperForConditionalGeneration

    ctranslate2, original = folders
    out = ct2.convert(ctranslate2, tmp_path / "converted")
    model, info = WhisperForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    reference = WhisperForConditionalGeneration.from_pretrained(original)
    # The folder holds float16: the reference rounded the same way.
    reference.load_state_dict({k: v.half().float() for k, v in reference.state_dict().items()})
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([[reference.config.decoder_start_token_id, 40, 41, 42]])
    with torch.no_grad():
        got = model.float()(input_features=features, decoder_input_ids=tokens).logits
        want = reference(input_features=features, decoder_input_ids=tokens).logits
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["alignment_heads"] == ALIGNMENT_HEADS, "read from CTranslate2's config.json"
    assert generation["is_multilingual"] is False and generation["no_timestamps_token_id"] == \
        reference.generation_config.no_timestamps_token_id


def test_the_app_loader_converts_once_and_transcribes(folders, tmp_path):
    ctranslate2, original = folders
    recognizer = load_recognizer(str(ctranslate2), "cpu", converted_in=str(tmp_path))
    [made] = list(tmp_path.iterdir())
    written = (made / "model.safetensors").stat().st_mtime_ns
    clip = (np.random.default_rng(1).standard_normal(RATE) * 0.1).astype(np.float32)
    # The tiny model's short outputs (it rarely ends by itself) are a generation setting the
    # original's folder carries and a CTranslate2 folder has no place for.
    recognizer.pipe.model.generation_config.max_new_tokens = MAX_NEW_TOKENS
    assert recognizer.transcribe([clip]) == load_recognizer(str(original), "cpu").transcribe([clip])
    again = load_recognizer(str(ctranslate2), "cpu", converted_in=str(tmp_path))
    assert list(tmp_path.iterdir()) == [made] and (made / "model.safetensors").stat().st_mtime_ns == written
    assert again.pipe.model.generation_config.alignment_heads == ALIGNMENT_HEADS


def test_timestamp_tokens_are_added_where_the_tokenizer_stops_at_notimestamps(tmp_path):
    # A vocabulary as Whisper's: the tokenizer's ids, then 1501 timestamps it does not list.
    from transformers import AutoTokenizer

    source = write_tiny_whisper(tmp_path / "hf")
    notimestamps = AutoTokenizer.from_pretrained(source).convert_tokens_to_ids("<|notimestamps|>")
    ct2.write_tokenizer(source / "tokenizer.json", notimestamps + 1 + ct2.TIMESTAMPS, notimestamps, tmp_path / "out")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.convert_tokens_to_ids("<|0.00|>") == notimestamps + 1
    assert tokenizer.convert_tokens_to_ids("<|30.00|>") == notimestamps + ct2.TIMESTAMPS


def test_a_folder_without_a_whisper_model_says_what_it_lacks(tmp_path):
    (tmp_path / "model.bin").write_bytes(struct.pack("<I", 6))
    with pytest.raises(ct2.NotConvertible, match="no tokenizer.json"):
        ct2.convert(tmp_path, tmp_path / "out")
    write_model_bin(tmp_path / "model.bin", {"a": np.zeros(2, np.float32)}, {}, spec="TransformerSpec")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ct2.NotConvertible, match="TransformerSpec, not a Whisper"):
        ct2.convert(tmp_path, tmp_path / "out")


def test_a_multilingual_vocabulary_gets_languages_tasks_and_transcribes_by_default():
    # Whisper's multilingual token layout: <|startoftranscript|>, the languages, then the tasks.
    specials = {"<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|en|>": 50259, "<|zh|>": 50260,
                "<|translate|>": 50358, "<|transcribe|>": 50359, "<|startofprev|>": 50361, "<|notimestamps|>": 50363}
    config = {"vocab_size": 51865, "decoder_layers": 2, "decoder_attention_heads": 2, "max_target_positions": 448,
              "decoder_start_token_id": 50258, "eos_token_id": 50257, "pad_token_id": 50257, "bos_token_id": 50257}
    generation = ct2.generation_config(config, {}, specials)
    assert generation["is_multilingual"] and generation["lang_to_id"] == {"<|en|>": 50259, "<|zh|>": 50260}
    assert generation["task"] == "transcribe" and generation["task_to_id"]["transcribe"] == 50359
    assert generation["alignment_heads"] == [[1, 0], [1, 1]], "openai-whisper's default: the upper half's heads"
    english_only = ct2.generation_config({**config, "vocab_size": 51864}, {"alignment_heads": [[0, 0]]}, specials)
    assert not english_only["is_multilingual"] and "task" not in english_only and english_only["alignment_heads"] == [[0, 0]]


def test_the_app_converts_into_its_data_folder(tmp_path):
    import app as demo_app

    settings = demo_app.app_settings(demo_app.parse_args(["--data-dir", str(tmp_path)]), "127.0.0.1")
    assert settings.analysis.converted_models == str(tmp_path / "models")


def test_the_docs_install_the_packages_the_tests_install():
    from pathlib import Path

    from bench import whisper_models

    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "speech.md").read_text(encoding="utf-8")
    pinned = (root / "requirements-test.txt").read_text(encoding="utf-8")
    for name, command in whisper_models.INSTALL.items():
        assert command in docs, name
        assert f"python -m bench.whisper_models {name}" in docs
        for package in command.split()[2:]:
            assert package in pinned, package


def test_a_faster_whisper_model_in_the_hugging_face_cache_loads_by_its_hub_id(folders, tmp_path, monkeypatch):
    # As `hf download Systran/faster-whisper-base` leaves it: blobs, a snapshot of links, refs/main.
    import shutil

    import huggingface_hub.constants

    ctranslate2, _ = folders
    repo = tmp_path / "hub" / "models--someone--faster-whisper-tiny"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "blobs").mkdir()
    for path in ctranslate2.iterdir():
        blob = repo / "blobs" / path.name
        shutil.copy(path, blob)
        (snapshot / path.name).symlink_to(blob)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    recognizer = load_recognizer("someone/faster-whisper-tiny", "cpu", converted_in=str(tmp_path / "models"))
    assert recognizer.pipe.model.generation_config.alignment_heads == ALIGNMENT_HEADS
    assert [p.name.startswith("someone--faster-whisper-tiny-0123abcd-") for p in (tmp_path / "models").iterdir()] == [True]


def test_the_loader_says_what_a_ctranslate2_folder_lacks(tmp_path):
    from inference.analysis.loading import Unusable, load_failure
    from inference.analysis.recognition import KIND

    write_model_bin(tmp_path / "model.bin", {"a": np.zeros(2, np.float32)}, {})
    with pytest.raises(Unusable) as refused:
        load_recognizer(str(tmp_path), "cpu", converted_in=str(tmp_path / "models"))
    said = load_failure(KIND.what, str(tmp_path), refused.value, KIND.fix)
    assert "has no tokenizer.json" in said and "faster-whisper" in said
