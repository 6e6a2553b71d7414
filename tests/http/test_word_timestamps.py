"""Word timestamps and subtitles over HTTP (issue 47): asked for with `timestamps: "word"`, each
segment's words come as a frame of their own (an SSE event on the OpenAI route) once the analysis
process has aligned them, timed on the audio sent; never in the default path; the job's status,
its words URL and its subtitles give the same words; any take can be aligned by upload. The
recognizer here is the scripted stand-in (tests/fixtures/analysis_stand_ins.py), which spreads a
text's words evenly over its clip, so where each word must land is known."""
from __future__ import annotations

import base64
import io
import json
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from inference.analysis.alignment import units
from ui.http.frames import AUDIO, META, STATUS, WORDS

from ..fixtures import analysis_stand_ins
from ..fixtures.frames import read_frames

TEXT = "Hello there, my friend. [pause 500ms] How are you today?"
SEGMENTS = ["Hello there, my friend.", "How are you today?"]
BODY = {"text": TEXT, "seed": 4, "max_len": 12, "timestamps": "word"}
RATE = 48000


@pytest.fixture(scope="module")
def app(serve_app):
    return analysis_stand_ins.serve_scripted(serve_app)


@pytest.fixture(scope="module")
def framed(app):
    response = httpx.post(app.url + "/voxcpm/stream", json=BODY, params={"format": "frames"}, timeout=120)
    assert response.status_code == 200, response.text
    return read_frames(response.content)


def audio_of(frames) -> np.ndarray:
    return np.concatenate([v for k, v in frames if k == AUDIO])


def test_each_segment_gets_a_words_frame_with_its_text_in_order_before_the_status(framed):
    words = [v for k, v in framed if k == WORDS]
    assert [w["segment"] for w in words] == [0, 1]
    for frame, text in zip(words, SEGMENTS):
        assert "error" not in frame
        assert [w["word"] for w in frame["words"]] == units(text, False)
        assert {w["segment"] for w in frame["words"]} == {frame["segment"]}
    assert framed[-1][0] == STATUS and all(k != WORDS for k, _ in framed[framed.index(next(
        (k, v) for k, v in framed if k == WORDS and v["segment"] == 1)) + 1:-1])


def test_words_are_timed_on_the_audio_sent_within_their_segment(framed):
    status = framed[-1][1]
    ends = [0] + status["segment_ends"]
    for frame in (v for k, v in framed if k == WORDS):
        i = frame["segment"]
        lo, hi = ends[i] / RATE, ends[i + 1] / RATE
        times = [(w["start_s"], w["end_s"]) for w in frame["words"]]
        assert all(lo - 1e-3 <= a < b <= hi + 1e-3 for a, b in times), (times, lo, hi)
        assert all(b1 <= a2 + 1e-3 for (_, b1), (a2, _) in zip(times, times[1:])), "in order, not overlapping"
        # The stand-in spreads the words evenly over the segment's audio (its pause included, which
        # the segment's audio holds): the first starts where the segment does.
        assert times[0][0] == pytest.approx(lo, abs=2e-3)
    # ...and the last segment's last word ends with the audio: none of it was left out of its clip.
    assert times[-1][1] == pytest.approx(ends[-1] / RATE, abs=2e-3)
    # The first segment's clip stops where its pause's silence begins: the silence holds no words.
    first = [v for k, v in framed if k == WORDS][0]["words"]
    pause_at = next(m["offset"] for k, m in framed if k == META and m["pause"]) / RATE
    assert first[-1]["end_s"] == pytest.approx(pause_at, abs=2e-3)
    assert audio_of(framed).size == status["samples"]


def test_the_first_segments_words_come_while_the_stream_still_plays(framed):
    kinds = [k for k, _ in framed]
    first_words = next(i for i, (k, v) in enumerate(framed) if k == WORDS and v["segment"] == 0)
    assert META in kinds[first_words:], "the first segment's words waited for the end of the audio"


