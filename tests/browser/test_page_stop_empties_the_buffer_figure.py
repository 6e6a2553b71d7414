"""Issue 58: Stop left "Buffer 797 ms" on the panel, the player's figure from just before it was
emptied. Done as the QA engineer did it: Stop pressed while a take plays on a page busy enough that
the player's last reports are still on their way when Stop empties it."""
from __future__ import annotations

from ..support.app_helpers import set_max_len
from ..support.page_handles import click_generate
from ..support.workbench_page import app, page  # noqa: F401 (fixtures)

# Counts the player's reports sent after it was emptied (a reset reports with no stream's id): the
# worklet's reports come in order, so once one is in, every report sent before the reset is too.
COUNT_RESETS = """() => {
    window.resets = 0;
    const on = window.player.onWorklet.bind(window.player);
    window.player.onWorklet = (msg) => { if (msg.id === null) window.resets += 1; on(msg); };
}"""
# A page busy for a moment (a long layout, a garbage collection) while the reports keep coming, then
# a click on Stop: the reports sent meanwhile are read after it.
BUSY_THEN_STOP = """() => {
    const t = performance.now();
    while (performance.now() - t < 300) { /* busy */ }
    document.querySelector('#vox-stop').click();
}"""


def test_stop_while_playing_leaves_no_buffer_figure_on_the_panel(page):
    set_max_len(page, 30)  # 4.8 s: still playing when Stop is pressed
    page.fill("#vox-text textarea", "A long take to stop while it plays, with audio waiting in the player.")
    page.evaluate(COUNT_RESETS)
    click_generate(page)
    page.wait_for_function("window.player.run.buffered > 0 && window.player.run.played > 0")
    before = page.evaluate("window.resets")
    page.evaluate(BUSY_THEN_STOP)
    page.wait_for_function("n => window.player.run.state === 'stopped' && window.resets > n", arg=before)
    assert page.locator("#vox-panel [data-field=buffer]").inner_text() == "empty (stopped)"
    assert page.locator("#vox-panel [data-field=status]").inner_text() == "Stopped."
