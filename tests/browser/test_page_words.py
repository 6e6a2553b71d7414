"""Word timestamps and subtitles in the page (issue 47, docs/api.md "Word timestamps and subtitles"):
the player's box "Show words as they play" asks the stream for its words and highlights the word
being spoken by the player's own clock; the workbench draws a take's words as a track under its
waveform (labels only where they fit, a click plays from a word, misread words marked), keeps them
with the take, aligns a take that has none through POST /voxcpm/align, and saves its SRT and WebVTT
subtitles.

Against the real routes: the app serves the tiny model with the scripted recognizer stand-in
(tests/fixtures/analysis_stand_ins.py), which implements the real recognizer interface and aligns a
text by spreading its words evenly over each segment's clip, in the real analysis process. Each
check reads what the server really gave (GET /voxcpm/jobs/ID/words, the answer of POST
/voxcpm/align, the subtitle files) and holds the page to it. A full analysis queue is made for
real: its process is paused (SIGSTOP) and its places for words (`max_pending_words`) taken by
alignments, answered once it goes on (`analysis_full`)."""
from __future__ import annotations

import contextlib
import os
import re
import signal
from urllib.parse import urlparse

import numpy as np
import pytest

from inference.analysis.process import AnalysisBusy

from ..fixtures import analysis_stand_ins
from ..support.app_helpers import SAMPLE_RATE, set_max_len
from ..support.workbench_page import desktop_page, download, import_edited, ready, settled, slowed, take

WB = "#vox-workbench"
BOX = "#vox-word-timestamps input[type=checkbox]"
PATCHES = 16  # 2.56 s at most: words long enough to be seen one by one
MAX_PENDING = 2  # the alignments the analysis queue holds (max_pending_words): few, so that a test can fill it
# The player starts once it holds this much audio, or the stream has ended: longer than a segment,
# so a take's first words (sent once its segment has been made and aligned, before the stream's
# status) are there before its first sample plays, and every word can be seen highlighted in turn.
PREBUFFER_MS = 3000
RETRY_S = 7  # the Retry-After of a 503 for a busy server