def test_the_status_the_job_and_its_urls_give_the_same_words(client, framed):
    status = framed[-1][1]
    sent = [w for k, v in framed if k == WORDS for w in v["words"]]
    assert status["timestamps"] == "word" and status["words"] == sent
    job = status["id"]
    assert client.get(f"/voxcpm/jobs/{job}").json()["words"] == sent
    assert client.get(f"/voxcpm/jobs/{job}/words").json()["words"] == sent
    srt = client.get(f"/voxcpm/jobs/{job}/subtitles.srt")
    assert srt.status_code == 200 and srt.headers["content-type"].startswith("application/x-subrip")
    assert 'filename="' in srt.headers["content-disposition"]
    assert srt.text.startswith("1\n00:00:00,000 --> ") and "Hello there, my friend." in srt.text
    vtt = client.get(f"/voxcpm/jobs/{job}/subtitles.vtt")
    assert vtt.headers["content-type"].startswith("text/vtt") and vtt.text.startswith("WEBVTT\n\n")
    assert client.get(f"/voxcpm/jobs/{job}/subtitles.txt").status_code == 400


def test_the_default_path_aligns_nothing(app, client):
    before = app.app.state.ctx.analysis.submitted.get("align", 0)
    response = client.post("/voxcpm/stream", json={**BODY, "timestamps": "none"}, params={"format": "frames"})
    got = read_frames(response.content)
    assert all(k != WORDS for k, _ in got) and "words" not in got[-1][1]
    plain = client.post("/voxcpm/stream", json={k: v for k, v in BODY.items() if k != "timestamps"})
    assert plain.status_code == 200
    assert app.app.state.ctx.analysis.submitted.get("align", 0) == before
    missing = client.get(f"/voxcpm/jobs/{got[-1][1]['id']}/words")
    assert missing.status_code == 404 and "timestamps" in missing.json()["error"] and "/voxcpm/align" in missing.json()["error"]


def test_bare_pcm_with_timestamps_keeps_its_samples_and_the_job_has_the_words(client, framed):
    response = client.post("/voxcpm/stream", json=BODY)
    assert response.status_code == 200 and response.headers["content-type"].startswith("audio/pcm")
    assert np.array_equal(np.frombuffer(response.content, "<i2"), audio_of(framed)), "the same samples"
    words = client.get(f"/voxcpm/jobs/{response.headers['x-request-id']}/words").json()["words"]
    assert [w["word"] for w in words] == units(SEGMENTS[0], False) + units(SEGMENTS[1], False)


def test_an_unknown_timestamps_value_is_refused_naming_the_accepted_ones(client):
    response = client.post("/voxcpm/stream", json={**BODY, "timestamps": "sentence"})
    assert response.status_code == 400
    assert "'none'" in response.json()["error"] and "'word'" in response.json()["error"]
    spec = client.get("/voxcpm/spec").json()
    assert spec["timestamps"] == ["none", "word"] and spec["frames"]["kinds"]["W"] == "words"


def test_openai_sse_sends_a_words_event_per_segment_before_done(client):
    body = {"model": "voxcpm2", "input": TEXT, "voice": "alloy", "response_format": "pcm", "stream_format": "sse",
            "seed": 4, "max_len": 6, "timestamps": "word"}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and kinds.count("speech.audio.words") == 2
    words = [e for e in events if e["type"] == "speech.audio.words"]
    assert [[w["word"] for w in e["words"]] for e in words] == [units(s, False) for s in SEGMENTS]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    seconds = len(pcm) / 2 / 24000  # pcm at 24 kHz, as OpenAI's
    assert 0 < words[-1]["words"][-1]["end_s"] <= seconds + 1e-3
    plain = client.post("/v1/audio/speech", json={**body, "timestamps": "none"})
    assert "speech.audio.words" not in plain.text


