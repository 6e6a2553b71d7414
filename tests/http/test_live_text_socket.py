"""WS /v1/audio/speech/stream (issue 46, ui/http/live.py) through a real WebSocket client (the
`websockets` package) against the app on loopback: text sent in pieces of any size is spoken as
when sent whole, clause by clause in one voice; an interrupt stops the audio within a patch and
the next text starts afresh; every bad input gets an error event naming what is accepted, and
the session goes on where it can."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ..support.workbench_page import slowed

TEXT = ("Good evening, and welcome to the late news. Here are tonight's top stories, "
        "read slowly and clearly for everyone listening at home.")
CONFIG = {"type": "session.config", "voice": "design", "instructions": "A calm voice", "seed": 7, "max_len": 40,
          "split_granularity": "clause", "response_format": "pcm"}
PATCH_BYTES = 3840 * 2  # one 160 ms patch of 16-bit PCM at 24 kHz


@pytest.fixture(scope="module")
def app(serve_app):
    return serve_app(min_clause_chars=12, commit_after_s=5.0)  # no commit by a pause in these tests' sending


def socket(app, **kw):
    return connect(app.url.replace("http://", "ws://") + "/v1/audio/speech/stream", open_timeout=30, **kw)


def utterance(ws, timeout: float = 120.0) -> dict:
    """Everything the server sends until session.done: the events, the audio and the errors."""
    got = {"events": [], "audio": b"", "errors": []}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = ws.recv(timeout=deadline - time.monotonic())
        if isinstance(message, bytes):
            got["audio"] += message
            continue
        event = json.loads(message)
        got["events"].append(event)
        if event["type"] == "error":
            got["errors"].append(event["message"])
        if event["type"] == "session.done":
            return got
    raise AssertionError(f"no session.done within {timeout} s: {got['events']}")


def protocol(event: dict) -> dict:
    """The event as vLLM-Omni defines it: without our `request_id` (audio.start and session.done of
    an utterance that was spoken), which its clients ignore; checked to be there first."""
    out = dict(event)
    if out["type"] in ("audio.start", "session.done") and out.get("total_sentences") != 0:
        assert isinstance(out.pop("request_id"), str), event
    return out


def speak_in_pieces(app, size: int, config=CONFIG) -> dict:
    with socket(app) as ws:
        ws.send(json.dumps(config))
        for at in range(0, len(TEXT), size):
            ws.send(json.dumps({"type": "input.text", "text": TEXT[at:at + size]}))
        ws.send(json.dumps({"type": "input.done"}))
        return utterance(ws)


def test_pieces_of_any_size_are_spoken_as_the_whole_text_clause_by_clause(app):
    whole = speak_in_pieces(app, len(TEXT))
    assert not whole["errors"] and whole["audio"]
    starts = [e for e in whole["events"] if e["type"] == "audio.start"]
    # Clauses as committed: each ends at punctuation and holds at least 12 characters.
    assert [e["sentence_text"] for e in starts] == ["Good evening,", " and welcome to the late news.",
                                                    " Here are tonight's top stories,",
                                                    " read slowly and clearly for everyone listening at home."]
    assert all(e["format"] == "pcm" and e["sample_rate"] == 24000 for e in starts)
    done = [e for e in whole["events"] if e["type"] == "audio.done"]
    assert [e["sentence_index"] for e in done] == [0, 1, 2, 3] and not any(e["error"] for e in done)
    assert sum(e["total_bytes"] for e in done) == len(whole["audio"])
    assert protocol(whole["events"][-1]) == {"type": "session.done", "utterance_index": 0, "total_sentences": 4}
    for size in (1, 7, 40):
        pieces = speak_in_pieces(app, size)
        assert pieces["audio"] == whole["audio"], size
        assert [e["sentence_text"] for e in pieces["events"] if e["type"] == "audio.start"] == \
            [e["sentence_text"] for e in starts]


def test_the_request_id_on_audio_start_and_session_done_gives_the_utterances_figures_and_build(app):
    import httpx

    got = speak_in_pieces(app, 9)
    ids = {e["request_id"] for e in got["events"] if e["type"] in ("audio.start", "session.done")}
    assert len(ids) == 1, "one utterance, one request"
    status = httpx.get(f"{app.url}/voxcpm/jobs/{ids.pop()}", timeout=30).json()
    assert status["state"] == "done" and status["model"] and status["app_version"]
    assert status["generation_s"] > 0 and status["output_samples"] * 2 == len(got["audio"])
    assert status["output_rate"] == 24000 and status["ttfp_s"] > 0


def test_stream_audio_sends_each_piece_as_it_is_made_and_the_same_samples(app):
    one = speak_in_pieces(app, 9)
    with socket(app) as ws:
        ws.send(json.dumps(CONFIG | {"stream_audio": True}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        frames = []
        while True:
            message = ws.recv(timeout=120)
            if isinstance(message, bytes):
                frames.append(message)
            elif json.loads(message)["type"] == "session.done":
                break
    assert len(frames) > 3 and b"".join(frames) == one["audio"]


def test_with_the_send_log_on_each_sentences_first_audio_is_logged_as_it_leaves(app, caplog):
    # bench/lab/step_trace.py turns voxcpm.sends on to tell a seam sent late from one made late
    def logged():
        return [json.loads(r.getMessage()) for r in caplog.records if r.name == "voxcpm.sends"]

    streamed = CONFIG | {"stream_audio": True}
    caplog.set_level(logging.INFO, logger="voxcpm.sends")
    speak_in_pieces(app, 9, streamed)
    assert logged() == []  # off: nothing
    caplog.set_level(logging.DEBUG, logger="voxcpm.sends")
    got = speak_in_pieces(app, 9, streamed)
    starts = [e["sentence_index"] for e in got["events"] if e["type"] == "audio.start"]
    lines = logged()
    assert starts == [0, 1, 2, 3] and [line["sentence"] for line in lines] == starts
    assert all(0.0 <= line["sent_after_ms"] < 60_000 for line in lines), lines
    assert [line["t"] for line in lines] == sorted(line["t"] for line in lines)


def test_an_interrupt_stops_the_audio_within_a_patch_and_the_next_text_starts_afresh(app):
    long = CONFIG | {"stream_audio": True, "max_len": 400}
    # Slower than real time, so the server is not patches ahead of what it has sent.
    with slowed(app, 0.2), socket(app) as ws:
        ws.send(json.dumps(long))
        ws.send(json.dumps({"type": "input.text", "text": TEXT * 3}))
        while not isinstance(ws.recv(timeout=60), bytes):  # the first audio
            pass
        ws.send(json.dumps({"type": "input.interrupt"}))
        after, events = 0, []
        while True:
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                after += len(message)
                continue
            events.append(json.loads(message))
            if events[-1]["type"] == "session.done":
                break
        # What was already on its way when the interrupt landed: the patch in flight and the one being sent.
        assert after <= 3 * PATCH_BYTES, after
        assert events[-1]["interrupted"] is True and events[-1]["utterance_index"] == 0
        ws.send(json.dumps({"type": "input.text", "text": "A fresh start after the interruption."}))
        ws.send(json.dumps({"type": "input.done"}))
        again = utterance(ws)
        assert again["audio"] and not again["errors"]
        assert again["events"][0]["sentence_text"] == "A fresh start after the interruption."
        assert again["events"][-1]["utterance_index"] == 1


def test_a_session_speaks_several_utterances_and_a_flush_with_nothing_is_no_utterance(app):
    with socket(app) as ws:
        ws.send(json.dumps(CONFIG))
        ws.send(json.dumps({"type": "input.done"}))  # nothing said since the config: no session.done for it
        for index in (0, 1):
            ws.send(json.dumps({"type": "input.text", "text": "One more short utterance, spoken whole."}))
            ws.send(json.dumps({"type": "input.done"}))
            got = utterance(ws)
            assert got["audio"] and got["events"][-1]["utterance_index"] == index


@pytest.mark.parametrize("send, said", [
    (b"\x00\x01", "binary frames are not accepted"),
    ("{not json", "not JSON"),
    (json.dumps({"type": "input.speak"}), "unknown message type 'input.speak'"),
    (json.dumps({"type": "input.text", "text": 5}), "needs `text`, a string"),
    (json.dumps(CONFIG | {"voice": "nobody-by-this-name"}), "no voice named"),
    (json.dumps(CONFIG | {"response_format": "aac"}), "response_format 'aac' is not supported"),
    (json.dumps(CONFIG | {"response_format": "mp3", "stream_audio": True}), 'set response_format "pcm"'),
    (json.dumps(CONFIG | {"stream_format": "sse"}), "unknown parameter 'stream_format'"),
    (json.dumps(CONFIG | {"split_granularity": "word"}), "split_granularity"),
    (json.dumps(CONFIG | {"speed": 9}), "speed"),
])
def test_bad_input_is_an_error_event_naming_what_is_accepted_and_the_session_goes_on(app, send, said):
    with socket(app) as ws:
        ws.send(send)
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and said in error["message"], error
        ws.send(json.dumps(CONFIG))
        ws.send(json.dumps({"type": "input.text", "text": "Still here after the error, and speaking."}))
        ws.send(json.dumps({"type": "input.done"}))
        got = utterance(ws)
        assert got["audio"] and not got["errors"]


def test_text_before_a_config_is_refused_and_a_config_is_refused_while_text_is_open(app):
    with socket(app) as ws:
        ws.send(json.dumps({"type": "input.text", "text": "Too early."}))
        assert "send session.config first" in json.loads(ws.recv(timeout=30))["message"]
        ws.send(json.dumps(CONFIG))
        ws.send(json.dumps({"type": "input.text", "text": "Half a clause"}))
        ws.send(json.dumps(CONFIG | {"seed": 8}))
        assert "refused while an utterance is open" in json.loads(ws.recv(timeout=30))["message"]
        ws.send(json.dumps({"type": "input.done"}))
        got = utterance(ws)
        assert got["events"][0]["sentence_text"] == "Half a clause" and not got["errors"]


@pytest.fixture(scope="module")
def strict(serve_app):
    from ..support.app_helpers import load_engine

    return serve_app(engine=load_engine(max_text_chars=60), max_pieces_per_s=5, session_idle_s=1.0, commit_after_s=0.3)


def test_text_past_the_sessions_limit_is_refused_and_what_fits_is_spoken(strict):
    with socket(strict) as ws:
        ws.send(json.dumps(CONFIG))
        ws.send(json.dumps({"type": "input.text", "text": "A first clause that fits, "}))
        ws.send(json.dumps({"type": "input.text", "text": "x" * 40}))
        ws.send(json.dumps({"type": "input.done"}))
        got = utterance(ws)
        assert any("would pass 60 characters" in e for e in got["errors"]) and got["audio"]


def test_pieces_faster_than_the_bound_close_the_session_with_the_reason(strict):
    with socket(strict) as ws:
        ws.send(json.dumps(CONFIG))
        for _ in range(8):
            ws.send(json.dumps({"type": "input.text", "text": "a "}))
        messages = []
        with pytest.raises(ConnectionClosed):
            while True:
                messages.append(ws.recv(timeout=30))
        assert any("more than 5 input.text messages in a second" in m for m in messages if isinstance(m, str))


def test_an_idle_session_is_closed_with_the_reason_and_words_left_waiting_are_spoken(strict):
    with socket(strict) as ws:
        ws.send(json.dumps(CONFIG))
        ws.send(json.dumps({"type": "input.text", "text": "words that stop coming"}))  # no clause end
        events = []
        with pytest.raises(ConnectionClosed):
            while True:
                message = ws.recv(timeout=30)
                if isinstance(message, str):
                    events.append(json.loads(message))
        starts = [e for e in events if e["type"] == "audio.start"]
        assert starts and starts[0]["sentence_text"] == "words that stop"  # up to the last whole word
        assert any(e["type"] == "error" and "sent nothing for 1 s" in e["message"] for e in events)


@pytest.fixture(scope="module")
def pausing(serve_app):
    return serve_app(commit_after_s=0.3, session_idle_s=60.0)  # the idle clock looks every 12 s


def test_pieces_that_stop_are_spoken_a_pause_later_however_seldom_the_idle_clock_looks(pausing):
    with socket(pausing) as ws:
        ws.send(json.dumps(CONFIG))
        time.sleep(1.0)  # the session's watch is asleep when the text comes
        sent = time.monotonic()
        ws.send(json.dumps({"type": "input.text", "text": "words that stop coming"}))  # no clause end
        while True:
            event = json.loads(message) if isinstance(message := ws.recv(timeout=30), str) else {}
            if event.get("type") == "audio.start":
                break
        # commit_after_s after the last piece, plus the first patch: far from the idle clock's 12 s
        assert time.monotonic() - sent < 6.0
        assert event["sentence_text"] == "words that stop"


@pytest.fixture(scope="module")
def private(serve_app):
    return serve_app(token="live-text-token-1")


def test_with_a_token_a_socket_needs_it_as_a_header_or_in_the_url(private):
    with pytest.raises(Exception):
        with socket(private) as ws:
            ws.recv(timeout=10)
    for kw, suffix in (({"additional_headers": {"Authorization": "Bearer live-text-token-1"}}, ""),
                       ({}, "?token=live-text-token-1")):
        url = private.url.replace("http://", "ws://") + "/v1/audio/speech/stream" + suffix
        with connect(url, open_timeout=30, **kw) as ws:
            ws.send(json.dumps(CONFIG))
            ws.send(json.dumps({"type": "input.text", "text": "Let me in with the token, please."}))
            ws.send(json.dumps({"type": "input.done"}))
            assert utterance(ws)["audio"]


def test_the_client_in_the_docs_speaks_as_it_says(app, tmp_path, monkeypatch):
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = docs[docs.index("## Live text over a WebSocket"):]
    example = section[section.index("```python") + len("```python"):]
    example = example[:example.index("```")]
    assert "ws://127.0.0.1:7860/v1/audio/speech/stream" in example
    monkeypatch.chdir(tmp_path)
    exec(example.replace("ws://127.0.0.1:7860", app.url.replace("http://", "ws://")), {})  # noqa: S102 - our own docs
    audio = (tmp_path / "live.pcm").read_bytes()
    assert len(audio) >= 2 * 3840 and len(audio) % 2 == 0


def test_a_client_that_leaves_mid_utterance_frees_its_row_and_leaves_no_job_behind(app):
    from ..support.app_helpers import wait_until

    with slowed(app, 0.1):
        ws = socket(app)
        ws.send(json.dumps(CONFIG | {"stream_audio": True, "max_len": 400}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))  # no input.done: the stream would wait for more
        while not isinstance(ws.recv(timeout=60), bytes):
            pass
        assert app.worker.held == 1
        ws.close()
        wait_until(lambda: app.worker.held == 0, timeout=30)
    assert app.worker.running == 0


def test_an_utterance_sent_while_the_one_before_plays_is_heard_after_it_and_an_interrupt_stops_both(app):
    with slowed(app, 0.2), socket(app) as ws:
        ws.send(json.dumps(CONFIG | {"stream_audio": True, "max_len": 400}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        ws.send(json.dumps({"type": "input.text", "text": "A second utterance, queued behind the first."}))
        ws.send(json.dumps({"type": "input.done"}))
        while not isinstance(ws.recv(timeout=60), bytes):  # the first one's audio: the socket still reads messages
            pass
        ws.send(json.dumps({"type": "input.interrupt"}))
        done = []
        while len(done) < 2:
            message = ws.recv(timeout=60)
            if isinstance(message, str) and json.loads(message)["type"] == "session.done":
                done.append(json.loads(message))
        assert [d["utterance_index"] for d in done] == [0, 1] and all(d.get("interrupted") for d in done), done


@pytest.fixture(scope="module")
def budget(serve_app):
    from inference.config import Limits

    return serve_app(limits=Limits(max_backlog_s=3.0, max_unread_s=4.0), send_buffer_bytes=16 * 1024,
                     stall_timeout_s=1.0)


def test_a_client_that_stops_reading_is_closed_its_audio_dropped_and_its_row_freed(budget, caplog):
    from ..support.app_helpers import wait_until
    from .test_idle_connections_cannot_pin_memory import unread_seconds

    caplog.set_level("INFO", logger="voxcpm")

    # A raw socket that upgrades and then never reads: the server's frames fill its buffers.
    import base64
    import os
    import socket as sockets

    host, port = budget.url.removeprefix("http://").split(":")
    raw = sockets.socket()
    raw.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, 4096)
    raw.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall(("GET /v1/audio/speech/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:  # the upgrade first: frames sent with the request would be the HTTP parser's
        answer += raw.recv(1)
    assert answer.startswith(b"HTTP/1.1 101"), answer

    def frame(message: dict) -> bytes:  # a masked text frame, as a client must send
        data, mask = json.dumps(message).encode(), os.urandom(4)
        head = bytes([0x81]) + (bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + len(data).to_bytes(2, "big"))
        return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    try:
        raw.sendall(frame(CONFIG | {"stream_audio": True, "max_len": 400}))
        raw.sendall(frame({"type": "input.text", "text": TEXT * 3}))
        raw.sendall(frame({"type": "input.done"}))
        wait_until(lambda: budget.worker.held == 1, timeout=30)
        wait_until(lambda: budget.worker.held == 0, timeout=120)  # stopped, or spoken to nobody
        wait_until(lambda: "read none of its audio for 1 s" in caplog.text, timeout=30)
        raw.settimeout(30)
        while raw.recv(65536):  # what the buffers held, then the server closes the connection
            pass
        # Nothing waits for it any more: the unread-audio count of every job is back to zero.
        wait_until(lambda: unread_seconds(budget) == 0, timeout=30)
    finally:
        raw.close()


def wav_tone(seconds: float = 1.0, rate: int = 16000) -> bytes:
    import io

    import numpy as np
    import soundfile as sf

    out = io.BytesIO()
    sf.write(out, 0.2 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * rate)) / rate), rate, format="WAV")
    return out.getvalue()


def clip_data_url() -> str:
    import base64

    return "data:audio/wav;base64," + base64.b64encode(wav_tone(3.0)).decode()  # a message of 128 KB


def test_a_clip_and_its_transcript_clone_the_voice_and_an_uploaded_clip_takes_a_style(app):
    import httpx

    base = {k: v for k, v in CONFIG.items() if k not in ("voice", "instructions")}
    with socket(app) as ws:
        ws.send(json.dumps(base | {"ref_audio": clip_data_url(), "ref_text": "A short tone for the voice."}))
        ws.send(json.dumps({"type": "input.text", "text": "Spoken in the clip's voice, continued from it."}))
        ws.send(json.dumps({"type": "input.done"}))
        got = utterance(ws)
        assert got["audio"] and not got["errors"], got["errors"]
    reference_id = httpx.post(app.url + "/voxcpm/upload", content=wav_tone(), timeout=60,
                              headers={"Content-Type": "application/octet-stream"}).json()["id"]
    with socket(app) as ws:
        ws.send(json.dumps(base | {"reference_id": reference_id, "instructions": "Whispering"}))
        ws.send(json.dumps({"type": "input.text", "text": "Cloned from the uploaded clip, in a style."}))
        ws.send(json.dumps({"type": "input.done"}))
        got = utterance(ws)
        assert got["audio"] and not got["errors"], got["errors"]


@pytest.mark.parametrize("change, said", [
    ({"ref_audio": "https://example.com/clip.wav"}, "fetches no URLs"),
    ({"ref_audio": "data:audio/wav;base64,@@@"}, "not valid base64"),
    ({"ref_audio": "CLIP", "voice": "alloy"}, "not both"),
    ({"ref_text": "a transcript without its clip"}, "send the clip too"),
    ({"ref_audio": "CLIP", "min_len": 3}, "unknown parameter 'min_len'"),
    ({"ref_audio": "/etc/passwd"}, "reads no paths"),
    ({"reference_id": "no-such-clip"}, "expired or was never uploaded"),
])
def test_a_bad_clip_in_the_config_is_an_error_naming_what_is_accepted(app, change, said):
    config = {k: v for k, v in CONFIG.items() if k not in ("voice", "instructions")} | change
    if config.get("ref_audio") == "CLIP":
        config["ref_audio"] = clip_data_url()
    with socket(app) as ws:
        ws.send(json.dumps(config))
        error = json.loads(ws.recv(timeout=30))
        assert error["type"] == "error" and said in error["message"], error


def test_the_socket_sends_audio_uncompressed_whatever_the_client_offers(app):
    """A `websockets` client offers permessage-deflate; PCM hardly shrinks, and compressing every
    frame would cost the event loop that serves every session."""
    with socket(app) as ws:
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
        ws.send(json.dumps(CONFIG))
        ws.send(json.dumps({"type": "input.text", "text": "Uncompressed, please."}))
        ws.send(json.dumps({"type": "input.done"}))
        assert utterance(ws)["audio"]