# -- the app and the page -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    """The tiny model, never stopping before its cap: every segment is PATCHES long, whatever its
    text; the scripted recognizer aligns in the analysis process, started here once."""
    from inference import Engine
    from inference.model.tiny_checkpoint import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("never-stops"), fast_vae=True, never_stops=True)
    engine = Engine.from_pretrained(str(path), device="cpu", dtype="float32", max_streams=2)
    return analysis_stand_ins.serve_scripted(serve_app, prebuffer_ms=PREBUFFER_MS, engine=engine,
                                             data_dir=str(tmp_path_factory.mktemp("data")),
                                             max_pending_words=MAX_PENDING, busy_retry_s=RETRY_S)


@pytest.fixture(scope="module")
def page(app, tmp_path_factory):
    with desktop_page(app, tmp_path_factory.mktemp("downloads")) as page:
        set_max_len(page, PATCHES)
        yield page


def is_stream(request) -> bool:
    return urlparse(request.url).path.endswith("/voxcpm/stream") and request.method == "POST"


def spoken(page, text: str, timestamps: bool = True) -> tuple[dict, dict]:
    """A take made as a user makes one, with the words box as asked; and the body the page sent."""
    page.locator(BOX).set_checked(timestamps)
    with page.expect_request(is_stream) as asked:
        t = take(page, text)
    return t, asked.value.post_data_json


def kept(page) -> dict:
    """The run playing now, once it has ended and the workbench shows it as a take (as `take` waits)."""
    page.wait_for_function("window.player.run && ['finished', 'failed', 'stopped'].includes(window.player.run.state)"
                           " && window.workbench.selected && window.workbench.selected.id === window.player.run.id"
                           " && window.workbench.view.shown === window.player.run.id", timeout=60_000)
    settled(page)
    return page.evaluate("({ ...window.workbench.selected, pcm: null })")


def server_words(client, job: str) -> list[dict]:
    """The words the server timed for a request that asked for them (its job is the take's id)."""
    response = client.get(f"/voxcpm/jobs/{job}/words")
    assert response.status_code == 200, response.text
    return response.json()["words"]


@contextlib.contextmanager
def analysis_full(app):
    """The server's aligner really full: its analysis process paused (as a model busy with a long
    job) and every place for words (`max_pending_words`) taken by a real alignment, so that each
    word job is refused at once (AnalysisBusy) until the process goes on and they are answered."""
    from inference.analysis.evaluation import Take

    analysis = app.app.state.ctx.analysis
    assert analysis.alive and analysis.pending == 0
    pid = analysis.pids[-1]
    os.kill(pid, signal.SIGSTOP)
    held = []
    try:
        take = Take(np.zeros(1600, np.float32), [("held", 0.0, 0.1)], None, False)
        held = [analysis.align(take) for _ in range(MAX_PENDING)]
        with pytest.raises(AnalysisBusy):
            analysis.align(take)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        for words in held:
            assert [w["word"] for w in words.result(60)] == ["held"]


# Every animation frame while a run plays: the samples the player has played and the word the
# panel highlights then (its index; -1: none).
SAMPLER = """() => {
    window.wordSamples = [];
    const tick = () => {
      const run = window.player.run;
      const now = document.querySelector('#vox-panel [data-field=words_text] [data-state=now]');
      if (run && run.words && run.words.length) window.wordSamples.push([run.id, run.played, now ? Number(now.dataset.index) : -1]);
      if (!window.stopSampling) requestAnimationFrame(tick);
    };
    window.stopSampling = false;
    requestAnimationFrame(tick);
}"""


def expected_word(words: list[dict], seconds: float) -> int:
    started = [i for i, w in enumerate(words) if w["start_s"] <= seconds]
    return started[-1] if started and seconds < words[started[-1]]["end_s"] else -1


def test_the_box_asks_for_words_and_the_panel_highlights_the_word_being_played(page, client):
    texts = "Every word lights up while it is heard.".split()
    page.evaluate(SAMPLER)
    t, body = spoken(page, " ".join(texts))
    page.evaluate("window.stopSampling = true")
    assert body["timestamps"] == "word"
    words = server_words(client, t["id"])
    # The server's words: the text's, spread by the scripted aligner over the take's one segment.
    assert [w["word"] for w in words] == texts and words[0]["start_s"] == pytest.approx(0, abs=2e-3)
    step = words[0]["end_s"] - words[0]["start_s"]
    assert step > 0.1 and all(w["end_s"] - w["start_s"] == pytest.approx(step, abs=2e-3) for w in words)
    assert words[-1]["end_s"] <= t["figures"]["seconds"] + 1e-3
    samples = [(played, now) for run, played, now in page.evaluate("window.wordSamples") if run == t["id"]]
    assert samples and samples[-1][0] == t["figures"]["samples"]  # sampled to the last sample played
    wrong = [(played, now, expected_word(words, played / SAMPLE_RATE)) for played, now in samples
             if now != expected_word(words, played / SAMPLE_RATE)]
    assert not wrong, wrong[:5]
    seen = [now for i, (_, now) in enumerate(samples) if now >= 0 and (i == 0 or samples[i - 1][1] != now)]
    assert seen == list(range(len(words)))  # each word in its turn, none skipped
    shown = page.locator("#vox-panel [data-field=words_text] span").all_inner_texts()
    assert shown == texts
    # Played to the end: the words before the clock are spoken, none is being spoken after the last.
    states = page.evaluate("[...document.querySelectorAll('#vox-panel [data-field=words_text] span')].map((s) => s.dataset.state)")
    assert states == ["spoken"] * len(texts)
    # The take keeps the stream's words: the server's, as it sent them.
    assert t["words"] == {"source": "stream", "list": words, "errors": []}


def test_a_segment_the_server_could_not_align_is_a_note_and_the_audio_plays_on(app, page, client):
    """The first segment's words come; the analysis queue is full when the second ends: its frame
    says why it has none, and the audio plays on. The engine is slowed so the second segment is
    still being made when the first one's words reach the page."""
    with slowed(app, 0.15):
        page.locator(BOX).set_checked(True)
        page.fill("#vox-text textarea", "First segment. [pause 200ms] Then more.")
        before = page.evaluate("window.player.run && window.player.run.id")
        page.click("#vox-generate")
        page.wait_for_function("before => window.player.run && window.player.run.id !== before"
                               " && window.player.run.words && window.player.run.words.length > 0", arg=before, timeout=60_000)
        assert page.evaluate("window.player.run.state") not in ("finished", "failed", "stopped")
        with analysis_full(app):
            t = kept(page)
    words = server_words(client, t["id"])
    assert [w["word"] for w in words] == ["First", "segment."] and {w["segment"] for w in words} == {0}
    errors = t["words"]["errors"]
    assert [e["segment"] for e in errors] == [1]
    assert errors[0]["error"].startswith("no word timestamps for this segment: the server's audio analysis is busy")
    assert t["words"]["list"] == words
    note = page.locator("#vox-panel [data-field=words_note]").inner_text()
    assert note == f"No words for segment 2: {errors[0]['error']}."
    run = page.evaluate("window.player.snapshot()")
    assert run["state"] == "finished" and run["played"] == run["samples"] == t["figures"]["samples"] > 0
    assert t["outcome"] == "finished"
    assert "segment 2" in page.locator(f"{WB} [data-wb=words-status]").inner_text()


def without_words(route):
    """GET /voxcpm/spec of a server that sends no words (an older one): its frames lack the kind."""
    response = route.fetch()
    spec = response.json()
    spec["frames"]["kinds"] = {k: v for k, v in spec["frames"]["kinds"].items() if v != "words"}
    route.fulfill(response=response, json=spec)


def test_a_server_that_sends_no_words_is_not_asked_for_them_and_the_panel_says_so(page, client):
    assert "words" in client.get("/voxcpm/spec").json()["frames"]["kinds"].values()  # this one does
    other = page.context.new_page()
    try:
        other.route("**/voxcpm/spec", without_words)
        other.goto(page.url)
        ready(other)
        t, body = spoken(other, "No words from this server.")
        assert "timestamps" not in body  # an older server would refuse the field
        assert other.locator("#vox-panel [data-field=words_note]").inner_text() == "No words: this server sends no word timestamps."
        assert t["outcome"] == "finished" and t["words"] is None
        assert client.get(f"/voxcpm/jobs/{t['id']}/words").status_code == 404  # none were asked for
    finally:
        other.close()


LABELS = """() => [...document.querySelectorAll('#vox-workbench [data-wb=words] button')].map((b) => {
    const box = b.getBoundingClientRect(), label = b.firstElementChild.getBoundingClientRect();
    return { fit: b.dataset.fit === 'true', title: b.title, eval: b.dataset.eval || null, start: Number(b.dataset.start),
             box: [box.left, box.top, box.right, box.bottom], label: [label.left, label.top, label.right, label.bottom],
             shown: getComputedStyle(b.firstElementChild).visibility === 'visible' };
})"""

EPS_PX = 0.05  # the aligner's words touch (one ends where the next starts): boxes meeting are not overlapping


def overlapping(rects):
    return [(a, b) for i, a in enumerate(rects) for b in rects[i + 1:]
            if a[0] < b[2] - EPS_PX and b[0] < a[2] - EPS_PX and a[1] < b[3] - EPS_PX and b[1] < a[3] - EPS_PX]


def on_the_time_axis(page, drawn, words):
    """Each word's box starts at its time on the waveform's axis (within 2 px)."""
    wave = page.locator(f"{WB} [data-wb=wave-a]").bounding_box()
    px = page.evaluate("window.workbench.view.pxPerSec()")
    scroll = page.evaluate("window.workbench.view.a.getScroll()")
    far = [(d["box"][0], wave["x"] - scroll + w["start_s"] * px, w) for d, w in zip(drawn, words)
           if abs(d["box"][0] - (wave["x"] - scroll + w["start_s"] * px)) >= 2]
    assert len(drawn) == len(words) and not far, far[:3]
    return wave


def test_the_words_track_draws_the_labels_that_fit_and_a_click_plays_from_a_word(page, client):
    texts = ["a", "incomprehensibilities"] * 8  # 16 words in about 2.5 s: the long ones do not fit at first
    t, _ = spoken(page, " ".join(texts))
    settled(page, f"{WB} [data-wb=words]")
    words = server_words(client, t["id"])
    assert [w["word"] for w in words] == texts and t["words"]["list"] == words
    assert t["figures"]["patches"] == PATCHES
    drawn = page.evaluate(LABELS)
    shown = [d for d in drawn if d["shown"]]
    assert [d["fit"] for d in drawn] == [d["shown"] for d in drawn]
    assert 0 < len(shown) < len(drawn)  # the short ones drawn, the long ones only on hover
    assert not overlapping([d["label"] for d in shown]) and not overlapping([d["box"] for d in drawn])
    assert all(d["box"][0] <= d["label"][0] and d["label"][2] <= d["box"][2] for d in shown)  # within its word
    assert all(d["title"].startswith(w["word"]) for d, w in zip(drawn, words))  # every word on hover
    # On the waveform's time axis: a word's box starts at the time the server gave it.
    wave = on_the_time_axis(page, drawn, words)
    # A click on a word plays from its start.
    page.locator(f"{WB} [data-wb=words] button").nth(5).click()
    at = page.evaluate("[window.workbench.view.a.getCurrentTime(), window.workbench.view.a.isPlaying()]")
    page.evaluate("window.workbench.view.stop()")
    assert words[5]["start_s"] <= at[0] < words[5]["start_s"] + 0.3 and at[1], (at, words[5])
    # Zoomed in, the long words' labels fit too: more drawn, still none over another.
    page.locator(f"{WB} [data-wb=zoom]").fill("3000")
    page.wait_for_function("n => [...document.querySelectorAll('#vox-workbench [data-wb=words] button')]"
                           ".filter((b) => b.dataset.fit === 'true').length > n", arg=len(shown))
    zoomed = page.evaluate(LABELS)
    visible = [d["label"] for d in zoomed if d["shown"] and d["label"][2] > wave["x"] and d["label"][0] < wave["x"] + wave["width"]]
    assert len(visible) >= 2 and not overlapping(visible)
    assert all(d["box"][0] <= d["label"][0] and d["label"][2] <= d["box"][2] for d in zoomed if d["shown"])
    page.locator(f"{WB} [data-wb=zoom]").fill("100")


def test_misread_words_are_marked_on_the_track_and_the_words_travel_in_the_bundle(page, client, tmp_path):
    texts = "One two three four five six.".split()
    t, _ = spoken(page, " ".join(texts))
    assert t["words"]["list"] == server_words(client, t["id"])

    def scored(report):  # as a session that scored the take saved it: "three" misread, "five" missing
        text = report["settings"]["text_as_spoken"]
        units = []
        for i, m in enumerate(re.finditer(r"\S+", text)):
            kind = {2: "misread", 4: "missing"}.get(i, "ok")
            units.append({"type": kind, "ref": re.sub(r"\W", "", m.group()).lower(), "heard": "tree" if kind == "misread" else None,
                          "span": [m.start(), m.end()], "start": 0.1, "end": 0.2})
        w = {"available": True, "metric": "wer", "rate": 2 / 6, "substitutions": 1, "deletions": 1, "insertions": 0,
             "reference_units": 6, "model": "whisper", "language": "en", "transcript": "…", "words": units}
        report["evaluation"] = {"intelligibility": w, "similarity": None, "elapsed_s": 0.5,
                                "segments": [{"index": 0, "text": text, "start_s": 0, "intelligibility": w, "similarity": None}]}
    bundle = download(page, f"{WB} [data-wb=bundle]")
    imported = import_edited(page, bundle, tmp_path / "scored.zip", scored)
    kept = page.evaluate("({ ...window.workbench.selected, pcm: null })")
    assert kept["id"] == imported and kept["words"] == t["words"]  # the bundle carried the words
    drawn = page.evaluate(LABELS)
    assert [d["eval"] for d in drawn] == [None, None, "misread", None, "missing", None]
    assert "misread, heard “tree”" in drawn[2]["title"] and "not heard" in drawn[4]["title"]
    shadow = page.evaluate("""() => [...document.querySelectorAll('#vox-workbench [data-wb=words] button')]
        .map((b) => getComputedStyle(b).boxShadow + getComputedStyle(b).backgroundColor)""")
    assert shadow[2] != shadow[0] and shadow[4] not in (shadow[0], shadow[2])


def multipart_fields(request) -> dict[str, bytes]:
    """A multipart body's fields by name (a file's bytes with its name as `NAME.filename`)."""
    body = request.post_data_buffer
    boundary = re.search(r"boundary=(.+)", request.headers["content-type"]).group(1).encode()
    fields = {}
    for part in body.split(b"--" + boundary)[1:-1]:
        head, _, value = part.strip(b"\r\n").partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head).group(1).decode()
        fields[name] = value
        if (filename := re.search(rb'filename="([^"]+)"', head)):
            fields[f"{name}.filename"] = filename.group(1)
    return fields


