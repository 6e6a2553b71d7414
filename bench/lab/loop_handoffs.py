"""Where the app's event loop hands the GIL away and waits for it back, on any Linux machine.

A C call that lets go of the GIL (NumPy's loops over more than a few hundred elements, soxr,
PyTorch, a file's removal) must take it back when it returns; while another thread runs Python it
waits for that thread to let go, up to the switch interval (5 ms). The loop's CPU time
(`loop_cost.py`) does not count those waits. This starts the app on the tiny model on the CPU with
a hook on its main thread, the event loop's (sys.setprofile: every C call's time), and a thread that
only runs Python beside it once the app is ready (the worst case of the engine's thread), sends it
bursts of streamed requests, and lists the C calls the loop made that took longest in all.

    python -m bench.lab.loop_handoffs [--requests 32 --bursts 3 --patches 4] [--no-busy]

The result is in docs/benchmarks.md ("Admission ahead behind a first patch, and where a live
chunk is resampled").
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

LONG_S = 0.0005  # a C call longer than this counts as one that waited
HOOK = """import os, sys
sys.path.insert(0, {root!r})
from bench.lab.loop_handoffs import install
install({out!r}, {go!r}, {done!r}, {busy!r})
"""


def install(out: str, go: str, done: str, busy: bool):
    """In the app's process (its sitecustomize): times every C call of the main thread from when
    the file `go` exists until `done` does (the app's start and its shutdown left out), with
    (`busy`) a thread of its own running Python meanwhile; at exit writes each call's count, long
    calls and seconds to `out`."""
    import atexit
    import collections
    import sys
    import threading

    stats: dict[str, list] = collections.defaultdict(lambda: [0, 0, 0.0, 0.0])  # calls, long, s, long s
    began: list[float] = []
    counting = [False]

    def name(fn) -> str:
        owner = getattr(fn, "__module__", None) or type(getattr(fn, "__self__", None)).__module__
        return f"{owner}.{getattr(fn, '__qualname__', getattr(fn, '__name__', type(fn).__name__))}"

    def profile(frame, event, arg):
        if event == "c_call":
            began.append(time.perf_counter())
        elif event in ("c_return", "c_exception") and began:
            spent = time.perf_counter() - began.pop()
            if not counting[0]:
                return
            row = stats[name(arg)]
            row[0] += 1
            row[2] += spent
            if spent > LONG_S:
                row[1] += 1
                row[3] += spent

    def beside():
        while not os.path.exists(go):
            time.sleep(0.1)
        counting[0] = True
        while not os.path.exists(done):
            if not busy:
                time.sleep(0.1)
                continue
            for _ in range(10_000_000):  # Python only, a few tenths of a second between looks for `done`
                pass
        counting[0] = False

    def write():
        sys.setprofile(None)
        Path(out).write_text(json.dumps(stats))

    sys.setprofile(profile)  # this thread alone: the main one, which runs the event loop
    threading.Thread(target=beside, daemon=True, name="busy-python").start()
    atexit.register(write)


def main():
    import asyncio

    from bench.http_load import burst, request_body, stay
    from bench.serve import ROOT, free_port, start_app, wait_ready
    from inference.model.tiny_checkpoint import write_tiny_checkpoint

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32, help="requests per burst")
    ap.add_argument("--bursts", type=int, default=3)
    ap.add_argument("--patches", type=int, default=4, help="patches per request: one chunk each")
    ap.add_argument("--no-busy", action="store_true", help="no thread running Python beside the loop")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hook, out, go, done = (Path(tmp) / name for name in ("hook", "calls.json", "go", "done"))
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(HOOK.format(root=str(ROOT), out=str(out), go=str(go), done=str(done),
                                                           busy=not args.no_busy))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
        checkpoint = write_tiny_checkpoint(Path(tmp) / "checkpoint")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        app = start_app(str(checkpoint), port, ["--device", "cpu", "--asr-model", "none", "--speaker-model", "none"],
                        Path(tmp) / "app.log")
        try:
            wait_ready(url, app)
            go.touch()
            body = lambda i: request_body(i, patches=args.patches, timesteps=2, text="Hello there.")  # noqa: E731
            for _ in range(args.bursts):
                results, _ = asyncio.run(burst(url, args.requests, body, stay))
                if any(r.error for r in results):
                    raise SystemExit(f"a request failed: {next(r.error for r in results if r.error)}")
            done.touch()
            time.sleep(2.0)  # the busy thread's next look
        finally:
            app.terminate()
            app.wait(timeout=60)
        rows = sorted(json.loads(out.read_text()).items(), key=lambda kv: -kv[1][3])[: args.top]
    chunks = args.requests * args.bursts * args.patches
    print(f"{args.bursts} bursts of {args.requests} requests of {args.patches} patches ({chunks} chunks), "
          f"{'beside a thread running Python' if not args.no_busy else 'alone'}\n")
    print(f"| the loop's C call | calls | over {LONG_S * 1e3:g} ms | ms in all | ms in those |")
    print("|---|---|---|---|---|")
    for key, (calls, long, seconds, long_seconds) in rows:
        print(f"| `{key}` | {calls} | {long} | {seconds * 1e3:.1f} | {long_seconds * 1e3:.1f} |")


if __name__ == "__main__":
    main()
