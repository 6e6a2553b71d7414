"""vLLM-Omni's streaming-text socket and speech request as its clients speak them (issue 55), written
from its published protocol (docs/serving/speech_api.md, protocol/audio.py and the example clients
in its repository; none of their code is here): the fields its session.config and speech request
define, its `wav` and its sentence units, `audio.chunk` frames, `split_granularity`,
`streaming_mode` with `input.commit`; and a live session that never loses its audio: not cut while
the server owes it audio or a row, pauses where they were written, a config that never changes
audio already asked for, a cut that says so, frames a default client takes."""
from __future__ import annotations

import base64
import io
import json
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ..support.app_helpers import load_engine, wait_until
from ..support.workbench_page import slowed
from .test_live_text_socket import clip_data_url, protocol, socket, utterance

# What vLLM-Omni's streaming client sends by default, with VoxCPM2's voice (`--speaker default`).
VLLM = {"type": "session.config", "speaker": "default", "task_type": "CustomVoice", "language": "Auto",
        "response_format": "wav", "speed": 1.0, "max_new_tokens": 40, "seed": 7}
TEXT = "Hello world. How are you today? I am fine, thanks."
MODEL_RATE = 48000


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(commit_after_s=5.0)  # no commit by a pause in these tests' sending


def speak(ws, config: dict, pieces: list[str], done: bool = True) -> dict:
    ws.send(json.dumps(config))
    for piece in pieces:
        ws.send(json.dumps({"type": "input.text", "text": piece}))
    if done:
        ws.send(json.dumps({"type": "input.done"}))
    return utterance(ws)


def by_sentence(ws, config: dict, pieces: list[str]) -> list[tuple[dict, bytes, dict]]:
    """Every message of one utterance, its audio split by sentence as a client keeps it."""
    ws.send(json.dumps(config))
    for piece in pieces:
        ws.send(json.dumps({"type": "input.text", "text": piece}))
    ws.send(json.dumps({"type": "input.done"}))
    out, start, audio = [], None, b""
    while True:
        message = ws.recv(timeout=120)
        if isinstance(message, bytes):
            audio += message
            continue
        event = json.loads(message)
        assert event["type"] != "error", event
        if event["type"] == "audio.start":
            start, audio = event, b""
        elif event["type"] == "audio.done":
            out.append((start, audio, event))
        elif event["type"] == "session.done":
            return out + [event]


def test_vllm_omnis_default_config_speaks_the_utterance_whole_as_one_wav_file(app):
    with socket(app) as ws:
        *spoken, done = by_sentence(ws, VLLM, ["Hello world. ", "How are you today? ", "I am fine, thanks."])
    assert len(spoken) == 1, "split_granularity none: one request per input.done"
    start, audio, end = spoken[0]
    assert protocol(start) == {"type": "audio.start", "utterance_index": 0, "sentence_index": 0,
                               "sentence_text": TEXT, "format": "wav", "sample_rate": MODEL_RATE, "channels": 1}
    with sf.SoundFile(io.BytesIO(audio)) as wav:  # a whole file, its header's sizes exact
        assert wav.samplerate == MODEL_RATE and wav.frames == (len(audio) - 44) // 2
        assert wav.frames > 0 and wav.frames % 7680 == 0, "whole patches of 160 ms"
    assert end == {"type": "audio.done", "utterance_index": 0, "sentence_index": 0, "total_bytes": len(audio),
                   "error": False}
    assert protocol(done) == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}


@pytest.mark.parametrize("fmt", ["flac", "mp3", "pcm"])
def test_each_format_comes_as_one_whole_file_per_sentence(app, fmt):
    with socket(app) as ws:
        *spoken, done = by_sentence(ws, VLLM | {"response_format": fmt, "max_new_tokens": 12}, [TEXT])
    (start, audio, end), = spoken
    assert start["format"] == fmt and end["total_bytes"] == len(audio) > 0
    if fmt == "pcm":
        assert start["sample_rate"] == 24000 and len(audio) % (2 * 3840) == 0, "whole patches at 24 kHz"
    else:
        assert sf.info(io.BytesIO(audio)).frames >= 7680