def is_align(request) -> bool:
    return urlparse(request.url).path.endswith("/voxcpm/align") and request.method == "POST"


@contextlib.contextmanager
def sent_to_align(page):
    """The forms the page posts to /voxcpm/align, as (query, fields), each passed on to the real
    route untouched: Chromium gives a request's multipart body (a Blob) to Playwright only while
    the request is routed, never to a mere listener."""
    sent = []

    def passed_on(route):
        sent.append((urlparse(route.request.url).query, multipart_fields(route.request)))
        route.continue_()
    page.route("**/voxcpm/align*", passed_on)
    try:
        yield sent
    finally:
        page.unroute("**/voxcpm/align*", passed_on)


def test_a_take_without_words_gets_them_from_the_aligner_and_keeps_them(app, page, client):
    text = "Aligned after the take."
    t, body = spoken(page, text, timestamps=False)
    assert "timestamps" not in body
    assert client.get(f"/voxcpm/jobs/{t['id']}/words").status_code == 404  # the stream made none
    assert page.locator(f"{WB} [data-wb=words]").is_hidden()
    # A full analysis queue: the server's 503, its reason and when to try again, said beside the button.
    with analysis_full(app):
        with page.expect_response(lambda r: is_align(r.request)) as refused:
            page.click(f"{WB} [data-wb=words-run]")
        assert refused.value.status == 503 and refused.value.headers["retry-after"] == str(RETRY_S)
        status = page.locator(f"{WB} [data-wb=words-status]")
        status.filter(has_text="audio analysis is busy").wait_for()
        said = status.inner_text()
        assert said.startswith(refused.value.json()["error"]) and f"try again in {RETRY_S} s" in said
    assert page.locator(f"{WB} [data-wb=words]").is_hidden()
    # Once it has room: the take's words, as the route answered them, drawn and kept with the take.
    with sent_to_align(page) as sent, page.expect_response(lambda r: is_align(r.request)) as answered:
        page.click(f"{WB} [data-wb=words-run]")
    assert answered.value.status == 200
    words = answered.value.json()["words"]
    page.locator(f"{WB} [data-wb=words-status]").filter(has_text=f"{len(words)} words aligned").wait_for()
    # The scripted aligner spread the text's words evenly over the take.
    seconds = t["figures"]["seconds"]
    assert [w["word"] for w in words] == text.split()
    assert [w["start_s"] for w in words] == pytest.approx([i * seconds / 4 for i in range(4)], abs=0.01)
    # The evaluation's form: the take's WAV and its text as spoken.
    [(query, fields)] = sent
    assert query == ""
    assert fields["file.filename"] == b"take.wav" and fields["file"][:4] == b"RIFF"
    assert fields["text"].decode() == t["settings"]["text_as_spoken"] and "segments" not in fields
    settled(page, f"{WB} [data-wb=words]")
    on_the_time_axis(page, page.evaluate(LABELS), words)
    stored = page.evaluate("async (id) => (await window.workbench.store.list()).find((x) => x.id === id).words", t["id"])
    assert stored == {"source": "align", "list": words, "errors": []}


