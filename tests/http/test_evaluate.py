"""POST /voxcpm/evaluate over HTTP, with a tiny random Whisper and a tiny random WavLM x-vector written
in the official layouts and loaded by the app's own code (--asr-model / --speaker-model FOLDER): the
scores are what the models and the standard definitions give (the transcript as transformers'
pipeline makes it, WER from jiwer over normalized text, similarity the cosine of the models'
embeddings), made in the analysis process, never on the engine's worker thread, per segment; bad
input gets a 400 saying why; a model that is off or cannot be loaded comes back as "not
available" with the reason, at once."""
from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from inference.analysis.process import Analysis
from inference.analysis.recognition import load_recognizer
from inference.analysis.scores import normalize
from inference.config import AnalysisSettings

from ..fixtures import analysis_stand_ins
from ..fixtures.tiny_wavlm import write_tiny_wavlm
from ..fixtures.tiny_whisper import write_tiny_whisper
from ..support.app_helpers import state_swapped, wait_until

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "voices"
TAKE, VOICE = (ASSETS / "guide_en.wav").read_bytes(), (ASSETS / "narrator_en.wav").read_bytes()
TEXT = "Hello world, the voice is here."


def samples(data: bytes) -> np.ndarray:
    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    assert rate == 16000, "the assets are at the models' rate: nothing to resample in the oracle"
    return audio


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[str, str]:
    return (str(write_tiny_whisper(tmp_path_factory.mktemp("whisper"))),
            str(write_tiny_wavlm(tmp_path_factory.mktemp("wavlm"))))


@pytest.fixture(scope="module")
def app(serve_app, models):
    return serve_app(recognizer=models[0], speaker=models[1])


@pytest.fixture(scope="module")
def oracle(models):
    """The same checkpoints through transformers directly: what the route must answer."""
    import torch
    from transformers import AutoFeatureExtractor, WavLMForXVector
    from transformers.pipelines import pipeline

    asr = pipeline("automatic-speech-recognition", model=models[0], device="cpu")
    features, xvector = AutoFeatureExtractor.from_pretrained(models[1]), WavLMForXVector.from_pretrained(models[1]).eval()

    def embed(audio):
        with torch.inference_mode():
            return xvector(**features(audio, sampling_rate=16000, return_tensors="pt")).embeddings[0]
    return {"words": lambda audio: asr({"raw": audio, "sampling_rate": 16000}, return_timestamps="word"),
            "similarity": lambda a, b: float(torch.nn.functional.cosine_similarity(embed(a), embed(b), dim=0))}


def evaluate(client, take: bytes = TAKE, **fields):
    files = {"file": ("take.wav", take, "audio/wav")}
    for name in ("reference",):
        if name in fields:
            files[name] = ("clip.wav", fields.pop(name), "audio/wav")
    return client.post("/voxcpm/evaluate", files=files, data=fields)


def test_a_take_gets_the_models_transcript_its_wer_and_its_similarity_to_the_clip(app, client, oracle):
    import jiwer

    calls = []
    real = app.worker.call
    with state_swapped(app.worker, "call", lambda fn: (calls.append(fn), real(fn))[1]):
        response = evaluate(client, text=TEXT, reference=VOICE)
    assert response.status_code == 200, response.text
    got = response.json()
    heard = oracle["words"](samples(TAKE))
    want = jiwer.process_words(normalize(TEXT), normalize(heard["text"]) or "")
    words = got["intelligibility"]
    assert words["available"] and words["metric"] == "wer" and words["transcript"] == heard["text"].strip()
    assert words["rate"] == pytest.approx(want.wer, abs=1e-4)
    assert (words["substitutions"], words["deletions"], words["insertions"]) == (want.substitutions, want.deletions, want.insertions)
    times = [m["start"] for m in got["segments"][0]["intelligibility"]["words"] if m["type"] != "missing"]
    assert times == sorted(times) and set(times) <= {round(c["timestamp"][0], 3) for c in heard["chunks"]}, \
        "each heard word is timed where the recognizer put it"
    assert got["similarity"]["available"]
    assert got["similarity"]["score"] == pytest.approx(oracle["similarity"](samples(TAKE), samples(VOICE)), abs=1e-3)
    analysis = app.app.state.ctx.analysis
    assert calls == [] and analysis.pids and os.getpid() not in analysis.pids, \
        "made in the analysis process: nothing ran on the engine's worker"


