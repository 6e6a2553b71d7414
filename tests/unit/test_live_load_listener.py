"""bench/live_text.py's listener: the silences a page would play, and which seams came while the
next clause's text was still being sent, and by how much (a clause of random weights can be shorter than the time
the next one takes to arrive, and no server fills that)."""
from __future__ import annotations

from bench.live_text import PCM_RATE, PARAGRAPH, Session


def patch_bytes(seconds: float) -> int:
    return int(seconds * PCM_RATE) * 2


def sent_by_pieces(text: str, every_s: float) -> list[tuple[float, int]]:
    """The paragraph's pieces (a word with its space each) sent one every `every_s` seconds."""
    sent, chars = [], 0
    for k, word in enumerate(text.split(" ")):
        chars += len(word) + 1
        sent.append((k * every_s, min(chars, len(text))))
    return sent


def test_a_seam_whose_text_came_after_the_silence_began_is_told_apart_from_one_whose_text_was_there():
    first, second, third = "Sure, here is a quick summary of the plan.", \
        "First, we gather the data from every team,", "which should take about a week."
    assert PARAGRAPH.startswith(" ".join((first, second, third)))
    # 9 words, then 8, then 6, a piece every 55 ms: clause 2 is all sent with the 17th piece, at
    # 0.88 s, clause 3 with the 23rd, at 1.21 s
    session = Session(sent=sent_by_pieces(PARAGRAPH, 0.055))
    # Clause 1: 0.32 s of audio from 0.5 s; heard from 0.5 s, dry at 0.82 s. Clause 2 starts at 0.9 s
    # (its text was all sent at 0.88 s, after the silence began): 1.6 s of audio, dry at 2.5 s.
    # Clause 3's text was there long before; its audio comes at 2.6 s, after the silence began.
    session.starts = [(0.5, first), (0.9, " " + second), (2.6, " " + third)]
    session.arrivals = [(0.5, patch_bytes(0.16)), (0.5, patch_bytes(0.16)),
                        (0.9, patch_bytes(0.8)), (0.9, patch_bytes(0.8)), (2.6, patch_bytes(0.5))]
    gaps, at_seams, leads = session.gaps(prebuffer_s=0.08)
    assert [round(g, 2) for g in gaps] == [0.08, 0.1]
    assert [round(g, 2) for g in at_seams] == [0.08, 0.1]
    # clause 2 was all sent 0.06 s after its silence began; clause 3, 1.29 s before its own
    assert [round(lead, 2) for lead in leads] == [-0.06, 1.29], "only the first seam's text came after its silence began"


def test_a_seam_whose_text_came_later_than_a_first_audio_takes_is_counted_as_the_texts():
    from bench.live_text import summarize
    first, second, third = "Sure, here is a quick summary of the plan.", \
        "First, we gather the data from every team,", "which should take about a week."
    session = Session(sent=sent_by_pieces(PARAGRAPH, 0.055), done=True)
    # Clause 1 is all sent (with its space) at 0.44 s, its audio at 0.5 s: a first audio takes 60 ms.
    # Its 0.4 s are heard from 0.5 s, dry at 0.9 s, 20 ms after clause 2 was all sent (0.88 s): the
    # silence began after the text was there, but too soon after for any first audio. Clause 3's
    # text was there 1.34 s before its silence.
    session.starts = [(0.5, first), (0.95, " " + second), (2.6, " " + third)]
    session.arrivals = [(0.5, patch_bytes(0.16)), (0.5, patch_bytes(0.24)),
                        (0.95, patch_bytes(0.8)), (0.95, patch_bytes(0.8)), (2.6, patch_bytes(0.5))]
    row = summarize([session], wall=3.1, prebuffer_s=0.08)
    assert row["clause_to_audio_p50_ms"] == 60.0
    assert (row["underruns"], row["at_seams"], row["at_seams_text_late"], row["at_seams_text_short"]) == (2, 2, 0, 1)
