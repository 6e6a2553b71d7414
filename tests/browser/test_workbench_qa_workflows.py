"""The listening-QA workbench's defects of issue 22, each driven as a QA engineer meets it: a mouse
drag on the waveform, a blind ABX trial, a saved voice's take re-used, Stop and a second Generate,
Clear all and Delete undone, a long text's segments, the keyboard and a phone, and the small ones."""
from __future__ import annotations

import re

from ..support.page_handles import click_generate
from ..support.workbench_page import app, drag, page, ready, slowed, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"


def test_a_drag_on_the_waveform_selects_a_region_that_loops(page):
    t = take(page)
    drag(page, f"{WB} [data-wb=wave-a]", 0.2, 0.5)
    seconds = t["figures"]["seconds"]
    sel = page.evaluate("(() => { const s = window.workbench.view.selection; return s && [s.start, s.end]; })()")
    assert sel and abs(sel[0] - 0.2 * seconds) < 0.05 and abs(sel[1] - 0.5 * seconds) < 0.05, sel
    assert "selection" in page.locator(f"{WB} [data-wb=readout]").inner_text()
    page.check(f"{WB} [data-wb=loop]")
    page.click(f"{WB} [data-wb=play]")
    page.wait_for_timeout(int((sel[1] - sel[0]) * 2500) + 300)  # past the region's end, twice over
    where = page.evaluate("[window.workbench.view.a.getCurrentTime(), window.workbench.view.a.isPlaying()]")
    page.click(f"{WB} [data-wb=play]")
    assert where[1] and sel[0] - 0.02 <= where[0] <= sel[1] + 0.1, (where, sel)
    # A drag that starts on a chunk boundary's line (one every 160 ms), past the selection, selects too.
    line = next(k * 0.16 for k in range(1, 100) if k * 0.16 > sel[1] + 0.02)
    drag(page, f"{WB} [data-wb=wave-a]", line / seconds, 0.98)
    on_line = page.evaluate("(() => { const s = window.workbench.view.selection; return s && [s.start, s.end]; })()")
    assert on_line and abs(on_line[0] - line) < 0.02 and on_line[1] > line + 0.05, (on_line, line, seconds)
def test_abx_is_blind_and_needs_a_b(page):
    take(page)
    page.select_option(f"{WB} [data-wb=b-source]", "")
    page.click(f"{WB} [data-wb=abx-start]")
    assert "Pick B" in page.locator(f"{WB} [data-wb=abx-score]").inner_text()
    page.select_option(f"{WB} [data-wb=b-source]", "offline")
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    before = page.locator(f"{WB} [data-wb=readout]").inner_text()
    switch = page.locator(f"{WB} [data-wb=switch]").inner_text()
    page.click(f"{WB} [data-wb=abx-start]")
    page.click(f"{WB} [data-wb=abx-play-x]")
    page.wait_for_timeout(400)
    state = page.evaluate("""() => { const v = window.workbench.view;
        return [v.a.getCurrentTime(), v.b.getCurrentTime(), document.querySelector('#vox-workbench').dataset.active,
                document.querySelector('[data-wb=switch]').textContent, window.workbench.abx.playing()]; }""")
    assert state[0] == 0 and state[1] == 0 and state[2] == "A" and state[3] == switch, state
    assert state[4] == "X"  # X is what plays, through its own player
    assert page.locator(f"{WB} [data-wb=readout]").inner_text() == before
    page.fill(f"{WB} [data-wb=abx-trials]", "4")
    page.click(f"{WB} [data-wb=abx-start]")
    for answer in "ABBA":
        assert "correct" not in page.locator(f"{WB} [data-wb=abx-score]").inner_text().split("ABX:")[0]
        page.click(f"{WB} [data-wb=abx-answer-{answer.lower()}]")
    page.wait_for_function("window.workbench.selected.abx.length === 4")
    trials = page.evaluate("window.workbench.selected.abx")
    right = sum(t["correct"] for t in trials)
    p = sum(__import__("math").comb(4, k) for k in range(right, 5)) / 16
    page.wait_for_function("document.querySelector('#vox-workbench [data-wb=abx-score]').innerText.includes('this session')")
    score = page.locator(f"{WB} [data-wb=abx-score]").inner_text()
    shown = re.search(r"ABX, this session \(B: offline render of take \d+; [\d.]+–[\d.]+ ms\): (\d) of 4 correct, p = ([\d.]+)", score)
    assert len(re.findall(r"of 4 correct", score)) == 1, score  # the score once (issue 36: it was printed twice)
    assert int(shown[1]) == right and abs(float(shown[2]) - p) < 0.001


