"""The page in headless Chromium (Debian's package, driven by Playwright) with the tiny random model:
each mode plays to the end with no underrun, the metrics fill in, the samples played equal the
samples generated, the WAV offered holds exactly them, and Stop halts playback."""
from __future__ import annotations

import base64
import io
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from inference import SynthesisRequest
from inference.request import modes
from ui.page.examples import cloning_examples, design_examples, ultimate_examples
from ui.library.uploads import decode_audio

from ..support.app_helpers import BROWSER_FLAGS as FLAGS
from ..support.app_helpers import CHROMIUM, assert_same_audio, expected_pcm, load_engine, set_max_len
from ..support.page_handles import click_generate, take_handles, underruns_with_audio_waiting

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
MAX_LEN = 8  # patches: about a second of audio per run keeps the test short

if not os.environ.get("CI"):  # CI installs both (.ci/run); elsewhere, say why it did not run
    pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM):
        pytest.skip("apt-get install chromium", allow_module_level=True)
from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def app(serve_app):
    (ARTIFACTS / "browser-metrics.txt").unlink(missing_ok=True)
    running = serve_app(prebuffer_ms=80, notice="Random weights: the output is noise (test banner).",
                        engine=load_engine(max_streams=2))  # two rows: a third request waits in line
    yield running


@pytest.fixture(scope="module")
def page(app):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1100}, permissions=["microphone"])
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(app.url + "/")
        take_handles(page)
        set_max_len(page, MAX_LEN)
        page.errors = errors
        yield page
        browser.close()


def _pick_example(page, mode: str, row: int):
    page.get_by_role("tab", name={"design": "Voice design", "cloning": "Controllable cloning",
                                  "ultimate": "Ultimate cloning"}[mode]).click()
    page.wait_for_function(f"document.querySelector('#vox-mode textarea, #vox-mode input').value === '{mode}'")
    page.locator(f"#vox-tab-{mode} [data-testid='dataset-cell-{row}-0']").click()
    text = {"design": design_examples, "cloning": cloning_examples, "ultimate": ultimate_examples}[mode]()[row][0]
    page.wait_for_function("t => document.querySelector('#vox-text textarea').value === t", arg=text)
    if mode != "design":  # the clip goes to the server once and comes back as an id
        ref = "vox-clone-ref" if mode == "cloning" else "vox-ultimate-ref"
        page.wait_for_function(f"document.querySelector('#{ref} textarea, #{ref} input').value.length > 10",
                               timeout=30_000)


def _run(page, timeout_s: float = 60.0) -> dict:
    click_generate(page)
    page.wait_for_function("window.player.run && ['finished', 'failed'].includes(window.player.run.state)",
                           timeout=timeout_s * 1000)
    return page.evaluate("window.player.snapshot()")


def _wav(page) -> tuple[int, np.ndarray]:
    data = page.evaluate("""async () => {
        const blob = await (await fetch(window.player.run.wavUrl)).arrayBuffer();
        let s = ''; new Uint8Array(blob).forEach((b) => { s += String.fromCharCode(b); });
        return btoa(s);
    }""")
    audio, rate = sf.read(io.BytesIO(base64.b64decode(data)), dtype="int16")
    return rate, audio


def _expected(mode: str, row: int, seed: int) -> np.ndarray:
    common = dict(seed=seed, max_len=MAX_LEN, cfg_value=2.0, inference_timesteps=10)
    if mode == "design":
        text, description = design_examples()[row]
        return expected_pcm(SynthesisRequest(text, control=description, **common))
    text, clip_path, extra = (cloning_examples() if mode == "cloning" else ultimate_examples())[row]
    clip = decode_audio(Path(clip_path).read_bytes(), max_seconds=60)
    if mode == "cloning":
        return expected_pcm(SynthesisRequest(text, control=extra or None, reference_audio=clip, **common))
    return expected_pcm(SynthesisRequest(text, reference_audio=clip, prompt_audio=clip, prompt_text=extra, **common))


def _metric(page, field: str) -> str:
    return page.locator(f"#vox-panel [data-field='{field}']").inner_text()


@pytest.mark.parametrize("mode, row", [("design", 0), ("cloning", 1), ("ultimate", 0)])
def test_each_mode_streams_and_plays_gaplessly(app, page, mode, row):
    _pick_example(page, mode, row)
    run = _run(page)
    assert run["state"] == "finished", run.get("error")
    assert run["body"]["mode"] == mode and run["body"]["max_len"] == MAX_LEN and run["body"]["seed"] is None
    assert run["contextRate"] == 48000 and run["contextState"] == "running"
    assert run["samples"] > 0 and run["played"] == run["samples"] == run["server"]["samples"]
    # Gapless wherever the audio came in time: on two busy cores the tiny model can fall behind
    # real time for a moment, and the player then waits, as it should.
    assert underruns_with_audio_waiting(run) == [] and run["buffered"] == 0
    assert run["firstByteAt"] > run["t0"] and run["audibleAt"] >= run["firstByteAt"]
    assert run["server"]["rtf"] > 0 and run["clientRtf"] > 0 and run["reads"] >= 1
    for field in ("ttfb", "ttfa", "server_ttfp"):
        assert _metric(page, field).endswith(" ms")
    assert float(_metric(page, "server_rtf")) > 0 and float(_metric(page, "client_rtf")) > 0
    assert _metric(page, "underruns") == "0" and _metric(page, "seed") == run["seed"]
    rate, wav = _wav(page)
    assert rate == 48000 and wav.shape[0] == run["samples"]
    assert_same_audio(wav, _expected(mode, row, int(run["seed"])))
    replay = page.locator("#vox-panel audio")
    assert replay.is_visible() and replay.evaluate("a => a.paused && !a.autoplay")
    _record(page, mode, run)


