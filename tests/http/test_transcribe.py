"""POST /voxcpm/transcribe with a tiny random Whisper (tests/fixtures/tiny_whisper.py) loaded by the
app's own code from `--asr-model FOLDER`: the text is the model's, made in the analysis process
(never on the engine's worker thread), once per clip (uploads, the same file again, saved voices); bad input gets a 400 that says
why, and a model that is off or cannot be loaded a 503 that says how to fix it, while every other
route goes on serving."""
from __future__ import annotations

import io
import os
import threading
import tracemalloc
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from inference.analysis.process import Analysis
from inference.config import AnalysisSettings

from ..support.app_helpers import MODEL_LOAD_WAIT_S, load_engine, recognizer_loaded, state_swapped, wait_until
from ..fixtures.tiny_whisper import write_tiny_whisper

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "voices"
GUIDE, NARRATOR = (ASSETS / "guide_en.wav").read_bytes(), (ASSETS / "narrator_en.wav").read_bytes()


@pytest.fixture(scope="module")
def whisper(tmp_path_factory) -> str:
    return str(write_tiny_whisper(tmp_path_factory.mktemp("whisper")))


@pytest.fixture(scope="module")
def direct(whisper):
    """The same checkpoint through transformers' pipeline directly: what the route must answer."""
    from transformers.pipelines import pipeline  # the function itself, whatever the app fixture watches

    pipe = pipeline("automatic-speech-recognition", model=whisper, device="cpu")
    return lambda audio: pipe({"raw": audio, "sampling_rate": 16000})["text"].strip()


@pytest.fixture(scope="module")
def app(serve_app, whisper, tmp_path_factory):
    """The app once its analysis process has loaded the recognizer: a transcript asked for before
    the load ends would hear that the model is still being loaded (issue 58, on a busy machine)."""
    running = serve_app(recognizer=whisper, load_wait_s=MODEL_LOAD_WAIT_S,
                        data_dir=str(tmp_path_factory.mktemp("data")), engine=load_engine())
    recognizer_loaded(running)
    return running


def calls(app) -> int:
    """Transcriptions asked of the analysis process."""
    return app.app.state.ctx.analysis.submitted.get("transcribe", 0)


def upload(client, data: bytes) -> str:
    response = client.post("/voxcpm/upload", content=data)
    assert response.status_code == 200, response.text
    return response.json()["id"]


def clip_audio(data: bytes) -> np.ndarray:
    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    assert rate == 16000
    return audio


def test_an_uploaded_clip_gets_the_models_text_made_in_the_analysis_process(app, client, whisper, direct):
    worker_calls = []
    real = app.worker.call
    with state_swapped(app.worker, "call", lambda fn: (worker_calls.append(fn), real(fn))[1]):
        response = client.post("/voxcpm/transcribe", json={"reference_id": upload(client, GUIDE)})
    assert response.status_code == 200, response.text
    want = direct(clip_audio(GUIDE))
    assert want and response.json() == {"text": want, "automatic": True, "model": whisper}
    analysis = app.app.state.ctx.analysis
    assert worker_calls == [] and len(analysis.pids) == 1 and os.getpid() not in analysis.pids, \
        "made in the one analysis process, started on first use; nothing ran on the engine's worker"


def test_a_clip_is_transcribed_once_whatever_door_it_comes_back_through(app, client, direct):
    first = client.post("/voxcpm/transcribe", json={"reference_id": upload(client, NARRATOR)}).json()["text"]
    assert first == direct(clip_audio(NARRATOR))
    before = calls(app)
    again = client.post("/voxcpm/transcribe", json={"reference_id": upload(client, NARRATOR)})  # the same file again
    as_file = client.post("/voxcpm/transcribe", files={"file": ("n.wav", NARRATOR, "audio/wav")})
    assert again.json()["text"] == as_file.json()["text"] == first
    assert calls(app) == before, "the same audio is not transcribed twice"
    other = clip_audio(GUIDE)[: 16000 * 2]
    buffer = io.BytesIO()
    sf.write(buffer, other, 16000, format="WAV", subtype="FLOAT")
    fresh = client.post("/voxcpm/transcribe", files={"file": ("g.wav", buffer.getvalue(), "audio/wav")})
    assert fresh.status_code == 200 and fresh.json()["text"] == direct(other)
    assert calls(app) == before + 1


def test_a_saved_voice_without_a_transcript_is_transcribed_and_may_keep_it(app, client, direct):
    saved = client.post("/voxcpm/voices", json={"name": "Quiet guide", "clip_id": upload(client, GUIDE)})
    assert saved.status_code == 201 and saved.json()["transcript"] is None
    flac = client.get("/voxcpm/voices/Quiet guide/audio").content
    want = direct(clip_audio(flac))
    before = calls(app)
    got = client.post("/voxcpm/transcribe", json={"voice": "quiet guide"})
    assert got.status_code == 200 and got.json()["text"] == want
    assert client.get("/voxcpm/voices").json()["voices"][0]["transcript"] is None, "only kept as automatic"
    kept = client.post("/voxcpm/transcribe", json={"voice": "Quiet guide", "save": True})
    assert kept.json()["text"] == want and calls(app) == before + 1, "kept beside the voice: not made again"
    assert client.get("/voxcpm/voices").json()["voices"][0]["transcript"] == want
    refused = client.post("/voxcpm/transcribe", json={"voice": "Quiet guide", "save": True})
    assert refused.status_code == 409 and "already has a transcript" in refused.json()["error"]


