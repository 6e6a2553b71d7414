"""How long normalizing a text stops the app's other threads, normalized on the intake thread and in
a process beside (text/normalize.Normalizer), on any machine.

WeText's grammars run in C++ that keeps the GIL for the whole call. A thread that wakes every
millisecond stands in for the engine's thread (which launches each patch) and the event loop (which
sends the audio): its longest waits between two wakes are how long the normalization held them up.

    python -m bench.lab.normalize_beside [--texts 20]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

from inference.text.normalize import Normalizer, normalize_all
from inference.text.segments import SEGMENT_WEIGHT, split_segments

# A paragraph of what normalization is for: money, dates, times, units, grouped numbers.
ENGLISH = ("On March 3rd, 2024 the team spent $1,250.75 on 12 GPUs at 3.5 GHz, and 45% of the runs took 2 hrs. "
           "The next meeting is at 10:30am on Jan 5; bring 3.2.1 of the notes and $42.50 for lunch. ")
CHINESE = "2024年1月5日下午3:30开会，我们花了1250元买了12台电脑，增长了50%，约3.5公斤。"


def waits_beside(normalize, texts: list[tuple[list[str], str]]) -> dict:
    """The texts (each a list of segments) normalized in turn while a thread beside wakes every ms:
    its waits, and the time per text."""
    stop, gaps = threading.Event(), []

    def wakes():
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
    beside = threading.Thread(target=wakes, daemon=True)
    beside.start()
    time.sleep(0.05)
    per_text = []
    for segments, lang in texts:
        began = time.perf_counter()
        normalize(segments, lang)
        per_text.append(time.perf_counter() - began)
    stop.set()
    beside.join()
    gaps.sort()
    return {"text_ms": statistics.median(per_text) * 1e3, "wait_p50_ms": gaps[len(gaps) // 2] * 1e3,
            "wait_p99_ms": gaps[int(len(gaps) * 0.99)] * 1e3, "wait_max_ms": gaps[-1] * 1e3}


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=20, help="texts of each language normalized in turn")
    parser.add_argument("--long-chars", type=int, default=20000, help="the long text's length (the default limit)")
    args = parser.parse_args(argv)
    texts = [([ENGLISH], "en"), ([CHINESE], "zh")] * args.texts
    long = split_segments(ENGLISH * (args.long_chars // len(ENGLISH)), SEGMENT_WEIGHT)  # as a request is cut
    normalize_all([ENGLISH], "en")  # the grammars loaded here
    process = Normalizer(1)
    began = time.perf_counter()
    process.worker_pid()  # ... and there: spawned, grammars loaded
    start_s = time.perf_counter() - began
    rows = {"on the intake thread (before)": waits_beside(normalize_all, texts),
            "in a process beside (Normalizer)": waits_beside(process, texts),
            f"one text of {args.long_chars:,} characters, on the intake thread": waits_beside(normalize_all, [(long, "en")]),
            f"one text of {args.long_chars:,} characters, in the process beside": waits_beside(process, [(long, "en")])}
    process.close()
    print(f"{len(texts)} texts ({len(ENGLISH)} and {len(CHINESE)} characters) normalized in turn, then one of "
          f"{args.long_chars:,} ({len(long)} segments); "
          f"the process started and loaded the grammars in {start_s:.1f} s\n")
    print("| normalized | per text, ms | a thread beside waits: p50 | p99 | longest (ms) |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['text_ms']:.1f} | {r['wait_p50_ms']:.1f} | {r['wait_p99_ms']:.1f} | {r['wait_max_ms']:.1f} |")


if __name__ == "__main__":
    main()