def test_split_granularity_sentence_speaks_each_sentence_as_its_own_file(app):
    with socket(app) as ws:
        *spoken, done = by_sentence(ws, VLLM | {"split_granularity": "sentence", "max_new_tokens": 12},
                                    [word + " " for word in TEXT.split()])
    assert [s["sentence_text"].strip() for s, _, _ in spoken] == ["Hello world.", "How are you today?",
                                                                  "I am fine, thanks."]
    assert [s["sentence_index"] for s, _, _ in spoken] == [0, 1, 2] == [e["sentence_index"] for _, _, e in spoken]
    for _, audio, end in spoken:
        assert sf.info(io.BytesIO(audio)).frames > 0 and end["total_bytes"] == len(audio)
    assert done["total_sentences"] == 3


def test_sentence_commit_speaks_each_commit_as_it_comes_in_one_request_and_acknowledges_it(app):
    config = VLLM | {"streaming_mode": "sentence_commit", "response_format": "pcm", "max_new_tokens": 12}
    with socket(app) as ws:
        ws.send(json.dumps(config))
        events, audio = [], b""
        for k, sentence in enumerate(["Hello there, this first sentence plays at once.",
                                      " The second one resumes the same request."]):
            ws.send(json.dumps({"type": "input.text", "text": sentence}))
            ws.send(json.dumps({"type": "input.commit", "commit_id": f"sentence-{k}"}))
        ws.send(json.dumps({"type": "input.done"}))
        while not events or events[-1]["type"] != "session.done":
            message = ws.recv(timeout=120)
            if isinstance(message, bytes):
                audio += message
            else:
                events.append(json.loads(message))
    committed = [e for e in events if e["type"] == "input.committed"]
    assert [(e["commit_id"], e["sentence_index"]) for e in committed] == [("sentence-0", 0), ("sentence-1", 1)]
    assert committed[0]["chars_committed"] == len("Hello there, this first sentence plays at once.")
    assert [e["type"] for e in events if e["type"].startswith("audio.")] == ["audio.start", "audio.done"]
    assert protocol(events[-1]) == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    assert len(audio) > 0 and len(audio) % (2 * 3840) == 0


def test_token_level_feeds_the_words_into_one_request_heard_as_one_sentence(app):
    config = VLLM | {"streaming_mode": "token_level", "response_format": "pcm", "max_new_tokens": 12}
    with socket(app) as ws:
        *spoken, done = by_sentence(ws, config, [word + " " for word in TEXT.split()])
    assert len(spoken) == 1 and spoken[0][0]["sentence_text"].startswith("Hello world.")
    assert done["total_sentences"] >= 2, "clauses committed as they came, into the one request"


@pytest.mark.parametrize("change, said", [
    ({"streaming_mode": "sentence_commit"}, 'set response_format "pcm"'),  # wav, vLLM-Omni's default, cannot stream
    ({"streaming_mode": "token_level", "response_format": "pcm", "split_granularity": "sentence"}, "leave split_granularity"),
    ({"task_type": "Cloning"}, "task_type"),
    ({"instructions": "x" * 20001}, "the limit is 20000"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"voice": "nobody", "speaker": None}, "no voice named 'nobody'"),
])
def test_a_config_is_checked_whole_when_sent(app, change, said):
    config = {k: v for k, v in (VLLM | change).items() if v is not None}
    with socket(app) as ws:
        ws.send(json.dumps(config))
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and said in error["message"], error


def test_input_commit_outside_sentence_commit_is_an_error_and_the_session_goes_on(app):
    with socket(app) as ws:
        ws.send(json.dumps(VLLM))
        ws.send(json.dumps({"type": "input.commit"}))
        assert "sentence_commit" in json.loads(ws.recv(timeout=30))["message"]
        got = speak(ws, VLLM, ["Still speaking after that."])
        assert got["audio"] and not got["errors"]