@pytest.fixture(scope="module")
def subtitled(page):
    """A take of two sentences, shown in the workbench."""
    return spoken(page, "Subtitles for this take. They are the server's own.")[0]


@pytest.mark.parametrize("fmt, button", [("srt", "words-srt"), ("vtt", "words-vtt")])
def test_subtitles_download_in_the_format_asked_under_the_takes_name(page, client, subtitled, fmt, button):
    t = subtitled
    page.wait_for_function("id => window.workbench.selected?.id === id", arg=t["id"])
    with sent_to_align(page) as sent:
        saved = download(page, f"{WB} [data-wb={button}]")
    [(query, fields)] = sent
    assert query == f"format={fmt}"
    assert fields["file"][:4] == b"RIFF" and fields["text"].decode() == t["settings"]["text_as_spoken"]
    s = t["settings"]
    assert saved.name == f"voxcpm2-{s['mode']}-seed{s['seed']}-cfg{s['cfg_value']:g}-steps{s['inference_timesteps']}-take{t['n']}.{fmt}"
    # The file saved is the server's subtitle file for the take, byte for byte: the same form posted
    # again gives the same file.
    again = client.post(f"/voxcpm/align?format={fmt}", files={"file": ("take.wav", fields["file"], "audio/wav")},
                        data={"text": fields["text"].decode()})
    assert again.status_code == 200 and again.headers["content-type"].startswith(
        {"srt": "application/x-subrip", "vtt": "text/vtt"}[fmt])
    got = saved.read_text(encoding="utf-8")
    assert got == again.text
    # And it holds the words the aligner gives that form, in cues from the first word's start.
    words = client.post("/voxcpm/align", files={"file": ("take.wav", fields["file"], "audio/wav")},
                        data={"text": fields["text"].decode()}).json()["words"]
    cues = [block.splitlines() for block in got.strip().split("\n\n") if " --> " in block]
    said = " ".join(re.sub(r"<[^>]*>", "", " ".join(c[c.index(next(x for x in c if " --> " in x)) + 1:])) for c in cues)
    assert said.split() == [w["word"] for w in words] == t["settings"]["text_as_spoken"].split()
    first = {"srt": "1\n00:00:00,000 --> ", "vtt": "WEBVTT\n\n00:00:00.000 --> "}[fmt]
    assert words[0]["start_s"] == 0 and got.startswith(first)
    assert page.errors == []
