"""Word timestamps and subtitles in the page (issue 47, /work/notes/47-contract.md): the player's box
"Show words as they play" asks the stream for its words and highlights the word being spoken by
the player's own clock; the workbench draws a take's words as a track under its waveform (labels
only where they fit, a click plays from a word, misread words marked), keeps them with the take,
aligns a take that has none through POST /voxcpm/align, and saves its SRT and WebVTT subtitles.

STAND-INS: the server's side of issue 47 (the "words" frame kind in GET /voxcpm/spec, the "W" frames
of POST /voxcpm/stream?format=frames with "timestamps": "word", and POST /voxcpm/align) is being
built on main. Until it is merged, this module plays those three pieces by Playwright request
interception, exactly as the contract states them, around the real app on the tiny model: the
real stream is fetched (without the field the server does not know yet) and W frames are put in
it with the tests' frame writer. TODO(#47): once the server lands, drop `stand_in_spec`,
`stand_in_stream` and `stand_in_align`'s words and let the real routes answer (the page's
assertions stay as they are)."""
from __future__ import annotations

import json
import re

import pytest

from ui.http.frames import AUDIO, STATUS, frame, json_frame

from ..fixtures.frames import read_frames
from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, SAMPLE_RATE, set_max_len
from ..support.workbench_page import download, import_edited, ready, settled, sync_playwright, take

WB = "#vox-workbench"
BOX = "#vox-word-timestamps input[type=checkbox]"
WORDS_FRAME = b"W"  # the contract's type byte of the "words" frame
PATCHES = 16  # 2.56 s at most: words long enough to be seen one by one


# -- the stand-ins for the server's side (TODO(#47): drop once the server lands) ----------------------

def stand_in_spec(route):
    """GET /voxcpm/spec as the server will state it: its frames know the "words" kind."""
    response = route.fetch()
    spec = response.json()
    spec["frames"]["kinds"]["W"] = "words"
    route.fulfill(response=response, json=spec)


class StandInStream:
    """POST /voxcpm/stream?format=frames: the real app's stream, with the words frames the contract
    gives a body that asks for them, after the segment's audio and before the status frame.
    `words(seconds)` makes the frames' payloads from the audio's length; `asked` keeps each body."""

    def __init__(self, words):
        self.words = words
        self.asked = []
        self.sent = []  # the payloads of the words frames sent, per request

    def __call__(self, route):
        body = json.loads(route.request.post_data)
        self.asked.append(body)
        served = route.fetch(post_data=json.dumps({k: v for k, v in body.items() if k != "timestamps"}))
        frames = read_frames(served.body())
        seconds = sum(len(v) for kind, v in frames if kind == AUDIO) / SAMPLE_RATE
        payloads = self.words(seconds) if body.get("timestamps") == "word" else []
        self.sent.append(payloads)
        out = b""
        for kind, value in frames:
            if kind == STATUS:
                out += b"".join(json_frame(WORDS_FRAME, p) for p in payloads)
            out += frame(AUDIO, value.tobytes()) if kind == AUDIO else json_frame(kind, value)
        route.fulfill(status=served.status, body=out, headers={
            "content-type": served.headers["content-type"], "x-sample-rate": served.headers["x-sample-rate"],
            "x-seed": served.headers["x-seed"]})


def spread(texts: list[str], seconds: float, fill: float = 0.8) -> list[dict]:
    """The words of segment 0 at even slots over the audio (each `fill` of its slot, a gap after)."""
    slot = (seconds - 0.1) / len(texts)
    return [{"word": w, "start_s": round(0.05 + i * slot, 3), "end_s": round(0.05 + (i + fill) * slot, 3), "segment": 0}
            for i, w in enumerate(texts)]


def one_segment(texts: list[str]):
    return lambda seconds: [{"segment": 0, "words": spread(texts, seconds)}]


# -- the app and the page -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    """The tiny model, never stopping before its cap: every take is PATCHES long, whatever its text."""
    from inference import Engine
    from inference.model.tiny_checkpoint import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("never-stops"), fast_vae=True, never_stops=True)
    engine = Engine.from_pretrained(str(path), device="cpu", dtype="float32", max_streams=2)
    return serve_app(prebuffer_ms=80, data_dir=str(tmp_path_factory.mktemp("data")), engine=engine)


@pytest.fixture(scope="module")
def page(app, tmp_path_factory):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.route("**/voxcpm/spec", stand_in_spec)  # before the page reads it once, at load
        page.goto(app.url + "/")
        ready(page)
        set_max_len(page, PATCHES)
        page.downloads = tmp_path_factory.mktemp("downloads")
        yield page
        browser.close()


