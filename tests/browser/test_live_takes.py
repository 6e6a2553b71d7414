"""Live-text takes are first-class (issue 58 item 2): a take spoken through the Live text box is
marked live and keeps its clause timings, its seams and the provenance any take has (model, app,
seed, server RTF), its first audio counted from the first clause's commit; a stopped replay says as
spoken only what was heard; Re-use replays it live, and the A/B table then names live against whole;
Generate during a live session finishes what was typed, keeps it, then generates."""
from __future__ import annotations

import pytest

from ..support.workbench_page import app, page, slowed, take  # noqa: F401 (fixtures)
from .test_page_live_text import STATUS, TEXT, hearing, kept, last_run, open_box, replayed, started

WB = "#vox-workbench"


def test_a_live_take_is_marked_live_with_its_provenance_clause_timings_and_seams(page):
    live = replayed(page, TEXT, 60)
    run = page.evaluate("({ firstByteAt: window.player.run.firstByteAt, t0: window.player.run.t0 })")
    s, f = live["settings"], live["figures"]
    # Provenance as a streamed take has it: before, "Model: – @ –, app –" and server RTF "–".
    assert s["model"] and s["app_version"] and s["seed"] is not None
    assert f["server_rtf"] is not None and f["server_rtf"] > 0 and f["server_first_patch_ms"] is not None
    record = live.get("live") or {}
    assert s.get("delivery") == "live" and record["source"] == "replay" and record["rate"] == 60
    # Its first byte counts from the first clause's commit, not from the session's opening.
    assert record["first_commit_ms"] > 0
    assert f["first_byte_ms"] == pytest.approx(run["firstByteAt"] - run["t0"] - record["first_commit_ms"], abs=1)
    clauses = record["clauses"]
    assert [c["text"] for c in clauses] == ["Good evening,", " and welcome to the late news.",
                                            " Here are tonight's top stories,", " read slowly."]
    assert clauses[0]["committed_ms"] == 0 and all(c["committed_ms"] <= c["audio_ms"] for c in clauses)
    assert clauses[0]["seam_gap_ms"] is None and all(c["seam_gap_ms"] is not None for c in clauses[1:])
    assert all(c["heard"] for c in clauses) and record["pieces"][-1]["chars"] == len(TEXT)
    row = page.locator(f"{WB} [data-take='{live['id']}']").inner_text()
    assert f"#{live['n']} live · design" in row, row
    head = page.locator(f"{WB} [data-wb=head]").inner_text()
    assert "live text" in head and "Live text: replayed at 60 tokens/s; 4 clauses" in head, head
    assert "“and welcome to the late news.” committed at" in head and "seam before it:" in head, head
    assert "(from the first clause's commit)" in head and "Model: – @ –" not in head, head
    assert page.errors == []


def test_a_stopped_replay_says_as_spoken_only_the_clauses_heard(page, app):
    open_box(page)
    long = TEXT * 3
    page.fill("#vox-live [data-live=text]", long)
    page.fill("#vox-live [data-live=rate]", "200")
    before = last_run(page)
    with slowed(app, 0.05):  # the whole paragraph is sent long before it is spoken
        page.click("#vox-live [data-live=replay]")
        hearing(page, before)
        page.wait_for_function("n => window.player.run.body.text.length === n", arg=len(long))
        page.click("#vox-stop")
        stopped = kept(page, before)
    s = stopped["settings"]
    assert stopped["outcome"] == "stopped" and s["text"] == long
    head = page.locator(f"{WB} [data-wb=head]").inner_text()
    assert 0 < len(s["text_as_spoken"]) < len(long) and long not in head, head  # before: the whole paragraph
    heard = "".join(c["text"] for c in stopped["live"]["clauses"] if c["heard"])
    assert s["text_as_spoken"] == heard and f"Text as spoken: {heard.strip()}" in head, head
    assert "Stopped: what was heard is kept as a take" in page.locator(STATUS).inner_text()


def test_reuse_replays_a_live_take_live_and_the_ab_table_names_live_against_whole(page):
    first = replayed(page, TEXT, 60)
    page.click(f"{WB} [data-take='{first['id']}'] button[data-act=reuse]")
    again = kept(page, first["id"])
    assert again["id"] != first["id"] and again["settings"]["delivery"] == "live"
    assert again["live"]["source"] == "reuse" and again["settings"]["text"] == TEXT
    assert again["settings"]["seed"] == first["settings"]["seed"], "Re-use fixes the take's seed"
    assert [c["text"] for c in again["live"]["clauses"]] == [c["text"] for c in first["live"]["clauses"]]
    assert "through the live socket again" in page.locator(f"{WB} [data-wb=message]").inner_text()
    whole = take(page, None)  # Generate: the same text as a whole stream (Re-use put it in the form)
    assert whole["settings"]["delivery"] == "whole" and whole["settings"]["text"] == TEXT
    page.select_option(f"{WB} [data-wb=b-source]", again["id"])
    table = page.locator(f"{WB} [data-wb=settings-diff]")
    table.wait_for()
    labels = table.locator("tr > th[scope=row]").all_inner_texts()
    assert labels[0] == "live / whole" and not {"model", "app", "revision"} & set(labels), labels
    assert "whole" in table.inner_text() and "live" in table.inner_text()
    page.select_option(f"{WB} [data-wb=b-source]", "")


def test_generate_during_a_live_session_finishes_and_keeps_what_was_typed_then_generates(page):
    before = started(page)
    typed = "Typed by hand, and then Generate was pressed"
    page.locator("#vox-live [data-live=text]").press_sequentially(typed, delay=5)
    hearing(page, before)  # the first clause is being spoken; the rest has no end yet
    page.fill("#vox-text textarea", "The whole take after the live one.")
    page.keyboard.press("Control+Enter")
    page.locator(STATUS).filter(has_text="Generate pressed: what you typed is finished first").wait_for()
    page.wait_for_function("""typed => {
        const takes = window.workbench.takes;
        const live = takes.find((t) => t.settings.text === typed);
        const whole = takes.find((t) => t.settings.text === 'The whole take after the live one.');
        return live && whole && whole.n > live.n && window.player.run.state === 'finished';
      }""", arg=typed, timeout=90_000)
    takes = page.evaluate("window.workbench.takes.map((t) => ({ ...t, pcm: null }))")
    live = next(t for t in takes if t["settings"]["text"] == typed)
    whole = next(t for t in takes if t["settings"]["text"] == "The whole take after the live one.")
    assert live["outcome"] == "finished" and live["settings"]["delivery"] == "live"
    assert live["live"]["finished_ms"] is not None, "its unfinished clause was spoken too"
    assert "".join(c["text"] for c in live["live"]["clauses"]) == typed
    assert whole["settings"]["delivery"] == "whole" and whole["outcome"] == "finished"
    status = page.locator(STATUS).inner_text()
    assert "Listening" not in status and "kept as a take; generating the form's text now" in status, status
    assert page.errors == []
