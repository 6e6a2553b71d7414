"""Issue 58's small findings on the page, as the QA engineer met them in Chromium: the `?` help
lists Ctrl+Enter, the one shortcut that acts anywhere on the page (it was left out)."""
from __future__ import annotations

from ..support.workbench_page import app, page, take  # noqa: F401 (fixtures)


def test_the_shortcut_help_lists_ctrl_enter(page):
    take(page, "A take on screen, for the shortcuts.")
    page.focus("#vox-workbench [data-wb=wave-a]")
    page.keyboard.press("?")
    help_ = page.locator("#vox-workbench [data-wb=help]")
    help_.wait_for(state="visible")
    rows = dict(zip(help_.locator("tbody th").all_inner_texts(), help_.locator("tbody td").all_inner_texts()))
    assert any("Ctrl+Enter" in keys for keys in rows), rows
    page.keyboard.press("Escape")
    assert not page.errors, page.errors