def spoken(page, text: str, words, timestamps: bool = True) -> tuple[dict, StandInStream]:
    """A take made as a user makes one, with the words box as asked, through the stand-in stream."""
    stream = StandInStream(words)
    page.route("**/voxcpm/stream*", stream)
    try:
        page.locator(BOX).set_checked(timestamps)
        t = take(page, text)
    finally:
        page.unroute("**/voxcpm/stream*")
    return t, stream


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


def test_the_box_asks_for_words_and_the_panel_highlights_the_word_being_played(page):
    texts = "Every word lights up while it is heard.".split()
    page.evaluate(SAMPLER)
    t, stream = spoken(page, " ".join(texts), one_segment(texts))
    page.evaluate("window.stopSampling = true")
    assert stream.asked[-1]["timestamps"] == "word"
    words = stream.sent[-1][0]["words"]
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
    # The take keeps the stream's words.
    assert t["words"]["source"] == "stream" and t["words"]["list"] == words


def test_a_segment_the_server_could_not_align_is_a_note_and_the_audio_plays_on(page):
    def failed(seconds):
        return [{"segment": 0, "words": spread(["First", "segment"], seconds / 2)},
                {"segment": 1, "words": [], "error": "the recognizer is not available"}]
    t, _ = spoken(page, "First segment, then more.", failed)
    note = page.locator("#vox-panel [data-field=words_note]").inner_text()
    assert note == "No words for segment 2: the recognizer is not available."
    run = page.evaluate("window.player.snapshot()")
    assert run["state"] == "finished" and run["played"] == run["samples"] == t["figures"]["samples"] > 0
    assert t["words"]["errors"] == [{"segment": 1, "error": "the recognizer is not available"}]
    assert "segment 2" in page.locator(f"{WB} [data-wb=words-status]").inner_text()


def without_words(route):
    """GET /voxcpm/spec of a server that sends no words (an older one, or one not merged yet)."""
    response = route.fetch()
    spec = response.json()
    spec["frames"]["kinds"] = {k: v for k, v in spec["frames"]["kinds"].items() if v != "words"}
    route.fulfill(response=response, json=spec)


def test_a_server_that_sends_no_words_is_not_asked_for_them_and_the_panel_says_so(page):
    other = page.context.new_page()
    try:
        other.route("**/voxcpm/spec", without_words)
        other.goto(page.url)
        ready(other)
        t, stream = spoken(other, "No words from this server.", one_segment(["No"]))
        assert "timestamps" not in stream.asked[-1]  # it would refuse the field
        assert other.locator("#vox-panel [data-field=words_note]").inner_text() == "No words: this server sends no word timestamps."
        assert t["outcome"] == "finished" and t["words"] is None
    finally:
        other.close()


LABELS = """() => [...document.querySelectorAll('#vox-workbench [data-wb=words] button')].map((b) => {
    const box = b.getBoundingClientRect(), label = b.firstElementChild.getBoundingClientRect();
    return { fit: b.dataset.fit === 'true', title: b.title, eval: b.dataset.eval || null, start: Number(b.dataset.start),
             box: [box.left, box.top, box.right, box.bottom], label: [label.left, label.top, label.right, label.bottom],
             shown: getComputedStyle(b.firstElementChild).visibility === 'visible' };
})"""


def overlapping(rects):
    return [(a, b) for i, a in enumerate(rects) for b in rects[i + 1:]
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]


def test_the_words_track_draws_the_labels_that_fit_and_a_click_plays_from_a_word(page):
    texts = ["a", "incomprehensibilities"] * 8  # 16 words in about 2.5 s: the long ones do not fit at first
    t, _ = spoken(page, " ".join(texts), one_segment(texts))
    settled(page, f"{WB} [data-wb=words]")
    words = t["words"]["list"]
    assert t["figures"]["patches"] == PATCHES
    drawn = page.evaluate(LABELS)
    assert len(drawn) == len(words)
    shown = [d for d in drawn if d["shown"]]
    assert [d["fit"] for d in drawn] == [d["shown"] for d in drawn]
    assert 0 < len(shown) < len(drawn)  # the short ones drawn, the long ones only on hover
    assert not overlapping([d["label"] for d in shown]) and not overlapping([d["box"] for d in drawn])
    assert all(d["box"][0] <= d["label"][0] and d["label"][2] <= d["box"][2] for d in shown)  # within its word
    assert all(d["title"].startswith(w["word"]) for d, w in zip(drawn, words))  # every word on hover
    # On the waveform's time axis: a word's box starts at its time.
    wave = page.locator(f"{WB} [data-wb=wave-a]").bounding_box()
    px = page.evaluate("window.workbench.view.pxPerSec()")
    assert all(abs(d["box"][0] - wave["x"] - w["start_s"] * px) < 2 for d, w in zip(drawn, words))
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