def test_openai_refuses_timestamps_without_sse_and_unknown_values_naming_the_parameter(client):
    base = {"model": "voxcpm2", "input": "Hi.", "voice": "alloy", "timestamps": "word"}
    audio = client.post("/v1/audio/speech", json=base)
    assert audio.status_code == 400 and audio.json()["error"]["param"] == "timestamps"
    assert "sse" in audio.json()["error"]["message"]
    bad = client.post("/v1/audio/speech", json={**base, "stream_format": "sse", "timestamps": "phoneme"})
    assert bad.status_code == 400 and "none, word" in bad.json()["error"]["message"]


def wav(seconds: float) -> bytes:
    out = io.BytesIO()
    noise = np.random.default_rng(0).normal(0, 0.1, int(seconds * 16000)).astype(np.float32)
    sf.write(out, noise, 16000, format="WAV", subtype="PCM_16")
    return out.getvalue()


def test_any_take_is_aligned_by_upload_as_words_or_subtitles(client):
    files = {"file": ("take.wav", wav(4.0), "audio/wav")}
    got = client.post("/voxcpm/align", files=files, data={"text": "One two three four."})
    assert got.status_code == 200, got.text
    words = got.json()["words"]
    assert [w["word"] for w in words] == ["One", "two", "three", "four."]
    assert [w["start_s"] for w in words] == pytest.approx([0, 1, 2, 3], abs=0.01), "spread over the 4 s"
    segments = json.dumps([{"text": "One two.", "end_s": 1.0}, {"text": "你好", "end_s": 4.0}])
    split = client.post("/voxcpm/align", files=files, data={"segments": segments}).json()["words"]
    assert [(w["word"], w["segment"]) for w in split] == [("One", 0), ("two.", 0), ("你", 1), ("好", 1)]
    assert split[2]["start_s"] == pytest.approx(1.0, abs=0.01), "a segment's words start where it does"
    vtt = client.post("/voxcpm/align", params={"format": "vtt"}, files=files, data={"text": "One two three four."})
    assert vtt.headers["content-type"].startswith("text/vtt")
    assert vtt.text.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:04.000\nOne <00:00:01.000>two")


def test_a_take_with_only_pauses_gives_empty_valid_subtitles(client):
    files = {"file": ("take.wav", wav(1.0), "audio/wav")}
    srt = client.post("/voxcpm/align", params={"format": "srt"}, files=files, data={"text": "[pause 500ms]"})
    vtt = client.post("/voxcpm/align", params={"format": "vtt"}, files=files, data={"text": "[pause 500ms]"})
    assert srt.status_code == 200 and srt.text == ""
    assert vtt.status_code == 200 and vtt.text == "WEBVTT\n\n"


def test_align_refuses_a_bad_form_and_an_unknown_format(client):
    files = {"file": ("take.wav", wav(1.0), "audio/wav")}
    assert client.post("/voxcpm/align", files=files).status_code == 400
    extra = client.post("/voxcpm/align", files=files, data={"text": "Hi", "voice": "x"})
    assert extra.status_code == 400 and "unknown field 'voice'" in extra.json()["error"]
    fmt = client.post("/voxcpm/align", params={"format": "ass"}, files=files, data={"text": "Hi"})
    assert fmt.status_code == 400 and "srt or vtt" in fmt.json()["error"]


def test_without_an_aligner_timestamps_are_refused_at_once_and_plain_requests_still_play(serve_app):
    app = serve_app(recognizer=None, speaker=None)
    with httpx.Client(base_url=app.url, timeout=120) as client:
        refused = client.post("/voxcpm/stream", json=BODY)
        assert refused.status_code == 503 and "word timestamps are not available" in refused.json()["error"]
        assert "--asr-model" in refused.json()["error"]
        sse = client.post("/v1/audio/speech", json={"model": "voxcpm2", "input": "Hi.", "voice": "alloy",
                                                    "stream_format": "sse", "timestamps": "word"})
        assert sse.status_code == 503
        # Issue 60: a model that is not there is no overload: OpenAI's clients read the type.
        assert sse.json()["error"]["type"] == "service_unavailable", sse.json()
        align = client.post("/voxcpm/align", files={"file": ("t.wav", wav(1.0), "audio/wav")}, data={"text": "Hi"})
        assert align.status_code == 503
        assert client.post("/voxcpm/stream", json={**BODY, "timestamps": "none"}).status_code == 200


