"""Issue 59: the three states of the speech recognition model, said as they are by every door that
asks for a transcript (POST /voxcpm/transcribe and gradio_client's /transcribe; the page in
tests/browser/test_page_transcript.py): switched off (how to switch it on), being loaded (from its
folder, with a Retry-After of seconds, not "a download on first use"), and cannot be loaded (the
loader's own reason, answered at once on every later request), including a load that fails after
it started. The recognizer is a stand-in whose load the test ends (tests/fixtures/analysis_stand_ins.py)."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from ..fixtures import analysis_stand_ins

CLIP = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"


def serve_gated(serve_app, folder: Path):
    folder.mkdir()
    app = serve_app(recognizer=str(folder), recognizer_loader=analysis_stand_ins.GATED, speaker=None,
                    load_wait_s=0.2)
    app.app.state.ctx.analysis.ping().result(60)
    return app


def transcribe(app) -> httpx.Response:
    with httpx.Client(base_url=app.url, timeout=60) as client:
        return client.post("/voxcpm/transcribe", files={"file": ("clip.wav", CLIP.read_bytes(), "audio/wav")})


def gradio_refusal(app) -> AppError:
    with pytest.raises(AppError) as refused:
        Client(app.url, verbose=False).predict(reference=handle_file(str(CLIP)), api_name="/transcribe")
    return refused.value


def until(answer, done, within_s: float = 60.0):
    deadline = time.monotonic() + within_s
    while not done(got := answer()):
        assert time.monotonic() < deadline, got.text
        time.sleep(0.1)
    return got


def test_a_model_being_loaded_says_so_with_a_short_retry_after_then_transcribes(serve_app, tmp_path):
    folder = tmp_path / "whisper"
    app = serve_gated(serve_app, folder)
    first = transcribe(app)
    assert first.status_code == 503, first.text
    said = first.json()["error"]
    assert "is being loaded from its folder" in said and "download" not in said
    assert 1 <= int(first.headers["retry-after"]) <= 5
    refused = gradio_refusal(app)
    assert "is being loaded from its folder" in str(refused) and refused.title.startswith("503")
    assert "try again in" in refused.title
    (folder / "release").touch()
    done = until(lambda: transcribe(app), lambda r: r.status_code == 200)
    assert done.json()["text"] == analysis_stand_ins.GATED_WORDS


def test_a_load_that_fails_after_it_started_is_answered_with_its_reason_at_once_from_then_on(serve_app, tmp_path):
    folder = tmp_path / "whisper"
    app = serve_gated(serve_app, folder)
    assert "is being loaded" in transcribe(app).json()["error"]
    (folder / "fail").touch()
    until(lambda: transcribe(app), lambda r: "could not be loaded" in r.json()["error"])
    for _ in range(3):
        began = time.monotonic()
        again = transcribe(app)
        assert time.monotonic() - began < 1, "a model that cannot load is answered at once"
        said = again.json()["error"]
        assert again.status_code == 503 and "missing files a Whisper checkpoint needs" in said
        assert "--asr-model" in said and "being loaded" not in said
    refused = gradio_refusal(app)
    assert "missing files a Whisper checkpoint needs" in str(refused) and refused.title.startswith("503")


def test_switched_off_every_door_says_how_to_switch_it_on_and_a_missing_clip_is_named_first(serve_app):
    app = serve_app(recognizer=None, speaker=None)
    off = transcribe(app)
    assert off.status_code == 503 and "switched off" in off.json()["error"] and "retry-after" not in off.headers
    refused = gradio_refusal(app)
    assert "switched off" in str(refused) and "--asr-model" in str(refused)
    # Issue 60: /transcribe without a clip names the missing clip, whatever the model's state.
    with pytest.raises(AppError, match=r"give one clip: reference .* or voice"):
        Client(app.url, verbose=False).predict(api_name="/transcribe")