def test_session_done_comes_in_utterance_order_and_never_for_an_empty_flush_or_at_close(app):
    with slowed(app, 0.05), socket(app) as ws:
        ws.send(json.dumps(VLLM | {"max_new_tokens": 20}))
        ws.send(json.dumps({"type": "input.text", "text": "The first utterance, long enough to be playing."}))
        ws.send(json.dumps({"type": "input.done"}))
        ws.send(json.dumps({"type": "input.done"}))  # nothing since: no utterance
        ws.send(json.dumps({"type": "input.text", "text": "The second one."}))
        ws.send(json.dumps({"type": "session.close"}))  # its input.done implied: spoken, then closed
        done = []
        try:
            while True:
                message = ws.recv(timeout=120)
                if isinstance(message, str) and json.loads(message)["type"] == "session.done":
                    done.append(json.loads(message))
        except Exception:  # noqa: BLE001 - the server closes the socket after the last one
            pass
    assert [protocol(e) for e in done] == [{"type": "session.done", "utterance_index": 0, "total_sentences": 1},
                                           {"type": "session.done", "utterance_index": 1, "total_sentences": 1}]


def test_an_utterance_slower_to_make_than_the_idle_timeout_is_spoken_whole(serve_app):
    """The idle timeout (30 s by default; 1 s here, so that the test takes seconds, not a minute)
    counts the client's silence, not the time its audio takes to make, even slower than real time."""
    app = serve_app(session_idle_s=1.0)
    started = time.monotonic()
    with slowed(app, 0.3), socket(app) as ws:  # the client silent all along once it has sent its text
        got = speak(ws, VLLM | {"response_format": "pcm", "stream_audio": True, "split_granularity": "clause"},
                    [TEXT])
    took = time.monotonic() - started
    assert not got["errors"] and got["events"][-1]["type"] == "session.done" and got["audio"]
    assert took > 3, "it took the server longer than the idle timeout to speak"
    assert len(got["audio"]) / 2 / 24000 < took, "made slower than real time"


@pytest.fixture(scope="module")
def one_row(serve_app):
    return serve_app(engine=load_engine(max_streams=1), session_idle_s=1.0)


def hold_the_row(app, seconds: float):
    """A request on the one row for about `seconds` (its client reads along)."""
    body = {"text": TEXT, "seed": 3, "min_len": 40, "max_len": 40}

    def run():
        with httpx.Client(base_url=app.url, timeout=120) as client:
            client.post("/voxcpm/stream", json=body).raise_for_status()
    holder = threading.Thread(target=run)
    holder.start()
    wait_until(lambda: app.worker.held == 1, timeout=30)
    return holder


def test_a_session_that_waits_for_a_row_is_not_idle_and_is_spoken_when_one_frees(one_row):
    with slowed(one_row, 0.05):  # the row is busy for 40 x 50 ms and more
        holder = hold_the_row(one_row, 2.0)
        with socket(one_row) as ws:
            got = speak(ws, VLLM | {"max_new_tokens": 12}, [TEXT])
        holder.join()
    assert not got["errors"] and got["audio"] and got["events"][-1]["total_sentences"] == 1


def test_an_interrupt_while_waiting_for_a_row_ends_the_utterance_as_interrupted(one_row):
    with slowed(one_row, 0.05):
        holder = hold_the_row(one_row, 2.0)
        with socket(one_row) as ws:
            ws.send(json.dumps(VLLM | {"max_new_tokens": 12}))
            ws.send(json.dumps({"type": "input.text", "text": TEXT}))
            ws.send(json.dumps({"type": "input.done"}))
            time.sleep(0.3)
            ws.send(json.dumps({"type": "input.interrupt"}))
            got = utterance(ws)
        holder.join()
    assert not got["errors"], got["errors"]
    assert got["events"] == [{"type": "session.done", "utterance_index": 0, "total_sentences": 0, "interrupted": True}]


def test_a_refused_clause_is_said_and_the_rest_of_the_utterance_is_spoken(app):
    config = VLLM | {"split_granularity": "clause", "response_format": "pcm", "max_new_tokens": 12}
    with socket(app) as ws:
        got = speak(ws, config, ["[pause 100000s] This first clause cannot be spoken, but the rest is heard."])
    assert len(got["errors"]) == 1 and "pause" in got["errors"][0] and "not spoken" in got["errors"][0]
    starts = [e for e in got["events"] if e["type"] == "audio.start"]
    assert [e["sentence_text"] for e in starts] == [" but the rest is heard."] and got["audio"]
    assert protocol(got["events"][-1]) == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}