def test_a_take_longer_than_one_window_is_heard_window_by_window_in_its_own_times(app, client, oracle):
    """Whisper hears 30 s at a time: a 70 s take is three windows, each heard as the pipeline hears
    it alone, its words timed in the take (the window's start added)."""
    audio = np.resize(samples(TAKE), 70 * 16000)
    wav = io.BytesIO()
    sf.write(wav, audio, 16000, format="WAV", subtype="FLOAT")
    response = evaluate(client, wav.getvalue(), text=TEXT)
    assert response.status_code == 200, response.text
    words = response.json()["segments"][0]["intelligibility"]
    from inference.analysis.scores import windows
    spans = windows(audio, 16000, 30.0)
    assert len(spans) == 3
    assert words["transcript"] == " ".join(t for t in (oracle["words"](audio[lo:hi])["text"].strip() for lo, hi in spans) if t)
    times = [w["start"] for w in words["words"] if w["start"] is not None]
    assert max(times) >= spans[2][0] / 16000, "the last window's words are timed after its start in the take"


def test_each_segment_is_scored_on_its_own_and_the_take_over_all_of_them(app, client, oracle):
    audio = samples(TAKE)
    cut = 2.5
    segments = [{"text": "Hello world,", "end_s": cut}, {"text": "the voice is here."}]
    got = evaluate(client, segments=json.dumps(segments), reference=VOICE).json()
    assert [(s["start_s"], s["end_s"]) for s in got["segments"]] == [(0.0, cut), (cut, round(len(audio) / 16000, 3))]
    for s, (lo, hi) in zip(got["segments"], [(0, int(cut * 16000)), (int(cut * 16000), len(audio))]):
        assert s["intelligibility"]["transcript"] == oracle["words"](audio[lo:hi])["text"].strip()
        assert s["similarity"] == pytest.approx(oracle["similarity"](audio[lo:hi], samples(VOICE)), abs=1e-3)
        times = [m["start"] for m in s["intelligibility"]["words"] if m["start"] is not None]
        assert all(s["start_s"] <= t <= s["end_s"] + 0.05 for t in times), "times are in the take, not the segment"
    parts = [s["intelligibility"] for s in got["segments"]]
    errors = sum(p["substitutions"] + p["deletions"] + p["insertions"] for p in parts)
    assert got["intelligibility"]["rate"] == pytest.approx(errors / sum(p["reference_units"] for p in parts), abs=1e-4)
    assert evaluate(client, text="語音合成").json()["intelligibility"]["metric"] == "cer"


def test_the_words_and_their_times_are_the_pipelines_own(app, oracle):
    """The fast path (the encoder's outputs handed to generate(), inference/analysis/recognition.py
    Recognizer.hear) answers what transformers' pipeline(..., return_timestamps="word") does, for a
    take and a clip shorter than it (the alignment must stop where the audio does), alone and
    batched together; and its plain transcripts are the pipeline's, batched too."""
    from transformers.pipelines import pipeline

    recognizer = load_recognizer(app.app.state.ctx.analysis.settings.recognizer, "cpu")
    plain = pipeline("automatic-speech-recognition", model=recognizer.pipe.model.name_or_path, device="cpu")
    clips = [samples(TAKE), samples(VOICE)[:16000 * 2], samples(VOICE)]
    together = recognizer.hear(clips)
    for audio, batched in zip(clips, together):
        alone = recognizer.hear([audio])[0]
        want = oracle["words"](audio)
        assert alone == batched and alone.words == [(c["text"], *c["timestamp"]) for c in want["chunks"]]
        assert max(end for _, _, end in alone.words if end is not None) <= len(audio) / 16000 + 0.02
    assert recognizer.transcribe(clips) == [plain({"raw": a, "sampling_rate": 16000})["text"].strip() for a in clips]


