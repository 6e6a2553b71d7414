"""How long the intake's calls that keep the GIL stop the app's other threads, made as before and as
the app makes them now, on any machine.

Some C calls keep the GIL for their whole length: WeText's grammars (text normalization, C++) and
binascii's base64 decoder (a clip sent in the body). On an intake thread they stop the engine's
thread (which launches each patch) and the event loop (which sends the audio) for that long. A
thread that wakes every millisecond stands in for both: its longest waits between two wakes are
how long a call held them up. The app normalizes in a process beside it (text/normalize.Normalizer)
and decodes base64 a slice at a time (request/audio_input.decode_base64).

    python -m bench.lab.intake_gil [--texts 20] [--long-chars 20000] [--clip-seconds 30]
"""
from __future__ import annotations

import argparse
import base64
import statistics
import threading
import time
from typing import Callable

import numpy as np

from inference.text.normalize import Normalizer, normalize_all
from inference.text.segments import SEGMENT_WEIGHT, split_segments
from inference.request.audio_input import decode_base64

# A paragraph of what normalization is for: money, dates, times, units, grouped numbers.
ENGLISH = ("On March 3rd, 2024 the team spent $1,250.75 on 12 GPUs at 3.5 GHz, and 45% of the runs took 2 hrs. "
           "The next meeting is at 10:30am on Jan 5; bring 3.2.1 of the notes and $42.50 for lunch. ")
CHINESE = "2024年1月5日下午3:30开会，我们花了1250元买了12台电脑，增长了50%，约3.5公斤。"


def waits_beside(calls: list[Callable[[], object]]) -> dict:
    """The calls made in turn while a thread beside wakes every ms: its waits, and the time per call."""
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
    per_call = []
    for call in calls:
        began = time.perf_counter()
        call()
        per_call.append(time.perf_counter() - began)
    stop.set()
    beside.join()
    gaps.sort()
    return {"call_ms": statistics.median(per_call) * 1e3, "wait_p50_ms": gaps[len(gaps) // 2] * 1e3,
            "wait_p99_ms": gaps[int(len(gaps) * 0.99)] * 1e3, "wait_max_ms": gaps[-1] * 1e3}


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=20, help="short texts of each language normalized in turn")
    parser.add_argument("--long-chars", type=int, default=20000, help="the long text's length (the default limit)")
    parser.add_argument("--clip-seconds", type=float, default=30.0, help="the clip's length, 48 kHz 16-bit WAV")
    args = parser.parse_args(argv)
    short = [([ENGLISH], "en"), ([CHINESE], "zh")] * args.texts
    long = split_segments(ENGLISH * (args.long_chars // len(ENGLISH)), SEGMENT_WEIGHT)  # as a request is cut
    samples = np.random.default_rng(0).integers(-3000, 3000, int(48000 * args.clip_seconds), dtype=np.int16)
    encoded = base64.b64encode(samples.tobytes()).decode()
    normalize_all([ENGLISH], "en")  # the grammars loaded here
    process = Normalizer(1)
    began = time.perf_counter()
    process.worker_pid()  # ... and there: spawned, grammars loaded
    start_s = time.perf_counter() - began
    rows = {
        f"{len(short)} short texts, normalized on the intake thread (before)":
            waits_beside([lambda s=s, lang=lang: normalize_all(s, lang) for s, lang in short]),
        "the short texts, in the process beside (now)":
            waits_beside([lambda s=s, lang=lang: process(s, lang) for s, lang in short]),
        f"one text of {args.long_chars:,} characters ({len(long)} segments), on the intake thread (before)":
            waits_beside([lambda: normalize_all(long, "en")]),
        "the long text, in the process beside (now)": waits_beside([lambda: process(long, "en")]),
        f"a {args.clip_seconds:g} s clip's base64 ({len(encoded) / 2**20:.1f} MiB), 10 times, in one call each (before)":
            waits_beside([lambda: base64.b64decode(encoded, validate=True)] * 10),
        "the clip's base64, a slice at a time (now)": waits_beside([lambda: decode_base64(encoded)] * 10),
    }
    process.close()
    print(f"short texts of {len(ENGLISH)} and {len(CHINESE)} characters; the normalizer process started and "
          f"loaded the grammars in {start_s:.1f} s\n")
    print("| call | per call, ms | a thread beside waits: p50 | p99 | longest (ms) |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['call_ms']:.1f} | {r['wait_p50_ms']:.1f} | {r['wait_p99_ms']:.1f} | {r['wait_max_ms']:.1f} |")


if __name__ == "__main__":
    main()