def test_a_saved_voice_take_says_its_voice_and_reuses_it_after_a_reload(page):
    take(page, "A voice to keep.")
    page.reload()
    ready(page)
    page.wait_for_function("window.workbench.selected")
    page.get_by_text("Voice library").click()
    page.fill("#vox-voices .vox-voice-name", "Kept")
    page.click("#vox-voices .vox-save-take")  # no run since the reload: the take the workbench shows
    page.wait_for_function("document.querySelector('#vox-voices .vox-voices-status').textContent.startsWith('Saved')",
                           timeout=60_000)
    page.get_by_role("tab", name="Ultimate cloning").click()
    page.select_option(".vox-voice-pick[data-mode='ultimate'] select", "Kept")
    cloned = take(page, "Said in the kept voice.")
    assert cloned["outcome"] == "finished" and cloned["settings"]["voice"] == "Kept"
    head = page.locator(f"{WB} [data-wb=head]").inner_text()
    assert "Clip: saved voice “Kept”" in head and "Style / transcript: the saved voice “Kept”'s own transcript" in head
    page.select_option(".vox-voice-pick[data-mode='ultimate'] select", "")
    page.get_by_role("tab", name="Voice design").click()
    page.click(f"{WB} [data-take='{cloned['id']}'] button[data-act=reuse]")
    page.wait_for_function("document.querySelector(\".vox-voice-pick[data-mode='ultimate'] select\").value === 'Kept'")
    again = take(page, None)
    assert again["outcome"] == "finished" and again["settings"]["voice"] == "Kept" and again["settings"]["mode"] == "ultimate"
    page.get_by_role("tab", name="Voice design").click()


def test_stopped_and_replaced_takes_keep_their_server_details(app, page):
    page.locator("#vox-normalize input[type=checkbox]").check()
    page.fill("#vox-text textarea", "I have 3 cats and 2 dogs.")
    before = page.evaluate("window.workbench.takes.length")
    with slowed(app, 0.3):
        click_generate(page)
        page.wait_for_function("window.player.run.samples > 0", timeout=30_000)
        page.click("#vox-stop")
        page.wait_for_function("window.workbench.selected && window.workbench.selected.id === window.player.run.id",
                               timeout=30_000)
        head = page.locator(f"{WB} [data-wb=head]").inner_text()
        row = page.locator(f"{WB} [data-take]").first.inner_text()
        click_generate(page)
        replaced = page.evaluate("window.player.run.id")
        page.wait_for_function("window.player.run.samples > 0", timeout=30_000)
        click_generate(page)  # Generate again while the first streams
        page.wait_for_function("id => window.workbench.takes.some((t) => t.id === id)", arg=replaced, timeout=30_000)
        page.wait_for_function("id => window.player.run.id !== id && window.player.run.samples > 0", arg=replaced,
                               timeout=30_000)
        page.click("#vox-stop")
    page.locator("#vox-normalize input[type=checkbox]").uncheck()
    assert "Text as spoken: I have three cats and two dogs." in head and "Model: tiny random model @" in head, head
    assert re.search(r"server first patch \d+ ms", head) and "stopped" in row, (head, row)
    kept = page.evaluate("id => { const t = window.workbench.takes.find((t) => t.id === id); return [t.outcome, t.status]; }",
                         replaced)
    assert kept == ["stopped", "replaced by the next Generate"]
    page.wait_for_function("n => window.workbench.takes.length === n + 3", arg=before, timeout=30_000)


def _ids(page):
    return page.evaluate("window.workbench.takes.map((t) => t.id)")


def test_clear_all_asks_first_and_delete_and_clear_can_be_undone(page):
    take(page)
    ids = _ids(page)
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click(f"{WB} [data-wb=clear]")
    page.wait_for_timeout(300)
    assert _ids(page) == ids  # said no: nothing gone
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(f"{WB} [data-wb=clear]")
    page.wait_for_function("window.workbench.takes.length === 0")
    page.click(f"{WB} [data-wb=undo]")
    page.wait_for_function("n => window.workbench.takes.length === n", arg=len(ids))
    page.click(f"{WB} [data-take='{ids[0]}'] button[data-act=delete]")
    page.wait_for_function("n => window.workbench.takes.length === n - 1", arg=len(ids))
    page.click(f"{WB} [data-wb=undo]")
    page.wait_for_function("n => window.workbench.takes.length === n", arg=len(ids))
    page.reload()
    ready(page)
    page.wait_for_function("window.workbench.selected")
    assert _ids(page) == ids and page.locator(f"{WB} [data-take]").count() == len(ids)


