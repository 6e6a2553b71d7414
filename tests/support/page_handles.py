"""Handles on the page's modules for the browser tests. The page puts nothing on window, so a test
imports the modules itself, by the URLs the page's own module script resolved them to, and gets
the same instances: the player, the workbench, the voice library and the adapter to Gradio (whose
generate() is what the Generate button's hook calls)."""
from __future__ import annotations

HANDLES = """async () => {
    const load = (path) => import(new URL(`voxcpm/static/${path}`, document.baseURI).href);
    window.player = (await load('player/player.js')).player;
    window.workbench = (await load('workbench/workbench.js')).workbench;
    window.voices = (await load('voices/voices.js')).voices;
    window.gradio = await load('page/gradio.js');
}"""


def take_handles(page, timeout_ms: int = 60_000):
    """Once Gradio has drawn the page, the player's audio is set up and the last visit's form is
    back: window.player, .workbench, .voices and .gradio, for this test's own use. Checks first that the page defined no globals."""
    page.wait_for_selector("#vox-generate", timeout=timeout_ms)
    assert page.evaluate("Object.keys(window).filter((name) => /vox/i.test(name))") == []
    page.evaluate(HANDLES)
    page.wait_for_function("window.player.output.ctx", timeout=30_000)
    # The last visit's form is back (static/page/keep.js): a test's own fill comes after it.
    page.wait_for_selector("#vox-form-note[data-restore=done]", state="attached", timeout=timeout_ms)


def click_generate(page):
    """Clicks Generate and returns once the player has taken the new request: Gradio calls the
    button's hook a task or two after the click, so until then the player still shows the last run."""
    before = page.evaluate("window.player.run && window.player.run.id")
    page.click("#vox-generate")
    page.wait_for_function("before => window.player.run && window.player.run.id !== before", arg=before)


def underruns_with_audio_waiting(run: dict, slack_ms: float = 50.0) -> list[dict]:
    """The underruns of a player snapshot that the network does not explain: the player ran dry
    although the patch it needed next had arrived (more than `slack_ms` before, for the worklet's
    messages). A CPU that makes audio slower than real time for a moment gives underruns; these
    mean the player lost or held back audio it had. The time of each is read off the audio clock:
    first sound, plus what was played, plus the gaps before it."""
    rate = run["contextRate"]
    unexplained, gaps_ms = [], 0.0
    for gap in run["underrunTimes"]:
        dry_at_ms = run["audibleAt"] - run["t0"] + gap["at"] / rate * 1000 + gaps_ms
        needed = next((b for b in run["boundaries"] if b["offset"] + b["samples"] > gap["at"]), None)
        if needed is not None and needed["client_ms"] < dry_at_ms - slack_ms:
            unexplained.append({**gap, "dry_at_ms": dry_at_ms, "arrived_ms": needed["client_ms"]})
        gaps_ms += gap["gapMs"] or 0.0
    return unexplained