def test_microphone_clip_clones(app, page):
    # Chromium's fake capture device plays a beep: record it as the reference, then clone from it.
    page.get_by_role("tab", name="Controllable cloning").click()
    clear = page.locator("#vox-clone-audio button[aria-label='Clear']")
    if clear.count() and clear.first.is_visible():  # a clip from an earlier test is still loaded
        clear.first.click()
    page.locator("#vox-clone-audio button[aria-label='Record audio']").click()
    page.locator("#vox-clone-audio button:has-text('Record')").first.click()
    page.wait_for_timeout(1500)
    page.locator("#vox-clone-audio button:has-text('Stop')").first.click()
    page.wait_for_function("document.querySelector('#vox-clone-ref textarea, #vox-clone-ref input').value.length > 10",
                           timeout=30_000)
    assert "Reference ready" in page.locator("#vox-clone-note").inner_text()
    page.fill("#vox-text textarea", "Hello world, this is a test.")
    run = _run(page)
    assert run["state"] == "finished", run.get("error")
    assert run["played"] == run["samples"] == run["server"]["samples"] > 0 and underruns_with_audio_waiting(run) == []


def test_waiting_request_shows_its_queue_position(app, page):
    # A request waits only once every row of the engine holds a stream.
    blockers = [app.worker.submit(SynthesisRequest("Hello world, this is a long test.", seed=i, min_len=300,
                                                   max_len=300)) for i in range(app.worker.engine.rows)]
    try:
        _pick_example(page, "design", 0)
        click_generate(page)
        page.wait_for_function("document.querySelector('#vox-panel [data-field=status]').textContent"
                               ".includes('position 1')", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "page-queued.png"), full_page=True)
    finally:
        for blocker in blockers:
            blocker.cancel()
    page.wait_for_function("window.player.run.state === 'finished'", timeout=60_000)
    run = page.evaluate("window.player.snapshot()")
    assert run["server"]["queue_s"] > 0 and run["played"] == run["samples"] and underruns_with_audio_waiting(run) == []


def test_stop_halts_playback(app, page):
    # An analyser on the player's output shows what is actually being played.
    page.evaluate("""() => { const { ctx, node } = player.output; const a = ctx.createAnalyser(); a.fftSize = 2048; node.connect(a);
        window.peak = () => { const d = new Float32Array(a.fftSize); a.getFloatTimeDomainData(d);
                              return d.reduce((m, v) => Math.max(m, Math.abs(v)), 0); }; }""")
    _pick_example(page, "design", 1)
    set_max_len(page, 64)  # ten seconds: a slow click on a loaded machine still lands before the end
    try:
        click_generate(page)
        page.wait_for_function("window.player.run && window.player.run.played > 4800", timeout=60_000)
        assert page.evaluate("peak()") > 0
        page.click("#vox-stop")
    finally:
        set_max_len(page, MAX_LEN)
    page.wait_for_function("window.player.run.state === 'stopped'")
    run = page.evaluate("window.player.snapshot()")
    job = app.worker.get(run["id"])
    assert run["played"] < job.samples  # stopped before the end of what the server generated
    page.wait_for_timeout(200)
    assert max(page.evaluate("peak()") for _ in range(5)) == 0
    assert page.evaluate("window.player.run.played") == run["played"]
    assert "Stopped" in _metric(page, "status")
    assert job.state in ("done", "cancelled")
    page.screenshot(path=str(ARTIFACTS / "page-stopped.png"), full_page=True)
    assert page.errors == []


def test_stop_after_the_end_keeps_the_wav_and_replay(app, page):
    _pick_example(page, "design", 0)
    run = _run(page)
    assert run["state"] == "finished", run.get("error")
    page.click("#vox-stop")
    page.wait_for_timeout(300)
    after = page.evaluate("window.player.snapshot()")
    assert after["state"] == "finished" and after["wavUrl"] == run["wavUrl"]
    assert page.locator("#vox-panel audio").is_visible() and "Finished" in _metric(page, "status")
    rate, wav = _wav(page)  # the link still serves the samples that were streamed
    assert wav.shape[0] == run["samples"]