LONG = "On May 5 we sold 1,250 tickets. The hall was full by 8pm. Everyone stayed until the end."


def test_a_long_texts_segments_are_on_the_waveform_and_follow_the_cursor(app, page):
    engine = app.worker.engine
    weight, engine.preparer.segment_weight = engine.preparer.segment_weight, 40  # a segment per sentence
    page.locator("#vox-normalize input[type=checkbox]").check()
    try:
        t = take(page, LONG)
    finally:
        engine.preparer.segment_weight = weight
        page.locator("#vox-normalize input[type=checkbox]").uncheck()
    ends = t["segments"]["ends"]
    assert len(t["segments"]["texts"]) == 3 and len(ends) == 3
    assert page.evaluate("window.workbench.view.marks('s-')") == ends[:-1]  # where segments 2 and 3 start
    items = page.locator(f"{WB} [data-wb=segments] li")
    assert items.count() == 3 and "one thousand two hundred and fifty tickets" in items.nth(0).inner_text()
    # A click on the waveform inside segment 2 marks it as the one heard; a click on segment 3 seeks there.
    x = (ends[0] + ends[1]) / 2 / t["figures"]["samples"]
    page.locator(f"{WB} [data-wb=wave-a]").click(position={"x": page.locator(f"{WB} [data-wb=wave-a]").bounding_box()["width"] * x, "y": 40})
    page.wait_for_function("document.querySelector('#vox-workbench [data-wb=segments] li[aria-current=true]')?.dataset.segment === '1'")
    items.nth(2).click()
    at = page.evaluate("window.workbench.view.a.getCurrentTime()")
    assert abs(at * 48000 - ends[1]) < 48
    assert items.nth(2).get_attribute("aria-current") == "true"


def test_the_keyboard_reaches_and_drives_the_take_and_a_phone_shows_the_list(page):
    while page.evaluate("window.workbench.takes.length") < 6:
        take(page)
    page.focus("#vox-generate")
    for tabs in range(1, 60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.wb") == "play":
            break
    assert tabs <= 25, f"{tabs} Tabs from Generate to the workbench's Play"
    tabbable = page.locator(f"{WB} [data-wb=list] button[tabindex='0']")
    assert tabbable.count() == 4  # one row's buttons: the list is one stop on the way
    tabbable.first.focus()  # in the list, Down moves to the next row's same button
    row = page.evaluate("document.activeElement.closest('[data-take]').dataset.take")
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.closest('[data-take]').dataset.take") != row
    page.keyboard.press("Escape")
    page.keyboard.press("w")  # the waveform takes the focus; arrows seek, Shift+arrows select
    assert page.evaluate("document.activeElement.dataset.wb") == "wave-a"
    page.keyboard.press("Home")
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    assert abs(page.evaluate("window.workbench.view.a.getCurrentTime()") - 0.3) < 0.002
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    sel = page.evaluate("[window.workbench.view.selection.start, window.workbench.view.selection.end]")
    assert abs(sel[0] - 0.3) < 0.002 and abs(sel[1] - 0.5) < 0.002
    shown = page.evaluate("window.workbench.selected.id")
    page.keyboard.press("n")
    page.wait_for_function("id => window.workbench.selected.id !== id", arg=shown)
    page.keyboard.press("p")
    page.wait_for_function("id => window.workbench.selected.id === id", arg=shown)
    page.keyboard.press("?")
    assert page.locator(f"{WB} [data-wb=help]").is_visible() and "next (older)" in page.locator(f"{WB} [data-wb=help]").inner_text()
    page.keyboard.press("Escape")
    assert not page.locator(f"{WB} [data-wb=help]").is_visible()
    page.keyboard.press("k")  # play, then pause, as the Play button does
    page.wait_for_function("window.workbench.view.a.isPlaying()")
    page.keyboard.press("k")
    page.wait_for_function("!window.workbench.view.a.isPlaying()")
    page.keyboard.press("l")
    assert page.is_checked(f"{WB} [data-wb=loop]")
    page.keyboard.press("l")
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.locator(f"{WB} [data-wb=list]").scroll_into_view_if_needed()
        box = page.evaluate("""() => { const l = document.querySelector('#vox-workbench [data-wb=list]');
            const buttons = [...l.querySelectorAll('button')].map((b) => b.getBoundingClientRect());
            return { inner: l.scrollHeight - l.clientHeight, right: Math.max(...buttons.map((r) => r.right)),
                     narrow: Math.min(...buttons.map((r) => r.width)) }; }""")
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})
    assert box["inner"] <= 1 and box["right"] <= 390 and box["narrow"] > 30, box  # no box scrolling inside the page


