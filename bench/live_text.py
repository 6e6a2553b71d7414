#!/usr/bin/env python3
"""Text spoken as it arrives (WS /v1/audio/speech/stream, issue 46), measured as an LLM's client
gets it: the whole app over loopback, sessions sending a paragraph token by token at a fixed rate.

    python -m bench.live_text --checkpoint DIR --out DIR       # starts app.py on the checkpoint
    python -m bench.live_text --url http://127.0.0.1:7860 ...  # an app already running
    python -m bench.live_text --checkpoint DIR --against-root /tmp/before   # and another checkout's app, in turns

For each rate (--rates, tokens per second) and load (--sessions, started together, sent from
--clients processes): the time from the piece that completes the first clause (the one that brings
the space after its punctuation) to its first audio, p50/p95; the listener's gaps, played as the
page plays (--prebuffer-ms before it starts, then in real time): how many, how long, how many fall
at a seam between clauses, how many of those came while the clause's text was still being sent (a
clause of random weights may stop after min_len's 2 patches, shorter than the next one takes to
arrive at 20 pieces a second) or less than a clause's first audio takes (the load's median) before
the silence (text short: no server could have filled those), and their median lead from the
clause's last piece to the silence;
and the audio seconds delivered per wall second. Beside each load,
the same paragraph sent whole to POST /voxcpm/stream from as many clients: its first audio and gaps.
Random weights never stop by themselves, so each clause (and each segment of the whole text) runs
--patches patches.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import http_load  # noqa: E402
from bench.http_load import percentile  # noqa: E402
from bench.serve import free_port, start_app, wait_ready  # noqa: E402

PARAGRAPH = ("Sure, here is a quick summary of the plan. First, we gather the data from every team, "
             "which should take about a week. Then we clean it, check it twice, and build the first model. "
             "After that, we test it with real users, listen to what they say, and fix what breaks. "
             "Finally, we ship it to everyone, and we keep watching the numbers closely.")
RATE, PCM_RATE = 48000, 24000


def tokens(text: str) -> list[str]:
    """Pieces the size of an LLM's tokens: words with their space, long words in 4-letter parts."""
    return [w[i:i + 4] for w in re.findall(r"\S+\s*", text) for i in range(0, len(w), 4)]


@dataclass
class Session:
    sent: list[tuple[float, int]] = field(default_factory=list)  # (time, characters sent so far)
    starts: list[tuple[float, str]] = field(default_factory=list)  # audio.start: (time, sentence_text)
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes)
    error: str | None = None
    done: bool = False  # its session.done came: the utterance was spoken to its end

    def first_clause_to_audio(self) -> float | None:
        if not self.starts or not self.arrivals:
            return None
        needed = len(self.starts[0][1]) + 1  # the clause and the space after it
        commit = next((t for t, chars in self.sent if chars >= needed), self.sent[-1][0])
        return self.arrivals[0][0] - commit

    def clauses_sent(self) -> list[float]:
        """When the piece that completed each clause (the space after it; the last one, the last
        piece) was sent, clause by clause as the server cut them (audio.start's sentence_text)."""
        out, at = [], 0
        for _, text in self.starts:
            found = PARAGRAPH.find(text.strip(), at)
            at = found + len(text.strip()) if found >= 0 else at + len(text)
            out.append(next((t for t, chars in self.sent if chars > at), self.sent[-1][0] if self.sent else 0.0))
        return out

    def gaps(self, prebuffer_s: float) -> tuple[list[float], list[float], list[float]]:
        """The listener's silences (seconds) as the page plays them (it starts once it holds
        `prebuffer_s`, then plays in real time): all of them; those that end with a clause's first
        audio (a seam); and for each of those, its clause's lead: from the clause's last piece to
        the silence's start (negative: the clause was not all sent when the silence began, the
        text came slower than the clause before it was spoken, and no server could have filled it)."""
        sent = self.clauses_sent()
        seams = {next((k for k, (t, _) in enumerate(self.arrivals) if t >= start), None): j
                 for j, (start, _) in enumerate(self.starts) if j}
        gaps, at_seam, leads, held, ends = [], [], [], 0.0, None
        for k, (t, size) in enumerate(self.arrivals):
            seconds = size / 2 / PCM_RATE
            if ends is None:  # still filling the prebuffer
                held += seconds
                if held >= prebuffer_s:
                    ends = t + held
                continue
            if t > ends:
                gaps.append(t - ends)
                if k in seams:
                    at_seam.append(t - ends)
                    leads.append(ends - sent[seams[k]])
                ends = t
            ends += seconds
        return gaps, at_seam, leads


async def live_session(ws_url: str, seed: int, rate: float, patches: int, start_at: float) -> Session:
    import websockets

    s = Session()
    try:
        async with websockets.connect(ws_url, max_size=None, open_timeout=60) as ws:
            await ws.send(json.dumps({"type": "session.config", "voice": "design", "seed": seed,
                                      "instructions": "A calm, clear voice", "max_len": patches,
                                      "stream_audio": True, "response_format": "pcm",
                                      "split_granularity": "clause"}))
            await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
            t0, pieces = time.perf_counter(), tokens(PARAGRAPH)

            async def send():
                chars = 0
                for k, piece in enumerate(pieces):
                    await asyncio.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
                    await ws.send(json.dumps({"type": "input.text", "text": piece}))
                    chars += len(piece)
                    s.sent.append((time.perf_counter() - t0, chars))
                await ws.send(json.dumps({"type": "input.done"}))
            sender = asyncio.create_task(send())
            async for message in ws:
                now = time.perf_counter() - t0
                if isinstance(message, bytes):
                    s.arrivals.append((now, len(message)))
                    continue
                event = json.loads(message)
                if event["type"] == "audio.start":
                    s.starts.append((now, event["sentence_text"]))
                elif event["type"] == "error":
                    s.error = event["message"]
                elif event["type"] == "session.done":
                    s.done = True
                    break
            await sender
    except Exception as exc:  # noqa: BLE001 - counted as an error of the load
        s.error = f"{type(exc).__name__}: {exc}"
    return s