@pytest.mark.parametrize("fields, files, says", [
    ({"text": "hi"}, {}, "no take to evaluate"),
    ({}, None, "no text to score against"),
    ({"text": "?!"}, None, "no words to score"),
    ({"segments": "[{"}, None, "segments must be JSON"),
    ({"segments": json.dumps([{"text": "a", "end_s": 99}, {"text": "b"}])}, None, "segment 1 ends at 99 s"),
    ({"text": "hi", "language": "fr"}, None, "language must be one of auto, en, zh"),
    ({"text": "hi", "speed": "2"}, None, "unknown field 'speed'"),
    ({"text": "hi", "reference_id": "gone", "voice": "x"}, None, "give one reference clip"),
    ({"text": "hi", "reference_id": "gone"}, None, "expired or was never uploaded"),
])
def test_bad_input_gets_a_400_saying_why_and_the_server_goes_on(client, fields, files, says):
    files = {"file": ("take.wav", TAKE, "audio/wav")} if files is None else {"reference": ("clip.wav", VOICE, "audio/wav")}
    response = client.post("/voxcpm/evaluate", files=files, data=fields)
    assert response.status_code == 400 and says in response.json()["error"], response.text
    junk = client.post("/voxcpm/evaluate", files={"file": ("x.wav", b"not audio", "audio/wav")}, data={"text": "hi"})
    assert junk.status_code == 400 and "could not be read as audio" in junk.json()["error"]
    assert client.get("/voxcpm/health").status_code == 200


def test_models_that_cannot_load_are_not_available_with_the_reason_at_once(app, client):
    ctx = app.app.state.ctx
    analysis = Analysis(AnalysisSettings(recognizer="/no/such/whisper", speaker=None, device="cpu"))
    with state_swapped(ctx, "analysis", analysis):
        analysis.ping().result(60)  # the process up: what is timed is the answer, not its start
        began = time.monotonic()
        response = evaluate(client, text=TEXT, reference=VOICE)
        took = time.monotonic() - began
        assert evaluate(client, text=TEXT).json()["similarity"] is None, "no clip: not a cloning take, nothing to compare"
    analysis.close()
    assert response.status_code == 200, response.text
    got = response.json()
    assert not got["intelligibility"]["available"] and "the folder /no/such/whisper does not exist" in got["intelligibility"]["reason"]
    assert "--asr-model" in got["intelligibility"]["reason"]
    assert not got["similarity"]["available"] and "--speaker-model none" in got["similarity"]["reason"]
    assert took < 5, f"not available must be said promptly, not after {took:.1f} s"


def test_a_model_still_loading_is_not_available_for_now_and_the_answer_does_not_wait_for_it(app, client, tmp_path):
    """A first download (a loader that waits for a file): the evaluation answers within the load
    wait with the recognizer's scores and "being loaded" for similarity; once loaded, scored."""
    speaker = write_tiny_wavlm(tmp_path / "wavlm")
    analysis = Analysis(AnalysisSettings(recognizer=app.app.state.ctx.analysis.settings.recognizer, speaker=str(speaker),
                                         speaker_loader=analysis_stand_ins.SLOW_SPEAKER, load_wait_s=0.3, device="cpu"))
    with state_swapped(app.app.state.ctx, "analysis", analysis):
        # The recognizer loaded first (asked every 0.2 s: asked back to back, the asks took a core)
        wait_until(lambda: evaluate(client, text=TEXT).json()["intelligibility"]["available"], timeout=60, interval=0.2)
        began = time.monotonic()
        first = evaluate(client, text=TEXT, reference=VOICE).json()
        assert time.monotonic() - began < 10 and not first["similarity"]["available"]
        assert "is being loaded" in first["similarity"]["reason"] and first["intelligibility"]["available"]
        (speaker / "release").touch()
        again = wait_until(lambda: (got := evaluate(client, text=TEXT, reference=VOICE).json())["similarity"]["available"]
                           and got, timeout=60, interval=0.2)
        assert again["similarity"]["model"] == str(speaker), "loaded: scored"
    analysis.close()
