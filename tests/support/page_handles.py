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
    """Once Gradio has drawn the page and the player's audio is set up: window.player, .workbench,
    .voices and .gradio, for this test's own use. Checks first that the page defined no globals."""
    page.wait_for_selector("#vox-generate", timeout=timeout_ms)
    assert page.evaluate("Object.keys(window).filter((name) => /vox/i.test(name))") == []
    page.evaluate(HANDLES)
    page.wait_for_function("window.player.output.ctx", timeout=30_000)


def click_generate(page):
    """Clicks Generate and returns once the player has taken the new request: Gradio calls the
    button's hook a task or two after the click, so until then the player still shows the last run."""
    before = page.evaluate("window.player.run && window.player.run.id")
    page.click("#vox-generate")
    page.wait_for_function("before => window.player.run && window.player.run.id !== before", arg=before)