@pytest.mark.parametrize("body, says", [
    ({}, "give one clip"),
    ({"reference_id": "a", "voice": "b"}, "give one clip"),
    ({"reference_id": "no-such-clip"}, "expired or was never uploaded"),
    ({"text": "hello"}, "unknown field 'text'"),
    ({"text": "hello"}, "the accepted fields are reference_id, voice, save"),
])
def test_a_request_without_one_usable_clip_gets_a_400_saying_why(client, body, says):
    response = client.post("/voxcpm/transcribe", json=body)
    assert response.status_code == 400 and says in response.json()["error"]


def test_a_long_or_unreadable_clip_gets_a_400_saying_why(client):
    long = io.BytesIO()
    sf.write(long, np.tile(clip_audio(GUIDE), 6)[: 16000 * 31], 16000, format="WAV")
    for request in ({"json": {"reference_id": upload(client, long.getvalue())}},
                    {"files": {"file": ("long.wav", long.getvalue(), "audio/wav")}}):
        response = client.post("/voxcpm/transcribe", **request)
        assert response.status_code == 400 and "up to 30 s" in response.json()["error"]
    junk = client.post("/voxcpm/transcribe", files={"file": ("x.wav", b"not audio at all", "audio/wav")})
    assert junk.status_code == 400 and "could not be read as audio" in junk.json()["error"]
    nameless = client.post("/voxcpm/transcribe", files={"other": ("x.wav", GUIDE, "audio/wav")})
    assert nameless.status_code == 400 and "no file field" in nameless.json()["error"]


def test_a_file_over_30_s_is_refused_by_its_header_before_any_of_it_is_decoded(client):
    """Issue 37, item 3: 40 s at 96 kHz would decode to 15 MiB of float32; its header says 40 s."""
    t = np.arange(96000 * 40, dtype=np.float32) / 96000
    buffer = io.BytesIO()
    sf.write(buffer, 0.1 * np.sin(2 * np.pi * 220 * t), 96000, format="FLAC")
    data = buffer.getvalue()
    del t
    tracemalloc.start()
    try:
        response = client.post("/voxcpm/transcribe", files={"file": ("long.flac", data, "audio/flac")})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert response.status_code == 400 and "lasts 40.0 s" in response.json()["error"]
    assert "up to 30 s" in response.json()["error"]
    assert peak < 3 * len(data) + 4 * 2**20, f"{peak / 2**20:.1f} MiB traced: the file was decoded"


class WatchedSlots:
    """A semaphore that says (`asked`) when someone has asked for a slot."""

    def __init__(self, inner):
        self.inner, self.asked = inner, threading.Event()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.asked.set()
        return self.inner.acquire(blocking, timeout)

    def release(self):
        self.inner.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def test_files_to_transcribe_share_the_uploads_limit_on_decodes_at_once(app):
    """Issue 37, item 3: while every decode slot of the uploads is taken, a file to transcribe waits.
    The test waits for the request to ask for a slot (an event), not for a time (issue 58)."""
    clips = app.app.state.ctx.clips
    slots = WatchedSlots(clips._decoding)  # the UploadStore's own: 2 decodes at once
    assert slots.acquire(blocking=False) and slots.acquire(blocking=False)
    slots.asked.clear()
    done: dict = {}

    def send():
        with httpx.Client(base_url=app.url, timeout=60) as other:
            done["response"] = other.post("/voxcpm/transcribe", files={"file": ("g.wav", GUIDE, "audio/wav")})
    sender = threading.Thread(target=send)
    with state_swapped(clips, "_decoding", slots):
        try:
            sender.start()
            assert slots.asked.wait(60), "the file never asked for a decode slot"
            assert "response" not in done, "decoded while the uploads' decodes were all taken"
        finally:
            slots.release()
            slots.release()
        sender.join(60)
    assert done["response"].status_code == 200, done["response"].text


@pytest.mark.parametrize("model, says", [
    (None, "switched off on this server (--asr-model none)"),
    ("/no/such/whisper", "the folder /no/such/whisper does not exist"),
    ("openai/not-in-this-cache", "not in the Hugging Face cache and HF_HUB_OFFLINE is set"),
])
def test_no_model_gets_a_503_saying_how_to_fix_it_and_the_rest_serves(app, client, monkeypatch, model, says):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # for the analysis process, which reads it as it starts
    analysis = Analysis(AnalysisSettings(recognizer=model, device="cpu"))
    with state_swapped(app.app.state.ctx, "analysis", analysis):
        check_the_503_and_the_rest(client, model, says)
    analysis.close()


def check_the_503_and_the_rest(client, model, says):
    clip_id = upload(client, GUIDE)

    def answered():
        """The answer once the load was tried: a busy machine's try can outlast the call's wait
        for it, which then says "being loaded, try again" (a load's own state, tested apart)."""
        response = client.post("/voxcpm/transcribe", json={"reference_id": clip_id})
        return None if "is being loaded" in response.text else response
    response = wait_until(answered, timeout=120, interval=1.0)
    assert response.status_code == 503, response.text
    assert says in response.json()["error"] and "--asr-model" in response.json()["error"]
    if model is not None:
        assert "To fix:" in response.json()["error"] and "--asr-model none" in response.json()["error"]
        # Issue 37, item 4: the load is tried again after a while, and the answer says when.
        assert 1 <= int(response.headers["retry-after"]) <= 60
    else:
        assert "retry-after" not in response.headers, "switched off: trying again will not help"
    spoken = client.post("/voxcpm/stream", json={"mode": "cloning", "text": "Hi.", "reference_id": clip_id,
                                                 "seed": 1, "max_len": 2})
    assert spoken.status_code == 200 and spoken.content, "the other routes are unaffected"