def silences(pcm: bytes, rate: int, at_least_s: float = 0.3) -> list[float]:
    """The lengths of the runs of exact zeros a pause makes (the random voice never holds one that long)."""
    zero = np.frombuffer(pcm, "<i2") == 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], zero.astype(np.int8), [0]])))
    runs = (edges[1::2] - edges[::2]) / rate
    return [round(float(r), 2) for r in runs if r >= at_least_s]


def test_pause_tags_in_one_piece_keep_their_places_and_lengths_as_over_http(app):
    text = "We start here, then we wait. [pause 1s] After the first pause we go on. [pause 3s] And then we end."
    config = VLLM | {"split_granularity": "clause", "response_format": "pcm", "sample_rate": MODEL_RATE,
                     "stream_audio": True, "max_new_tokens": 8}
    with socket(app) as ws:
        live = speak(ws, config, [text])
    assert not live["errors"]
    whole = httpx.post(app.url + "/voxcpm/stream", json={"text": text, "seed": 7, "max_len": 8}, timeout=120).content
    assert silences(live["audio"], MODEL_RATE) == silences(whole, MODEL_RATE) == [1.0, 3.0]


def test_a_config_sent_while_an_utterance_plays_applies_to_the_next_one_only(app):
    config = VLLM | {"split_granularity": "clause", "response_format": "pcm", "stream_audio": True,
                     "max_new_tokens": 12}
    text = "The first clause is here, the second follows it, and a third one ends it."
    with socket(app) as ws:
        alone = speak(ws, config, [text])
    with slowed(app, 0.05), socket(app) as ws:
        ws.send(json.dumps(config))
        ws.send(json.dumps({"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "input.done"}))
        ws.send(json.dumps(config | {"sample_rate": 8000}))  # accepted: no utterance is open
        first = utterance(ws)
        ws.send(json.dumps({"type": "input.text", "text": "Now at the new rate."}))
        ws.send(json.dumps({"type": "input.done"}))
        second = utterance(ws)
    assert {e["sample_rate"] for e in first["events"] if e["type"] == "audio.start"} == {24000}
    assert first["audio"] == alone["audio"] and not first["errors"]
    assert {e["sample_rate"] for e in second["events"] if e["type"] == "audio.start"} == {8000}


@pytest.fixture(scope="module")
def bounded(serve_app):
    return serve_app(max_output_seconds=1.0)


def test_an_utterance_cut_at_the_bound_says_so_on_the_socket(bounded):
    config = VLLM | {"split_granularity": "clause", "response_format": "pcm", "max_new_tokens": 20}
    with socket(bounded) as ws:
        got = speak(ws, config, [TEXT * 3])
    assert len(got["errors"]) == 1 and "reached 1 s of audio" in got["errors"][0], got["errors"]
    assert "not spoken" in got["errors"][0]
    done = [e for e in got["events"] if e["type"] == "audio.done"]
    assert done[-1]["error"] is True and len(got["audio"]) == 2 * 24000
    assert got["events"][-1]["type"] == "session.done"


def test_a_take_cut_at_the_bound_ends_opanais_events_with_an_error(bounded):
    body = {"input": TEXT * 12, "voice": "default", "max_len": 20, "stream_format": "sse", "response_format": "pcm"}
    events = [json.loads(line[6:]) for line in httpx.post(bounded.url + "/v1/audio/speech", json=body,
                                                          timeout=120).text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "error" and "reached 1 s of audio" in events[-1]["error"]["message"]
    assert all(e["type"] == "speech.audio.delta" for e in events[:-1])


def test_a_message_nested_past_the_parser_is_an_error_and_the_session_goes_on(app):
    with socket(app) as ws:
        ws.send("[" * 200_000 + "]" * 200_000)
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and "nested" in error["message"]
        got = speak(ws, VLLM | {"max_new_tokens": 12}, ["Still here."])
        assert got["audio"] and not got["errors"]


def test_refused_configs_with_a_clip_keep_nothing_and_an_upload_still_works(app):
    clips = app.app.state.ctx.clips
    before = len(clips)
    with socket(app) as ws:
        for _ in range(20):
            ws.send(json.dumps(VLLM | {"speaker": None, "ref_audio": clip_data_url(), "speed": 9.0}))
            assert "speed" in json.loads(ws.recv(timeout=30))["message"]
        got = speak(ws, {k: v for k, v in VLLM.items() if k != "speaker"} | {"ref_audio": clip_data_url(),
                                                                               "max_new_tokens": 12}, ["Cloned."])
        assert got["audio"] and not got["errors"]
    assert len(clips) == before, "a clip sent in a config is decoded for the session, never stored"
    wav = base64.b64decode(clip_data_url().split(",", 1)[1])
    upload = httpx.post(app.url + "/voxcpm/upload", content=wav, headers={"Content-Type": "application/octet-stream"},
                        timeout=60)
    assert upload.status_code == 200, upload.text


def test_a_sentence_sent_whole_comes_in_frames_a_default_websockets_client_takes(app):
    with socket(app) as ws:  # the `websockets` client's own limit: 1 MiB a message
        ws.send(json.dumps(VLLM))  # one sentence of over 11 s at 48 kHz: over 1 MiB of WAV
        ws.send(json.dumps({"type": "input.text", "text": "Hello there. [pause 6s] Still here. [pause 6s] Goodbye."}))
        ws.send(json.dumps({"type": "input.done"}))
        frames, events = [], []
        while not events or events[-1]["type"] != "session.done":
            message = ws.recv(timeout=120)
            if isinstance(message, bytes):
                frames.append(message)
            else:
                events.append(json.loads(message))
    assert max(map(len, frames)) <= 512 * 1024 and sum(map(len, frames)) > 2**20
    assert [e for e in events if e["type"] == "audio.done"][0]["total_bytes"] == sum(map(len, frames))


def test_a_client_that_leaves_mid_utterance_leaves_no_traceback_in_the_log(app, caplog):
    caplog.set_level("INFO")
    with slowed(app, 0.05):
        ws = connect(app.url.replace("http://", "ws://") + "/v1/audio/speech/stream", open_timeout=30)
        ws.send(json.dumps(VLLM | {"response_format": "pcm", "stream_audio": True, "max_new_tokens": 200}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        while not isinstance(ws.recv(timeout=60), bytes):
            pass
        ws.close()
        wait_until(lambda: app.worker.held == 0, timeout=30)
        time.sleep(0.5)
    assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"], caplog.text


@pytest.mark.slow
def test_sixteen_sessions_at_once_are_all_spoken_none_lost(app):
    results = [None] * 16

    def session(k: int):
        with socket(app) as ws:
            results[k] = speak(ws, VLLM | {"split_granularity": "clause", "response_format": "pcm",
                                           "stream_audio": True, "max_new_tokens": 12, "seed": k},
                               ["Sixteen voices at once, ", "and every one of them ", "is heard to the end."])
    threads = [threading.Thread(target=session, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        assert got is not None and not got["errors"] and got["events"][-1]["type"] == "session.done"
        assert len([e for e in got["events"] if e["type"] == "audio.start"]) == 2, "both clauses spoken"


# -- POST /v1/audio/speech as vLLM-Omni's VoxCPM2 clients send it ----------------------------------

def post(app, body: dict) -> httpx.Response:
    return httpx.post(app.url + "/v1/audio/speech", json=body, timeout=120,
                      headers={"Authorization": "Bearer sk-empty"})


def test_vllm_omnis_voxcpm2_client_body_gets_a_wav_without_a_model(app):
    for body in ({"model": "voxcpm2", "input": TEXT, "voice": "default", "response_format": "wav", "max_len": 12},
                 {"input": TEXT, "voice": "default", "response_format": "wav", "language": "English",
                  "task_type": "VoiceDesign", "max_new_tokens": 12}):
        response = post(app, body)
        assert response.status_code == 200, response.text
        assert sf.info(io.BytesIO(response.content)).samplerate == MODEL_RATE


def test_stream_true_is_raw_audio_with_a_stream_format_and_events_without(app):
    body = {"input": TEXT, "voice": "default", "response_format": "pcm", "stream": True, "max_len": 12, "seed": 5}
    raw = post(app, body | {"stream_format": "audio"})
    assert raw.headers["content-type"].startswith("audio/pcm") and raw.content
    events = post(app, body)
    assert events.headers["content-type"].startswith("text/event-stream")
    deltas = [json.loads(line[6:]) for line in events.text.splitlines() if line.startswith("data: ")]
    assert deltas[-1]["type"] == "speech.audio.done"
    assert b"".join(base64.b64decode(e["audio"]) for e in deltas[:-1]) == raw.content


def test_a_clip_as_a_data_url_clones_and_with_its_transcript_is_continued(app):
    clip = clip_data_url()
    for body, mode in (({"ref_audio": clip}, "cloning"),
                       ({"ref_audio": clip, "ref_text": "A short tone."}, "ultimate"),
                       ({"ref_audio": clip, "prompt_audio": clip, "prompt_text": "A short tone."}, "ultimate")):
        response = post(app, {"input": TEXT, "voice": "default", "response_format": "wav", "max_len": 12} | body)
        assert response.status_code == 200, response.text
        assert app.worker.get(response.headers["x-request-id"]).mode == mode
    for url, said in (("https://example.com/a.wav", "fetches no URLs"), ("/etc/passwd", "reads no paths")):
        response = post(app, {"input": TEXT, "voice": "default", "ref_audio": url})
        assert response.status_code == 400 and said in response.json()["error"]["message"]
        assert response.json()["error"]["param"] == "ref_audio"


def test_a_session_keeps_one_seed_so_its_utterances_share_one_voice(app):
    config = {k: v for k, v in VLLM.items() if k != "seed"} | {"response_format": "pcm", "max_new_tokens": 12}
    with socket(app) as ws:
        first = speak(ws, config, ["The same words, twice."])
        ws.send(json.dumps({"type": "input.text", "text": "The same words, twice."}))
        ws.send(json.dumps({"type": "input.done"}))
        second = utterance(ws)
    assert first["audio"] and first["audio"] == second["audio"]


def test_the_docs_say_what_each_accepted_and_unused_field_of_vllm_omni_is():
    from pathlib import Path

    from ui.http.speech_body import IGNORED

    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = docs[docs.index("vLLM-Omni's fields for its other models"):]
    section = section[:section.index("- **Where vLLM-Omni and OpenAI differ")]
    assert [name for name in IGNORED if f"`{name}`" not in section] == []


def test_a_client_whose_config_was_refused_is_let_go_at_its_input_done_not_left_waiting(app):
    """vLLM-Omni's client sends its text and input.done right after the config, and waits for
    session.done: with no voice in force none can come, so the socket closes at once, saying why."""
    started = time.monotonic()
    with socket(app) as ws:
        ws.send(json.dumps(VLLM | {"ref_audio": "/etc/passwd", "speaker": None}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        errors = []
        with pytest.raises(ConnectionClosed):
            while True:
                errors.append(json.loads(ws.recv(timeout=30))["message"])
    assert "reads no paths" in errors[0] and "no session.config in force" in errors[-1]
    assert time.monotonic() - started < 10


def test_a_clip_of_seconds_sent_in_the_body_as_vllm_omnis_client_sends_it_is_taken(app):
    """Its openai_speech_client.py sends the whole reference file as a data: URL: ten seconds of
    48 kHz WAV is about 1.3 MB of JSON, past the 256 KB a body without a clip may hold."""
    import io as _io

    out = _io.BytesIO()
    sf.write(out, 0.2 * np.sin(2 * np.pi * 220 * np.arange(480000) / 48000), 48000, format="WAV")
    clip = "data:audio/wav;base64," + base64.b64encode(out.getvalue()).decode()
    response = post(app, {"model": "voxcpm2", "input": TEXT, "voice": "default", "response_format": "wav",
                          "ref_audio": clip, "max_len": 8})
    assert response.status_code == 200, response.text[:300]
    assert sf.info(io.BytesIO(response.content)).frames > 0