def test_a_player_that_cannot_start_says_why_and_sends_nothing(app, page):
    page.evaluate("""() => { window.realAudioContext = window.AudioContext;
        window.AudioContext = function () { throw new Error('no audio device here'); };
        window.player.output.ctx.close(); }""")  # a closed context makes the next run build a new one
    try:
        _pick_example(page, "design", 0)
        run = _run(page)
        assert run["state"] == "failed" and "audio player could not start: no audio device here" in run["error"]
        assert "audio player could not start" in _metric(page, "status")
        assert app.worker.get(run["id"]) is None  # the request never reached the server
    finally:
        page.evaluate("() => { window.AudioContext = window.realAudioContext; }")
    again = _run(page)
    assert again["state"] == "finished" and again["played"] == again["samples"] > 0


def test_a_new_request_replaces_the_playing_one(app, page):
    _pick_example(page, "design", 0)
    click_generate(page)
    page.wait_for_function("window.player.run && window.player.run.samples > 0", timeout=60_000)
    first = page.evaluate("window.player.snapshot()")
    run = _run(page)
    assert run["id"] != first["id"] and run["state"] == "finished"
    assert run["played"] == run["samples"] == run["server"]["samples"] and underruns_with_audio_waiting(run) == []


def test_the_drawn_sliders_have_the_specs_ranges(page):
    # The advanced settings are open (set_max_len): read the sliders as Chromium drew them.
    drawn = page.evaluate("""ids => Object.fromEntries(ids.map((id) => {
        const r = document.querySelector(`#${id} input[type=range]`);
        return [id, { min: Number(r.min), max: Number(r.max), step: Number(r.step), value: Number(r.value) }]; }))""",
                          ["vox-cfg", "vox-steps", "vox-max-len"])
    for elem_id, name in (("vox-cfg", "cfg_value"), ("vox-steps", "inference_timesteps"), ("vox-max-len", "max_len")):
        s = modes.SETTINGS[name]
        high = s.high if s.page_high is None else s.page_high
        assert (drawn[elem_id]["min"], drawn[elem_id]["max"], drawn[elem_id]["step"]) == (s.low, high, s.step), name
    assert drawn["vox-steps"]["max"] == 100 and drawn["vox-steps"]["value"] == modes.default("inference_timesteps")
    assert drawn["vox-cfg"]["value"] == modes.default("cfg_value") and drawn["vox-max-len"]["value"] == MAX_LEN
    seed = page.locator("#vox-seed input")
    assert (seed.get_attribute("min"), seed.get_attribute("max")) == ("0", str(modes.PAGE_SEED_LIMIT - 1))


def test_pcm_decoder_carries_odd_bytes(page):
    result = page.evaluate("""async () => {
        const { PcmDecoder, toFloat32 } = await import('./voxcpm/static/player/pcm.js');
        const values = [0, 1, -1, 32767, -32768, 12345, -23456, 7];
        const bytes = new Uint8Array(new Int16Array(values).buffer);
        const decoder = new PcmDecoder();
        const out = [];
        for (const [a, b] of [[0, 1], [1, 4], [4, 7], [7, 7], [7, 16]]) out.push(...decoder.push(bytes.slice(a, b)));
        return { out, pending: decoder.pending, last: toFloat32(new Int16Array([32767]))[0] };
    }""")
    assert result == {"out": [0, 1, -1, 32767, -32768, 12345, -23456, 7], "pending": 0, "last": 1}


def test_worklet_counts_an_underrun_and_recovers(page):
    # Feed the worklet directly: 0.1 s, a pause longer than that, then the rest.
    result = page.evaluate("""async () => {
        const { node, ctx } = window.player.output;
        await ctx.resume();
        const seen = [];
        const listener = (e) => { if (e.data.id === 'probe') seen.push(e.data); };
        node.port.addEventListener('message', listener);
        const push = (n) => node.port.postMessage({ type: 'push', samples: new Float32Array(n).fill(0.25) });
        node.port.postMessage({ type: 'reset', id: 'probe' });
        push(4800);
        await new Promise((r) => setTimeout(r, 400));
        push(9600);
        node.port.postMessage({ type: 'end' });
        await new Promise((r) => setTimeout(r, 800));
        node.port.removeEventListener('message', listener);
        node.port.postMessage({ type: 'reset', id: null });
        return seen.filter((m) => m.type === 'ended' || m.type === 'underrun');
    }""")
    ended = [m for m in result if m["type"] == "ended"]
    assert [m["type"] for m in result].count("underrun") == 1
    assert ended and ended[-1]["played"] == 14400 and ended[-1]["underruns"] == 1


def _record(page, mode: str, run: dict):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"page-{mode}.png"), full_page=True)
    server = run["server"]
    line = (f"{mode}: first byte {run['firstByteAt'] - run['t0']:.0f} ms, first sound "
            f"{run['audibleAt'] - run['t0'] + run['outputLatencyMs']:.0f} ms, server first patch "
            f"{server['ttfp_s'] * 1000:.0f} ms, server RTF {server['rtf']:.3f}, client RTF {run['clientRtf']:.3f}, "
            f"{run['samples']} samples, underruns {run['underruns']}\n")
    with open(ARTIFACTS / "browser-metrics.txt", "a", encoding="utf-8") as out:
        out.write(line)