def test_when_the_aligner_is_full_the_stream_plays_whole_and_says_why_words_are_missing(serve_app):
    app = analysis_stand_ins.serve_scripted(serve_app, "slow@2", max_pending_words=1)
    analysis = app.app.state.ctx.analysis
    with httpx.Client(base_url=app.url, timeout=120) as client:
        holder = analysis.align(__import__("inference.analysis.evaluation", fromlist=["Take"]).Take(
            np.zeros(16000, np.float32), [("busy now", 0.0, 1.0)], None, False))
        got = read_frames(client.post("/voxcpm/stream", json=BODY, params={"format": "frames"}).content)
        holder.result(60)
    words = [v for k, v in got if k == WORDS]
    assert got[-1][0] == STATUS and got[-1][1]["outcome"] == "ok"
    assert audio_of(got).size == got[-1][1]["samples"], "the audio is whole"
    assert words and all(w["words"] == [] and "busy" in w["error"] for w in words[:1])


def test_words_waiting_in_numbers_leave_room_for_a_persons_transcript(serve_app):
    """A burst of streams' segments may queue for their words (max_pending_words) without taking the
    places of the jobs a person waits for (max_pending): a transcript is still taken at once."""
    app = analysis_stand_ins.serve_scripted(serve_app, "slow@1", max_pending=1, max_pending_words=4)
    analysis = app.app.state.ctx.analysis
    take = __import__("inference.analysis.evaluation", fromlist=["Take"]).Take(
        np.zeros(16000, np.float32), [("one two", 0.0, 1.0)], None, False)
    words = [analysis.align(take) for _ in range(4)]
    transcript = analysis.transcribe(16000, np.zeros(16000, np.float32))
    with pytest.raises(Exception, match="busy"):
        analysis.align(take)
    assert transcript.result(60) == "slow"
    assert all([w["word"] for w in f.result(60)] == ["one", "two"] for f in words)


def test_an_aligner_that_cannot_load_is_a_503_saying_why_on_every_call_never_a_500(serve_app, tmp_path):
    """Issue 60: once the app's memory of the failure ran out (retry_after_s), the next /align went
    to the analysis process, whose refusal escaped as a 500."""
    app = serve_app(recognizer=str(tmp_path / "no-whisper-here"), speaker=None, retry_after_s=0.3)
    with httpx.Client(base_url=app.url, timeout=120) as client:
        for _ in range(3):
            align = client.post("/voxcpm/align", files={"file": ("t.wav", wav(1.0), "audio/wav")}, data={"text": "Hi"})
            assert align.status_code == 503, align.text
            assert "could not be loaded" in align.json()["error"] and "does not exist" in align.json()["error"]
            time.sleep(0.4)


def test_a_jobs_words_and_subtitles_say_why_when_the_aligner_could_not_make_them(serve_app, tmp_path):
    """Issue 60: the stream played whole with the reason in its words frames, but its words URL then
    answered an empty list and its subtitles empty files, as if nothing had been said."""
    app = serve_app(recognizer=str(tmp_path / "no-whisper-here"), speaker=None)
    with httpx.Client(base_url=app.url, timeout=120) as client:
        got = read_frames(client.post("/voxcpm/stream", json=BODY, params={"format": "frames"}).content)
        assert got[-1][0] == STATUS and audio_of(got).size == got[-1][1]["samples"], "the audio is whole"
        assert all("could not be loaded" in v["error"] for k, v in got if k == WORDS)
        job = got[-1][1]["id"]
        for path in (f"/voxcpm/jobs/{job}/words", f"/voxcpm/jobs/{job}/subtitles.srt", f"/voxcpm/jobs/{job}/subtitles.vtt"):
            answer = client.get(path)
            assert answer.status_code == 503, (path, answer.status_code, answer.text)
            assert "could not be loaded" in answer.json()["error"] and "/voxcpm/align" in answer.json()["error"]
