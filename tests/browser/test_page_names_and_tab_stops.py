"""Issue 58's findings on what a keyboard and a screen reader meet, done as the QA engineer did them
in Chromium: the sliders' four reset buttons all named "Reset to default value", a take's rating
read as "Rating –★★★…", and the Tab presses it took to get from the text box to Generate. Names are
Chromium's own (its accessibility tree, as a screen reader is handed it)."""
from __future__ import annotations

from inference.request import modes

from ..support.workbench_page import app, page, slowed, take  # noqa: F401 (fixtures)

WB = "#vox-workbench"
SLIDERS = ["cfg_value", "inference_timesteps", "max_len", "speed"]  # in the page's order


def accessible_names(page, selector: str) -> list[str]:
    """Chromium's accessible name of each element matching `selector`."""
    cdp = page.context.new_cdp_session(page)
    try:
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        nodes = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": selector})["nodeIds"]
        trees = [cdp.send("Accessibility.getPartialAXTree", {"nodeId": n, "fetchRelatives": False})["nodes"] for n in nodes]
        return [tree[0].get("name", {}).get("value") for tree in trees]
    finally:
        cdp.detach()


def test_each_reset_button_names_the_setting_it_resets(page):
    if not page.locator("#vox-cfg").is_visible():
        page.get_by_text("Advanced settings").click()
    page.wait_for_function("document.querySelectorAll('#vox-advanced button.reset-button').length === 4")
    page.wait_for_function("""[...document.querySelectorAll('#vox-advanced button.reset-button')]
        .every((b) => b.getAttribute('aria-label') !== 'Reset to default value')""")
    names = accessible_names(page, "#vox-advanced button.reset-button")
    assert names == [f"Reset {modes.SETTINGS[s].label} to its default" for s in SLIDERS], names
    cfg = page.locator("#vox-cfg input[type=number]")
    cfg.fill("3.5")
    cfg.press("Enter")
    page.get_by_role("button", name=names[0]).click()  # and it still resets
    page.wait_for_function("v => document.querySelector('#vox-cfg input[type=number]').value === v",
                           arg=f"{modes.SETTINGS['cfg_value'].default:g}")


def test_a_takes_rating_reads_as_its_value_not_its_signs(page):
    take(page, "A take to rate.")
    rating = f"{WB} [data-wb=rating]"
    assert accessible_names(page, rating) == ["Rating: not rated"]
    page.select_option(rating, "3")
    assert accessible_names(page, rating) == ["Rating: 3 of 5"]
    page.wait_for_function("window.workbench.selected.rating === 3")


def test_generate_is_a_few_key_presses_from_the_text_box_with_a_take_of_many_gaps_on_screen(page, app):
    with slowed(app, 0.3):  # slower than real time: the player runs dry between patches
        t = take(page, "A take with gaps, on screen while Generate is sought.")
    assert t["figures"]["underruns"] >= 3, t["figures"]
    if not page.locator("#vox-cfg").is_visible():  # the settings open, as when tuning: 15 more stops
        page.get_by_text("Advanced settings").click()
    page.focus("#vox-text textarea")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent").startswith("Skip to Generate")
    assert page.locator("#vox-skip-box a").is_visible()  # shown while it has the focus
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "vox-generate"
    # The gaps the take lists are one Tab stop; the arrow keys move between them.
    gaps = page.locator(f"{WB} [data-wb=head] button.vox-wb-at")
    assert gaps.count() == t["figures"]["underruns"]
    assert page.evaluate("[...document.querySelectorAll('#vox-workbench [data-wb=head] button.vox-wb-at')]"
                         ".filter((b) => b.tabIndex === 0).length") == 1
    gaps.first.focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.textContent") == gaps.nth(1).inner_text()
    page.keyboard.press("Tab")
    assert page.evaluate("!document.activeElement.classList.contains('vox-wb-at')")