def test_misread_words_are_marked_on_the_track_and_the_words_travel_in_the_bundle(page, tmp_path):
    texts = "One two three four five six.".split()
    t, _ = spoken(page, " ".join(texts), one_segment(texts))

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


class StandInAlign:
    """POST /voxcpm/align: the words JSON, or with ?format= the subtitle file, as the contract gives
    them; `status` 503 answers as a full analysis queue. Keeps each request's URL and fields."""

    SRT = "1\n00:00:00,050 --> 00:00:00,400\nWords aligned\n\n"
    VTT = "WEBVTT\n\n00:00:00.050 --> 00:00:00.400\nWords aligned\n\n"

    def __init__(self, words, status=200):
        self.words = words
        self.status = status
        self.asked = []

    def __call__(self, route):
        request = route.request
        self.asked.append((request.url, multipart_fields(request)))
        if self.status == 503:
            return route.fulfill(status=503, headers={"Retry-After": "7"}, json={"error": "the analysis queue is full"})
        fmt = re.search(r"format=(\w+)", request.url)
        if fmt:
            kind = {"srt": ("application/x-subrip", self.SRT), "vtt": ("text/vtt", self.VTT)}[fmt.group(1)]
            return route.fulfill(status=200, body=kind[1], headers={
                "content-type": kind[0], "content-disposition": f'attachment; filename="take.{fmt.group(1)}"'})
        route.fulfill(status=200, json={"words": self.words, "seconds": 1.0, "elapsed_s": 0.2})


def test_a_take_without_words_gets_them_from_the_aligner_and_keeps_them(page):
    t, stream = spoken(page, "Aligned after the take.", one_segment([]), timestamps=False)
    assert "timestamps" not in stream.asked[-1]
    assert page.locator(f"{WB} [data-wb=words]").is_hidden()
    seconds = t["figures"]["seconds"]
    words = spread("Aligned after the take.".split(), seconds)
    busy = StandInAlign(words, status=503)
    page.route("**/voxcpm/align*", busy)
    try:
        page.click(f"{WB} [data-wb=words-run]")
        page.locator(f"{WB} [data-wb=words-status]").filter(has_text="the analysis queue is full").wait_for()
        assert "try again in 7 s" in page.locator(f"{WB} [data-wb=words-status]").inner_text()
    finally:
        page.unroute("**/voxcpm/align*")
    align = StandInAlign(words)
    page.route("**/voxcpm/align*", align)
    try:
        page.click(f"{WB} [data-wb=words-run]")
        page.locator(f"{WB} [data-wb=words-status]").filter(has_text="4 words aligned").wait_for()
    finally:
        page.unroute("**/voxcpm/align*")
    url, fields = align.asked[-1]
    assert url.endswith("/voxcpm/align")
    # The evaluation's form: the take's WAV and its text as spoken.
    assert fields["file.filename"] == b"take.wav" and fields["file"][:4] == b"RIFF"
    assert fields["text"].decode() == t["settings"]["text_as_spoken"] and "segments" not in fields
    assert page.locator(f"{WB} [data-wb=words] button").count() == 4
    stored = page.evaluate("async (id) => (await window.workbench.store.list()).find((x) => x.id === id).words", t["id"])
    assert stored == {"source": "align", "list": words, "errors": []}


@pytest.mark.parametrize("fmt, button, body", [("srt", "words-srt", StandInAlign.SRT), ("vtt", "words-vtt", StandInAlign.VTT)])
def test_subtitles_download_in_the_format_asked_under_the_takes_name(page, fmt, button, body):
    if not page.evaluate("window.workbench.selected"):
        take(page, "Subtitles for this take.")
    t = page.evaluate("({ ...window.workbench.selected, pcm: null })")
    align = StandInAlign([])
    page.route("**/voxcpm/align*", align)
    try:
        saved = download(page, f"{WB} [data-wb={button}]")
    finally:
        page.unroute("**/voxcpm/align*")
    url, fields = align.asked[-1]
    assert url.endswith(f"/voxcpm/align?format={fmt}")
    assert fields["file"][:4] == b"RIFF" and fields["text"].decode() == t["settings"]["text_as_spoken"]
    s = t["settings"]
    assert saved.name == f"voxcpm2-{s['mode']}-seed{s['seed']}-cfg{s['cfg_value']:g}-steps{s['inference_timesteps']}-take{t['n']}.{fmt}"
    assert saved.read_text(encoding="utf-8") == body
    assert page.errors == []