def _live_part(ws_url: str, seeds: list[int], rate: float, patches: int, start_at: float) -> list[Session]:
    async def run():
        return await asyncio.gather(*(live_session(ws_url, seed, rate, patches, start_at) for seed in seeds))
    return asyncio.run(run())


def live_load(url: str, sessions: int, rate: float, patches: int, clients: int) -> tuple[list[Session], float]:
    ws_url = url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    start_at = time.perf_counter() + http_load.START_MARGIN_S
    with concurrent.futures.ProcessPoolExecutor(clients) as pool:
        parts = [pool.submit(_live_part, ws_url, list(range(k, sessions, clients)), rate, patches, start_at)
                 for k in range(clients)]
        results = [s for part in parts for s in part.result()]
    wall = max((s.arrivals[-1][0] for s in results if s.arrivals), default=0.0)
    return results, wall


def summarize(results: list[Session], wall: float, prebuffer_s: float) -> dict:
    ok = [s for s in results if s.arrivals and s.error is None]
    first = [f for f in (s.first_clause_to_audio() for s in ok) if f is not None]
    gaps = [s.gaps(prebuffer_s) for s in ok]
    all_gaps, seam_gaps = [g for a, _, _ in gaps for g in a], [g for _, b, _ in gaps for g in b]
    leads = [lead for _, _, c in gaps for lead in c]
    # A seam whose clause was all sent less than a clause's first audio takes (this load's median)
    # before the silence began: the text came too late for any first audio to be in time.
    making = percentile(first, 50)
    audio_s = sum(size for s in ok for _, size in s.arrivals) / 2 / PCM_RATE
    ms = lambda v: None if v is None else round(v * 1e3, 1)  # noqa: E731
    return {"sessions": len(results), "completed": sum(s.done and s.error is None for s in results),
            "errors": len(results) - len(ok),
            "clause_to_audio_p50_ms": ms(making), "clause_to_audio_p95_ms": ms(percentile(first, 95)),
            "underruns": len(all_gaps), "underrun_max_ms": ms(max(all_gaps, default=None)),
            "at_seams": len(seam_gaps), "at_seams_text_late": sum(lead < 0 for lead in leads),
            "at_seams_text_short": sum(lead < (making or 0.0) for lead in leads),
            "at_seams_lead_p50_ms": ms(percentile(leads, 50)) if leads else None,
            "audio_s_per_s": round(audio_s / wall, 1) if wall else None,
            "clauses_per_session": round(sum(len(s.starts) for s in ok) / max(1, len(ok)), 1)}


def whole_load(url: str, sessions: int, patches: int, clients: int) -> dict:
    body = functools.partial(_whole_body, patches=patches)
    results, wall = http_load.in_processes("burst", clients, url, sessions, body, http_load.stay)
    summary = http_load.summarize(results, wall, RATE)
    return {k: summary[k] for k in ("served", "ttfb_p50_ms", "ttfb_p95_ms", "gap_max_ms", "late_gaps", "audio_s_per_s")}


def _whole_body(i: int, patches: int) -> dict:
    return http_load.request_body(i, patches, 10, PARAGRAPH)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="an app already running (default: start app.py on --checkpoint)")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--app-args", default="", help="options for app.py")
    p.add_argument("--rates", type=float, nargs="+", default=[20, 60])
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64, 128])
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--patches", type=int, default=12, help="patches per clause (random weights never stop)")
    p.add_argument("--prebuffer-ms", type=float, default=80.0)
    p.add_argument("--out", default="/tmp/voxcpm-live-text")
    p.add_argument("--against-root", default=None, metavar="DIR",
                   help="also start app.py of another checkout (B) on the same GPU, and run every load on A, B, B, A")
    args = p.parse_args(argv)
    if args.against_root and args.url:
        p.error("--against-root starts both apps: leave out --url")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    roots = {"A": ROOT, **({"B": Path(args.against_root).resolve()} if args.against_root else {})}
    urls = {"A": args.url} if args.url else {name: f"http://127.0.0.1:{free_port()}" for name in roots}
    apps = {}  # by letter: the processes this script started
    try:
        if not args.url:
            for name, root in roots.items():
                port = int(urls[name].rsplit(":", 1)[1])
                apps[name] = start_app(args.checkpoint, port, args.app_args.split(), out / f"app-{name}.log", root)
        for name, url in urls.items():
            wait_ready(url, apps.get(name))
            live_load(url, 1, 60, args.patches, 1)  # warm: the first session pays for nothing measured
        rows = []
        for name in ("A", "B", "B", "A") if len(urls) > 1 else ("A",):
            rows += loads(urls[name], args, {"app": name} if len(urls) > 1 else {})
        (out / "live_text.json").write_text(json.dumps(rows, indent=1))
    finally:
        for app in apps.values():
            app.terminate()
            app.wait(30)


def loads(url: str, args, label: dict) -> list[dict]:
    """Every load of the command line on one app, each row printed as it is measured."""
    rows = []
    for sessions in args.sessions:
        for rate in args.rates:
            results, wall = live_load(url, sessions, rate, args.patches, min(args.clients, sessions))
            rows.append({**label, "rate_tps": rate, **summarize(results, wall, args.prebuffer_ms / 1e3)})
            print(json.dumps(rows[-1]), flush=True)
        rows.append({**label, "rate_tps": "whole", "sessions": sessions,
                     **whole_load(url, sessions, args.patches, min(args.clients, sessions))})
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