def test_b_switches_between_a_and_b_at_the_same_position(page):
    take(page)
    page.select_option(f"{WB} [data-wb=b-source]", "offline")
    page.wait_for_function("window.workbench.lastDifference", timeout=30_000)
    page.keyboard.press("w")  # out of the B selector, where b is a letter typed
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    side = "[document.querySelector('#vox-workbench').dataset.active, window.workbench.view.b.getCurrentTime()," \
           " document.querySelector('#vox-workbench [data-wb=switch]').getAttribute('aria-pressed')]"
    assert page.evaluate(side)[0] == "A"
    page.keyboard.press("b")
    active, at, pressed = page.evaluate(side)
    assert active == "B" and pressed == "true" and abs(at - 0.1) < 0.002, (active, at, pressed)
    page.keyboard.press("b")
    assert page.evaluate(side)[::2] == ["A", "false"]


NUMBERS = "Version 3.2.1 took 2 hrs to lay 1,200 m² of floor; we read 1,024 pages and sold 1,250,000 copies."
SPOKEN = ("Version three point two point one", "two hours", "one thousand two hundred square meters",
          "one thousand and twenty four pages", "one million two hundred and fifty thousand copies")


def test_normalization_reads_versions_units_and_grouped_numbers(page):
    page.locator("#vox-normalize input[type=checkbox]").check()
    try:
        t = take(page, NUMBERS)
    finally:
        page.locator("#vox-normalize input[type=checkbox]").uncheck()
    head = page.locator(f"{WB} [data-wb=head]").inner_text()
    spoken = re.search(r"Text as spoken: (.*)", head)[1]
    assert t["settings"]["text_as_spoken"] == spoken and all(words in spoken for words in SPOKEN), spoken
    assert not re.search(r"\d|hrs|m²", spoken), spoken  # nothing left to the model to guess at
    assert spoken in page.locator("#vox-panel [data-field='spoken_text']").text_content()


def test_gap_labels_the_wav_name_the_take_row_and_the_difference_read_plainly(app, page):
    take(page, "Another take, for B.")
    with slowed(app, 0.3):
        t = take(page, "Gaps to label.")
    assert t["figures"]["underruns"] > 0
    # Gap labels stay on one line over the waveform.
    label = page.evaluate("""() => { const r = window.workbench.view.regions.getRegions().find((r) => r.id.startsWith('u-'));
        const box = r.content.getBoundingClientRect(); return [box.width, box.height, r.content.textContent]; }""")
    assert label[2].startswith("gap ") and label[1] < 24 and label[0] > label[1], label
    # One at the very end reads leftwards, inside the waveform (it was cut off), on a phone too.
    page.evaluate("n => window.workbench.view.mark({ id: 't-end', sample: n - 96, label: 'gap 999 ms' })", t["figures"]["samples"])
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 800})
        page.wait_for_function("""() => { const w = document.querySelector('#vox-workbench [data-wb=wave-a]').getBoundingClientRect();
            const b = window.workbench.view.regions.getRegions().find((r) => r.id === 't-end').content.getBoundingClientRect();
            return w.width > 0 && b.width > 0 && b.left >= w.left && b.right <= w.right + 3; }""", timeout=5_000)
    page.evaluate("window.workbench.view.unmark('t-')")
    # The panel's Download WAV is named as the workbench names the take's WAV.
    link = page.locator("#vox-panel a[download]").get_attribute("download")
    s = t["settings"]
    assert link == f"voxcpm2-{s['mode']}-seed{s['seed']}-cfg{s['cfg_value']}-steps{s['inference_timesteps']}-take{t['n']}.wav"
    # The row shows the text; B's selector looks like a drop-down.
    assert "Gaps to label." in page.locator(f"{WB} [data-take='{t['id']}']").inner_text()
    arrow = page.evaluate("""() => { const s = getComputedStyle(document.querySelector('#vox-workbench [data-wb=b-source]'));
        return [s.appearance, s.backgroundImage]; }""")
    assert arrow[0] != "none" or arrow[1] != "none", arrow
    # A difference far from zero reads in plain numbers, not "1.4e+0 of full scale".
    other = page.evaluate("window.workbench.takes.find((x) => x.id !== window.workbench.selected.id).id")
    page.select_option(f"{WB} [data-wb=b-source]", other)
    page.wait_for_function("document.querySelector('#vox-workbench [data-wb=diff]').textContent.includes('SNR')")
    diff = page.locator(f"{WB} [data-wb=diff]").inner_text()
    assert not re.search(r"\de[+-]\d", diff) and re.search(r"[\d.]+ % of full scale", diff), diff
