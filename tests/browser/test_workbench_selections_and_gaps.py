"""Issue 58's findings 3 and 5 on the workbench, done as the QA engineer did them in Chromium: a
selection made on each of two takes is each take's own, kept in IndexedDB and back on switching
takes and after a reload; and a player that ran dry only because the stream's end came late (its
last audio played out before the end of the body arrived) counts no underrun, while a gap that is
still going says so instead of "0 ms"."""
from __future__ import annotations

import asyncio
import contextlib

from ui.http import frames
from ui.http import stream as stream_route

from ..support.workbench_page import app, drag, page, ready, settled, slowed, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"
KEPT = """async () => {
    const db = await new Promise((done, fail) => {
      const req = indexedDB.open('voxcpm-qa');
      req.onsuccess = () => done(req.result);
      req.onerror = () => fail(req.error);
    });
    const all = await new Promise((done) => {
      const req = db.transaction('takes').objectStore('takes').getAll();
      req.onsuccess = () => done(req.result);
    });
    db.close();
    return Object.fromEntries(all.map((t) => [t.id, t.selection ?? null]));
}"""
SELECTION = "window.workbench.view.selection && [window.workbench.view.selection.start, window.workbench.view.selection.end]"


def show(page, take_id: str):
    page.click(f"{WB} [data-take='{take_id}'] button[data-act=select]")
    page.wait_for_function("id => window.workbench.selected?.id === id && window.workbench.view.shown === id", arg=take_id)


def kept_as(page, want: dict):
    """Until IndexedDB holds each take's selection as `want` says (take id -> [start, end])."""
    page.wait_for_function(f"""async (want) => {{
        const kept = await ({KEPT})();
        return Object.entries(want).every(([id, s]) => kept[id] && Math.abs(kept[id].start - s[0]) < 1e-9
                                                      && Math.abs(kept[id].end - s[1]) < 1e-9);
    }}""", arg=want, timeout=5_000)


def test_each_take_keeps_its_own_selection_across_switching_and_a_reload(page):
    first = take(page, "The first take, to select a region of.")
    drag(page, f"{WB} [data-wb=wave-a]", 0.2, 0.5)
    on_first = page.evaluate(SELECTION)
    second = take(page, "The second take, with a region of its own.")
    assert page.evaluate(SELECTION) is None, "a new take starts with no selection"
    drag(page, f"{WB} [data-wb=wave-a]", 0.4, 0.8)
    on_second = page.evaluate(SELECTION)
    show(page, first["id"])
    assert page.evaluate(SELECTION) == on_first
    show(page, second["id"])
    assert page.evaluate(SELECTION) == on_second
    kept_as(page, {first["id"]: on_first, second["id"]: on_second})
    page.reload()
    ready(page)
    page.wait_for_function("id => window.workbench.view.shown === id", arg=second["id"])
    for t, selection in ((second, on_second), (first, on_first), (second, on_second)):
        show(page, t["id"])
        page.wait_for_function(f"!!({SELECTION})")
        assert page.evaluate(SELECTION) == selection, t["id"]
        assert page.input_value(f"{WB} [data-wb=region-from]") == f"{selection[0] * 1000:.1f}"
    assert not page.errors, page.errors


@contextlib.contextmanager
def late_end(seconds: float):
    """The body's last frame, its status, sent `seconds` after the last audio, as a slow network or
    words still being aligned hold it: the page learns only then that no more audio is coming."""
    framed = stream_route.framed_stream

    async def late(*args, **kwargs):
        async for chunk in framed(*args, **kwargs):
            if chunk[:1] == frames.STATUS:
                await asyncio.sleep(seconds)
            yield chunk
    stream_route.framed_stream = late
    try:
        yield
    finally:
        stream_route.framed_stream = framed


UNDERRUNS = "document.querySelector('#vox-panel [data-field=underruns]').textContent"


def test_running_dry_at_the_end_of_a_late_ending_stream_is_no_underrun(app, page):
    with late_end(1.5):
        page.fill("#vox-text textarea", "Its end comes late.")
        page.click("#vox-generate")
        # All its audio has played; the body has not ended yet.
        page.wait_for_function("window.player.run?.underruns === 1 && !window.player.run.final", timeout=60_000)
        assert page.evaluate(UNDERRUNS) != "1 (0 ms of gap)"
        t = take(page, None)
    assert t["figures"]["underruns"] == 0 and t["figures"]["underrun_times"] == [], t["figures"]
    assert page.evaluate(UNDERRUNS) == "0"
    assert page.evaluate("window.player.snapshot().underruns") == 0
    assert "Gaps: none" in page.locator(f"{WB} [data-wb=head]").inner_text()
    assert not page.errors, page.errors


def test_gaps_mid_stream_are_counted_with_their_lengths_and_a_running_one_says_so(app, page):
    with slowed(app, 0.3), late_end(1.0):
        page.fill("#vox-text textarea", "A take that runs dry between its patches.")
        page.click("#vox-generate")
        page.wait_for_function("window.player.run?.underruns >= 1 && window.player.run.state === 'streaming'"
                               " && window.player.run.underrunTimes.at(-1).gapMs === null", timeout=60_000, polling=10)
        running = page.evaluate(UNDERRUNS)
        assert "0 ms" not in running and "waiting" in running, running
        t = take(page, None)
    f = t["figures"]
    assert f["underruns"] >= 1 and f["underruns"] == len(f["underrun_times"]), f
    assert all(u["gap_ms"] is not None and u["gap_ms"] > 0 for u in f["underrun_times"]), f["underrun_times"]
    assert abs(f["gap_ms"] - sum(u["gap_ms"] for u in f["underrun_times"])) < 1e-6
    assert f["underrun_times"][-1]["at_samples"] < f["samples"], "the last sample played was the end, not a gap"
    line = page.locator(f"{WB} [data-wb=head] .vox-wb-fact", has_text="Gaps:").inner_text()
    assert "?" not in line, line
    assert not page.errors, page.errors
