"""The scheduler's steps during a load, second by second: how long each step took, how many streams
it admitted, and the listeners it found dry at a patch (at a seam between segments, or inside a
segment); and for live-text sessions, how long after the worker handed it over each sentence's first
audio left the server (the first sentence's, and at the seams). The app runs in this process with
the `voxcpm.steps` logger on (one JSON line per step, inference/runtime/scheduler.py) and
`voxcpm.sends` (one per sentence, ui/http/utterance.py), written to `--log`; any load is then sent
to it (bench.live_text --url, bench.serve --url), and `--summary` reads the log back.

    python -m bench.lab.step_trace --log steps.jsonl -- app.py --model DIR --port 7861   # the app, traced
    python -m bench.lab.step_trace --summary steps.jsonl                                # the table

It answers "was it the steps, or the wait for text?": a load whose listeners run dry while its steps
take as long as usual waited for text or for a row; one whose steps stretch at some moment had the
device or the engine's thread held up then. And "made late, or sent late?": a client that hears a
seam the steps found on time heard the send's delay, or its own.
"""
from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import queue
import runpy
import statistics
import sys
from pathlib import Path

LOAD_GAP_S = 3.0  # a pause this long between busy steps starts another load
BUSY = 8  # streams a step must hold (live, joining or parked) to count as a load's


def _lines(path: Path, *keys: str) -> list[dict]:
    """The JSON objects of a log that hold every one of `keys` (other lines are skipped)."""
    out = []
    for line in path.read_text().splitlines():
        start = line.find("{")
        if start >= 0:
            try:
                record = json.loads(line[start:])
            except ValueError:
                continue
            if isinstance(record, dict) and all(key in record for key in keys):
                out.append(record)
    return out


def records(path: Path) -> list[dict]:
    """The step lines of a log (voxcpm.steps)."""
    return _lines(path, "t", "ms")


def sends(path: Path) -> list[dict]:
    """The sentence lines of a log (voxcpm.sends): t, sentence, sent_after_ms."""
    return _lines(path, "t", "sentence", "sent_after_ms")


def loads(steps: list[dict], busy: int = BUSY, gap_s: float = LOAD_GAP_S) -> list[list[dict]]:
    """The steps of each load: runs of steps holding at least `busy` streams, split where none ran
    for `gap_s`."""
    out: list[list[dict]] = []
    for step in steps:
        if step["live"] + step["joining"] + step["parked"] < busy:
            continue
        if not out or step["t"] - out[-1][-1]["t"] > gap_s:
            out.append([])
        out[-1].append(step)
    return out


def by_second(load: list[dict], seconds: float = 1.0, sent: list[dict] = ()) -> list[dict]:
    """A load's steps in bins of `seconds` from its first step: per bin the steps, their median and
    longest time (ms), the streams admitted per step, the live streams, and the dry listeners; and
    of the sentence lines `sent` in the bin, the first sentences' and the seams' delays (ms) from
    hand-over to sent, each (median, most), or None."""
    start, end, bins, delays = load[0]["t"], load[-1]["t"], {}, {}
    for step in load:
        bins.setdefault(int((step["t"] - start) // seconds), []).append(step)
    for line in sent:
        if start <= line["t"] <= end + seconds:
            delays.setdefault(int((line["t"] - start) // seconds), ([], []))[line["sentence"] > 0].append(
                line["sent_after_ms"])
    spread = lambda d: (statistics.median(d), max(d)) if d else None  # noqa: E731
    out = []
    for k, b in sorted(bins.items()):
        firsts, seams = delays.get(k, ([], []))
        out.append({"from_s": k * seconds, "steps": len(b), "median_ms": statistics.median(s["ms"] for s in b),
                    "max_ms": max(s["ms"] for s in b), "admitted": statistics.mean(s["admitted"] for s in b),
                    "live": statistics.mean(s["live"] for s in b), "dry_seam": sum(s["dry_seam"] for s in b),
                    "dry_inside": sum(s["dry_inside"] for s in b), "first_sent_ms": spread(firsts),
                    "seam_sent_ms": spread(seams)})
    return out


def table(path: Path) -> str:
    lines, sent = [], sends(path)
    ms = lambda spread: "-" if spread is None else f"{spread[0]:.0f} / {spread[1]:.0f}"  # noqa: E731
    for n, load in enumerate(loads(records(path)), 1):
        lines += [f"\nload {n}: {len(load)} steps over {load[-1]['t'] - load[0]['t']:.1f} s", "",
                  "| from s | steps | step ms median / max | admitted per step | live | dry at a seam | dry inside | "
                  "first sentence sent, ms after hand-over | seam sent, ms after hand-over |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {b['from_s']:g} | {b['steps']} | {b['median_ms']:.0f} / {b['max_ms']:.0f} | {b['admitted']:.1f} | "
                  f"{b['live']:.0f} | {b['dry_seam']} | {b['dry_inside']} | {ms(b['first_sent_ms'])} | "
                  f"{ms(b['seam_sent_ms'])} |" for b in by_second(load, sent=sent)]
    return "\n".join(lines) if lines else "no load in the log"


def run_app(log_path: Path, argv: list[str]):
    """app.py (argv[0]) with its arguments, in this process, its scheduler's steps written to log_path."""
    log_path.write_text("")
    # Appending: uvicorn's logging config closes every handler there is, and a closed handler
    # opened to write ("w") then drops records, where one opened to append reopens its file.
    handler = logging.FileHandler(log_path, mode="a")
    handler.setFormatter(logging.Formatter("%(message)s"))
    # The engine's thread only queues each line; a thread of the listener's writes the file.
    lines: queue.SimpleQueue = queue.SimpleQueue()
    writer = logging.handlers.QueueListener(lines, handler)
    for name in ("voxcpm.steps", "voxcpm.sends"):
        traced = logging.getLogger(name)
        traced.setLevel(logging.DEBUG)
        traced.addHandler(logging.handlers.QueueHandler(lines))
        traced.propagate = False  # the app's own log keeps its level
    sys.argv = argv
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    writer.start()
    try:
        runpy.run_path(argv[0], run_name="__main__")
    finally:
        writer.stop()  # what is queued is written


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, help="run the app given after --, its steps written here")
    ap.add_argument("--summary", type=Path, help="a log written by --log: its loads, second by second")
    ap.add_argument("app", nargs=argparse.REMAINDER, help="-- app.py and its options")
    args = ap.parse_args()
    if args.summary:
        print(table(args.summary))
    elif args.log and args.app:
        run_app(args.log, args.app[1:] if args.app[0] == "--" else args.app)
    else:
        ap.error("give --summary LOG, or --log LOG -- app.py OPTIONS")


if __name__ == "__main__":
    main()
