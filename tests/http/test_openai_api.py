"""The official `openai` client against the app on 127.0.0.1: speech in every format, whole and
streamed (audio and SSE), equal to engine.synthesize of the same request (lossless formats sample
for sample, lossy ones by length and correlation); pcm at OpenAI's 24 kHz unless another
`sample_rate` is asked, every format and stream format lasting the model's audio at every rate;
voices and models listed; bad fields answered with OpenAI-style JSON errors."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import soxr

from inference import SynthesisRequest
from ui.services.audio import FORMATS
from ui.http.builtin_voices import BUILTIN_VOICES
from ui.library.uploads import decode_audio

from ..support.app_helpers import SAMPLE_RATE, assert_same_audio, expected_pcm, state_swapped

VOICE = Path(__file__).resolve().parents[2] / "assets" / "voices" / "guide_en.wav"
TRANSCRIPT = "Welcome to the museum. Please keep your ticket with you while you visit the galleries."
TEXT = "Hello world, this is a test."
DESIGN = dict(model="voxcpm2", input=TEXT, voice="design", instructions="A calm, low voice")
EXTRA = {"seed": 11, "max_len": 6}
# The body asks for the model's rate, so the audio compares sample for sample with synthesize()'s
# (pcm is otherwise sent at OpenAI's 24 kHz).
AT_MODEL_RATE = {**EXTRA, "sample_rate": SAMPLE_RATE}
LOSSY = ("mp3", "opus")


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    running = serve_app(data_dir=str(tmp_path_factory.mktemp("data")))
    with httpx.Client(base_url=running.url, timeout=120) as client:
        clip_id = client.post("/voxcpm/upload", content=VOICE.read_bytes()).json()["id"]
        saved = client.post("/voxcpm/voices", json={"name": "Guide", "clip_id": clip_id, "transcript": TRANSCRIPT})
        assert saved.status_code == 201, saved.text
    yield running


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=app.url + "/v1", api_key="not-needed-without-a-token", max_retries=0)


@pytest.fixture(scope="module")
def design_pcm():
    return expected_pcm(SynthesisRequest(TEXT, control="A calm, low voice", **EXTRA))


def decode(data: bytes, fmt: str) -> np.ndarray:
    """int16 samples of a response body, as a client would read it."""
    if fmt == "pcm":
        return np.frombuffer(data, "<i2")
    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE
    return np.clip(np.rint(audio * 32768.0), -32768, 32767).astype(np.int16)


def assert_matches(got: np.ndarray, want: np.ndarray, fmt: str):
    if fmt not in LOSSY:
        return assert_same_audio(got, want)
    # Lossy: the length within the codec's delay and framing, the waveform closely correlated once
    # aligned (MP3 starts after its encoder delay; Opus is trimmed by its pre-skip).
    assert abs(got.size - want.size) < 0.1 * SAMPLE_RATE, f"{fmt}: {got.size} samples, {want.size} synthesized"
    a, b = want.astype(np.float64), got.astype(np.float64)
    best = max(np.corrcoef(a[: b.size - lag], b[lag: lag + a.size])[0, 1]
               for lag in range(0, min(4000, b.size - a.size // 2)) if min(a.size, b.size - lag) > 0)
    # The tiny random model makes broadband noise up to 24 kHz, which MP3 cuts above about 20 kHz:
    # 0.6 to 0.9 measured; unrelated audio of the same length gives about 0.
    assert best > 0.5, f"{fmt}: correlation {best:.2f} with the synthesized audio"


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_whole_and_streamed_equals_synthesize(client, design_pcm, fmt):
    whole = client.audio.speech.create(**DESIGN, response_format=fmt, extra_body=AT_MODEL_RATE)
    assert_matches(decode(whole.content, fmt), design_pcm, fmt)
    with client.audio.speech.with_streaming_response.create(**DESIGN, response_format=fmt,
                                                             extra_body=AT_MODEL_RATE) as resp:
        assert resp.headers["x-seed"] == "11"
        parts = [part for part in resp.iter_bytes() if part]
    if fmt in ("pcm", "wav"):
        assert len(parts) > 1, "lossless streaming formats arrive chunk by chunk"
    assert_matches(decode(b"".join(parts), fmt), design_pcm, fmt)


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_sse_deltas_carry_the_audio_and_end_with_usage(client, design_pcm, fmt):
    with client.audio.speech.with_streaming_response.create(**DESIGN, response_format=fmt, stream_format="sse",
                                                             extra_body=AT_MODEL_RATE) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) > 1 and events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["output_tokens"] == design_pcm.size // 7680
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert_matches(decode(audio, fmt), design_pcm, fmt)


def test_a_saved_voice_is_continued_from_or_styled(client):
    clip = decode_audio(VOICE.read_bytes(), max_seconds=60)
    got = client.audio.speech.create(model="voxcpm2", input=TEXT, voice="Guide", response_format="wav",
                                     extra_body=AT_MODEL_RATE)
    want = expected_pcm(SynthesisRequest(TEXT, reference_audio=clip, prompt_audio=clip, prompt_text=TRANSCRIPT, **EXTRA))
    assert_same_audio(decode(got.content, "wav"), want)
    styled = client.audio.speech.create(model="voxcpm2", input=TEXT, voice={"id": "Guide"}, instructions="Whispering",
                                        response_format="pcm", extra_body=AT_MODEL_RATE)
    want = expected_pcm(SynthesisRequest(TEXT, reference_audio=clip, control="Whispering", **EXTRA))
    assert_same_audio(decode(styled.content, "pcm"), want)


def test_voices_and_models_are_listed(app, client):
    assert [m.id for m in client.models.list()] == ["voxcpm2", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    listed = httpx.get(app.url + "/v1/audio/voices").json()
    assert listed["voices"] == ["Guide", *BUILTIN_VOICES, "design", "default"]
    assert listed["data"][0]["has_transcript"] is True


@pytest.mark.parametrize("change, status, words", [
    ({"speed": 5.0}, 400, "speed 5.0 is out of range: use a number from 0.25 to 4"),
    ({"response_format": "aac"}, 400, "use one of wav, pcm, flac, mp3, opus (aac would need an FFmpeg encoder"),
    ({"response_format": "AAC"}, 400, "(aac would need an FFmpeg encoder, which this server does not ship)"),
    ({"stream_format": "websocket"}, 400, "audio, sse"),
    ({"model": "tts-2"}, 400, "use one of voxcpm2, tts-1, tts-1-hd, gpt-4o-mini-tts"),
    ({"voice": "nobody"}, 404, "no saved voice named 'nobody'"),
    ({"voice": "default", "ref_audio": "https://example.com/a.wav"}, 400, "fetches no URLs"),
    ({"ref_audio": "data:audio/wav;base64,AAAA"}, 400, "not both"),
    ({"task_type": "Clone"}, 400, "task_type"),
    ({"input": ""}, 400, "input is empty"),
    ({"cfg_value": 99.0}, 400, "cfg_value"),
    ({"temperature": 0.5}, 400, "unknown parameter 'temperature'"),
    ({"normalize": [1]}, 400, "normalize"),
])
def test_bad_fields_get_openai_style_errors(app, change, status, words):
    body = {**DESIGN, **change}
    body = {k: v for k, v in body.items() if v is not None}
    response = httpx.post(app.url + "/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and words in error["message"]
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


@pytest.mark.parametrize("change, status, param, words", [
    ({"input": ""}, 400, "input", "input is empty"),
    ({"input": " \u200b "}, 400, "input", "input is empty"),
    ({"input": "x" * 20001}, 400, "input", "the limit is 20000"),
    ({"input": "[pause 1s]"}, 400, "input", "the input holds only pause tags"),
    ({"input": "Hello [pause abc] there."}, 400, "input", "the pause tag '[pause abc]' is not understood"),
    ({"input": "Hello [pause 99s] there."}, 400, "input", "the pause tag '[pause 99s]'"),
    ({"voice": "nobody"}, 404, "voice", "no saved voice named 'nobody'"),
    ({"cfg_value": 99.0}, 400, "cfg_value", "cfg_value 99.0 is out of range"),
    ({"speed": 5.0}, 400, "speed", "speed 5.0 is out of range"),
])
def test_an_error_of_one_parameter_names_it_in_the_routes_terms(app, change, status, param, words):
    """`param` names the body's own field (`input`, not the engine's `text`), wherever one is at fault."""
    response = httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, **change}, timeout=60)
    error = openai_error_of(response, status, "not_found_error" if status == 404 else "invalid_request_error")
    assert error["param"] == param and words in error["message"], error


def test_an_unknown_voice_names_the_built_in_ones_and_where_to_list_them(app):
    response = httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, "voice": "nobody"}, timeout=60)
    error = openai_error_of(response, 404, "not_found_error")
    assert all(name in error["message"] for name in [*BUILTIN_VOICES, "'design'"]), error["message"]
    assert "GET /v1/audio/voices" in error["message"] and error["param"] == "voice"
    # Issue 37, item 6: the same on a server without a voice library.
    with state_swapped(app.app.state.ctx, "voices", None):
        response = httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, "voice": "nobody"}, timeout=60)
    error = openai_error_of(response, 404, "not_found_error")
    assert "no voice named 'nobody'" in error["message"] and "GET /v1/audio/voices" in error["message"]
    assert all(name in error["message"] for name in BUILTIN_VOICES) and error["param"] == "voice"


def test_normalize_extension_reads_numbers_as_words(client):
    body = dict(model="voxcpm2", input="It costs 1,250 dollars.", voice="design", instructions="A calm, low voice")
    got = client.audio.speech.create(**body, response_format="pcm", extra_body={**AT_MODEL_RATE, "normalize": True})
    want = expected_pcm(SynthesisRequest(body["input"], control=body["instructions"], normalize=True, **EXTRA))
    assert_same_audio(np.frombuffer(got.content, "<i2"), want)
    plain = expected_pcm(SynthesisRequest(body["input"], control=body["instructions"], **EXTRA))
    assert plain.size != want.size or not np.array_equal(plain, want)  # the spoken text differs


def test_the_client_raises_its_own_error_classes(client):
    with pytest.raises(openai.BadRequestError, match="speed 4.5 is out of range"):
        client.audio.speech.create(**DESIGN, speed=4.5)
    with pytest.raises(openai.NotFoundError, match="no saved voice"):
        client.audio.speech.create(model="voxcpm2", input=TEXT, voice="nobody")


def openai_error_of(response, status: int, kind: str = "invalid_request_error") -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == kind, error
    return error


@pytest.mark.parametrize("voice", ["x" * 201, {"id": "x" * 300}], ids=["name", "id"])
def test_an_overlong_voice_is_refused_naming_the_parameter(app, voice):
    response = httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, "voice": voice}, timeout=60)
    error = openai_error_of(response, 400)
    assert error["param"] == "voice" and "at most 200 characters" in error["message"]


def test_a_saved_voice_is_found_with_spaces_around_its_name(client):
    got = client.audio.speech.create(model="voxcpm2", input=TEXT, voice=" guide ", response_format="pcm",
                                     extra_body=AT_MODEL_RATE)
    assert len(got.content) > 0


@pytest.mark.parametrize("method, path, status, allow", [
    ("GET", "/v1/audio/speech", 405, "POST"), ("POST", "/v1/models", 405, "GET"),
    ("DELETE", "/v1/audio/voices", 405, "GET"), ("GET", "/v1/nothing/here", 404, None), ("GET", "/v1", 404, None),
])
def test_every_error_under_v1_is_openai_shaped(app, method, path, status, allow):
    response = httpx.request(method, app.url + path, timeout=60)
    error = openai_error_of(response, status, "invalid_request_error" if status == 405 else "not_found_error")
    if allow:
        assert allow in response.headers["allow"] and allow in error["message"]
    else:
        assert "POST /v1/audio/speech" in error["message"]  # what is served here


def test_max_len_is_explained_in_the_routes_own_terms(app):
    response = httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, "max_len": 1}, timeout=60)
    error = openai_error_of(response, 400)
    assert error["param"] == "max_len" and "min_len" not in error["message"], error
    assert "max_len 1 is out of range" in error["message"] and "from 2 to" in error["message"]


def test_refusals_are_logged_with_what_was_asked(app, caplog):
    caplog.set_level("INFO", logger="voxcpm.http")
    for change in ({"model": "tts-2"}, {"voice": "nobody", "response_format": "wav"}):
        httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, **change}, timeout=60)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request refused")]
    assert len(lines) == 2, lines
    assert f"mode=design text_chars={len(TEXT)} voice='design' format='mp3' " in lines[0]
    assert f"mode=cloning text_chars={len(TEXT)} voice='nobody' format='wav' " in lines[1]


# OpenAI's pcm contract (issue 35). A client reads no rate from pcm: it plays it at 24 kHz.
OPENAI_PCM_RATE = 24000
PATCH_S = 0.16  # one patch of the model's audio


def sent(client, fmt: str, stream: str, extra: dict) -> tuple[bytes, httpx.Headers]:
    """The audio bytes of one request as the client reads them (the SSE deltas joined), and its headers."""
    with client.audio.speech.with_streaming_response.create(**DESIGN, response_format=fmt, stream_format=stream,
                                                             extra_body=extra) as resp:
        if stream == "audio":
            return b"".join(resp.iter_bytes()), resp.headers
        events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
        assert events[-1]["type"] == "speech.audio.done", events[-1]
        return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"), resp.headers


def decoded_samples(data: bytes, fmt: str, rate: int) -> int:
    """Samples a client decodes: pcm at the rate it assumes, the others as their own header says (checked)."""
    if fmt == "pcm":
        assert len(data) % 2 == 0
        return len(data) // 2
    audio, header_rate = sf.read(io.BytesIO(data), dtype="float32")
    assert header_rate == rate, f"{fmt} says {header_rate} Hz, {rate} expected"
    return audio.shape[0]


@pytest.mark.parametrize("rate", [None, 16000], ids=["default_rate", "16k"])
@pytest.mark.parametrize("stream", ["audio", "sse"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_and_stream_format_lasts_the_models_audio(client, design_pcm, fmt, stream, rate):
    extra = EXTRA if rate is None else {**EXTRA, "sample_rate": rate}
    data, headers = sent(client, fmt, stream, extra)
    want_rate = rate or (OPENAI_PCM_RATE if fmt == "pcm" else SAMPLE_RATE)
    assert headers["x-sample-rate"] == str(want_rate)
    if stream == "audio" and fmt == "pcm":
        assert headers["content-type"] == f"audio/pcm;rate={want_rate};channels=1"
    samples = decoded_samples(data, fmt, want_rate)
    model_s = design_pcm.size / SAMPLE_RATE
    assert abs(samples / want_rate - model_s) <= PATCH_S, f"{fmt}/{stream}: {samples / want_rate:.3f} s, model {model_s:.3f} s"
    if fmt not in LOSSY:  # the resampler's tail is flushed: not one sample lost or added
        assert samples == design_pcm.size * want_rate // SAMPLE_RATE


def test_default_pcm_is_the_models_audio_resampled_to_24_khz(client, design_pcm):
    """Sent patch by patch through soxr's stream, and equal to soxr resampling the whole take at once
    (to rounding)."""
    with client.audio.speech.with_streaming_response.create(**DESIGN, response_format="pcm", extra_body=EXTRA) as resp:
        assert resp.headers["content-type"] == "audio/pcm;rate=24000;channels=1"
        parts = [part for part in resp.iter_bytes() if part]
    assert len(parts) > 1, "pcm at 24 kHz still arrives as it is made"
    want = soxr.resample(design_pcm / 32767.0, SAMPLE_RATE, OPENAI_PCM_RATE, quality="HQ")
    want = np.clip(np.rint(want * 32767.0), -32768, 32767)
    pcm = np.frombuffer(b"".join(parts), "<i2")
    assert pcm.shape == want.shape
    assert np.max(np.abs(pcm - want)) <= 2  # the model's float audio against its int16 rounding


@pytest.mark.parametrize("rate, fmt, words", [
    (12345, "pcm", "sample_rate 12345 is not supported: use one of 8000, 16000, 22050, 24000, 44100, 48000 (Hz)"),
    (0, "mp3", "sample_rate 0 is not supported: use one of 8000, 16000, 22050, 24000, 44100, 48000"),
    ("24000", "pcm", "sample_rate must be a whole number of hertz: use one of 8000, 16000, 22050, 24000"),
    (24000.5, "wav", "sample_rate must be a whole number of hertz: use one of 8000, 16000, 22050, 24000"),
    (44100, "opus", "sample_rate 44100 cannot be sent as opus: opus takes 8000, 16000, 24000, 48000"),
    (22050, "opus", "sample_rate 22050 cannot be sent as opus: opus takes 8000, 16000, 24000, 48000"),
])
def test_a_bad_sample_rate_is_refused_naming_the_accepted_ones(app, rate, fmt, words):
    response = httpx.post(app.url + "/v1/audio/speech", json={**DESIGN, "response_format": fmt, "sample_rate": rate},
                          timeout=60)
    error = openai_error_of(response, 400)
    assert error["param"] == "sample_rate" and words in error["message"], error
