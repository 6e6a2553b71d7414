"""Load generation against the app's stream route over real HTTP, in the manner of vLLM's serving
benchmark: closed-loop bursts and open-loop Poisson arrivals, some clients leaving early.

Each request reads the framed stream (`?format=frames`, docs/api.md, "The framed stream") and timestamps every
audio frame as it arrives, so time to first audio and the gaps between chunks are what a listener's
player sees, not what the engine reports. The server's own figures for the request (its wait for a
row and its time from the GPU's start to the first patch) come in the final status frame; beside the
client's TTFB they say where a slow first audio was spent: in the line, on the GPU, or in HTTP.

The client is aiohttp, as in vLLM's serving benchmark: its HTTP parser is C, where httpx's (h11) is
Python, and a client process reading 16 streams parses every response's head and frames on one event
loop, so each response read in Python made the ones behind it look later than the server sent them
(the floor, bench/floor.py, measures what is left: docs/benchmarks.md).

Times are taken from the moment the request's head goes out on its connection (aiohttp's trace of
the send), not from when its coroutine started: a client process sending its share of a burst queues its
own requests behind each other's headers and JSON, a wait no visitor's browser has. That wait is
kept (`Result.queued`, "client's own wait" in the tables) and `first_audio_from_start` keeps the
figure as measured before, from the coroutine's start, so older tables stay comparable.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import random
import struct
import time
from dataclasses import dataclass, field

import aiohttp

HEADER = struct.Struct("<B3xI")  # type, 3 zero bytes, payload length (uint32 LE)


def frame(kind: str, payload: bytes | dict) -> bytes:
    """One frame as the app writes it (ui/http/frames.py), for the benchmark's stand-in servers."""
    data = json.dumps(payload, separators=(",", ":")).encode() if isinstance(payload, dict) else payload
    return HEADER.pack(ord(kind), len(data)) + data


@dataclass
class Result:
    sent: float  # perf_counter when the request's head went out (its coroutine's start until then)
    status: int = 0
    queued: float = 0.0  # seconds from the coroutine's start to `sent`: the client process's own wait
    first_audio: float | None = None  # seconds after `sent`
    arrivals: list[float] = field(default_factory=list)  # each audio frame, seconds after `sent`
    sizes: list[int] = field(default_factory=list)  # each audio frame's samples
    samples: int = 0
    left_early: bool = False
    refused: bool = False
    error: str | None = None
    server: dict = field(default_factory=dict)  # the final status frame: intake_s, queue_s, ttfp_s, ...
    handoff_s: float | None = None  # first patch: from the worker's hand-over to its frame leaving
    words: int = 0  # segments whose words came (W frames: a request with timestamps "word")
    words_missing: list[str] = field(default_factory=list)  # why a segment's words did not
    words_after_audio_s: float | None = None  # from the last audio frame to the last W frame

    @property
    def first_audio_from_start(self) -> float | None:
        """Time to first audio from the coroutine's start, the client's own wait included."""
        return None if self.first_audio is None else self.queued + self.first_audio

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]

    def late(self, rate: int) -> int:
        """Frames that came after the audio before them had run out, for a player that starts with
        the first audio and plays in real time: what a listener hears as a dropout. A gap between
        frames is not one while the client still holds audio (a server may send a stream that is
        well ahead in batches)."""
        count, dry = 0, None
        for at, samples in zip(self.arrivals, self.sizes):
            if dry is not None and at > dry:
                count += 1
            dry = (at if dry is None else max(at, dry)) + samples / rate  # a dry player starts again
        return count


class FrameCounter:
    """Splits the framed body into frames whatever the network's read sizes; counts audio."""

    def __init__(self):
        self.buffer = b""

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(type, payload) of each frame completed by `data`."""
        self.buffer += data
        done = []
        while len(self.buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self.buffer)
            if len(self.buffer) < HEADER.size + length:
                break
            done.append((kind, self.buffer[HEADER.size:HEADER.size + length]))
            self.buffer = self.buffer[HEADER.size + length:]
        return done


async def one_request(client: aiohttp.ClientSession, body: dict, leave_after: float | None) -> Result:
    """Streams one request to its end (or until `leave_after` seconds past its first audio)."""
    result = Result(sent=time.perf_counter())
    frames = FrameCounter()
    try:
        async with client.post("/voxcpm/stream?format=frames", json=body, trace_request_ctx=result) as response:
            result.status = response.status
            if response.status != 200:
                result.refused = response.status in (429, 503)
                result.error = (await response.read()).decode(errors="replace")[:200]
                return result
            async for data in response.content.iter_any():
                now = time.perf_counter() - result.sent
                for kind, payload in frames.feed(data):
                    if kind == ord("A"):
                        result.arrivals.append(now)
                        result.sizes.append(len(payload) // 2)
                        result.samples += len(payload) // 2
                    elif kind == ord("S"):
                        result.server = json.loads(payload)
                    elif kind == ord("W"):
                        segment = json.loads(payload)
                        if "error" in segment:
                            result.words_missing.append(segment["error"])
                        else:
                            result.words += 1
                        result.words_after_audio_s = now - result.arrivals[-1] if result.arrivals else None
                    elif kind == ord("M") and result.handoff_s is None:
                        meta = json.loads(payload)
                        result.handoff_s = (meta["sent_ms"] - meta["server_ms"]) / 1e3
                if result.arrivals and result.first_audio is None:
                    result.first_audio = result.arrivals[0]
                if leave_after is not None and result.first_audio is not None \
                        and now - result.first_audio >= leave_after:
                    result.left_early = True
                    break  # closing the response is the client going away
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


async def _head_sent(session, context, params) -> None:
    """The request's head has gone out on its connection: its clock starts (aiohttp's trace)."""
    result = context.trace_request_ctx
    if result is None:  # not a timed request (the warm-up)
        return
    now = time.perf_counter()
    result.queued, result.sent = now - result.sent, now


def request_body(i: int, patches: int, timesteps: int, text: str) -> dict:
    return {"mode": "design", "text": text, "control": "A calm, clear voice", "seed": i,
            "min_len": patches, "max_len": patches, "inference_timesteps": timesteps, "cfg_value": 2.0}


def leave_share(i: int, share: float, after: float) -> float | None:
    """Request i's client leaves `after` seconds past its first audio for a `share` of requests."""
    return after if (i * 7919 % 100) < share * 100 else None


def stay(i: int) -> None:
    return None


async def burst(url: str, concurrency: int, body, leave, start_at: float | None = None) -> tuple[list[Result], float]:
    """`concurrency` requests sent together (at `start_at` on the perf_counter clock, when given);
    returns them and the wall time until the last ended."""
    async with session(url, concurrency) as client:
        await warm(client)
        await asyncio.sleep(max(0.0, (start_at or 0.0) - time.perf_counter()))
        start = time.perf_counter()
        results = await asyncio.gather(*(one_request(client, body(i), leave(i)) for i in range(concurrency)))
    return list(results), time.perf_counter() - start


async def poisson(url: str, rate: float, duration: float, body, leave, seed: int = 0,
                  start_at: float | None = None) -> tuple[list[Result], float]:
    """Requests arriving at `rate` per second (exponential gaps) for `duration` seconds."""
    rng = random.Random(seed)
    tasks = []
    async with session(url, int(rate * duration) + 8) as client:
        await warm(client)
        await asyncio.sleep(max(0.0, (start_at or 0.0) - time.perf_counter()))
        start, next_at, i = time.perf_counter(), 0.0, 0
        while next_at < duration:  # arrival times fixed in advance, so a slow send does not thin them
            await asyncio.sleep(max(0.0, start + next_at - time.perf_counter()))
            tasks.append(asyncio.create_task(one_request(client, body(i), leave(i))))
            i += 1
            next_at += rng.expovariate(rate)
        results = await asyncio.gather(*tasks)
    return list(results), time.perf_counter() - start


async def warm(client: aiohttp.ClientSession):
    """One request before the load, so that nothing the client sets up on its first request (its
    connector, the resolver) is paid inside the timed load."""
    async with client.get("/voxcpm/health") as response:
        await response.read()


def session(url: str, connections: int) -> aiohttp.ClientSession:
    """A connection per request, none kept alive (each request a visitor of its own)."""
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_head_sent)
    return aiohttp.ClientSession(base_url=url, trace_configs=[trace],
                                 connector=aiohttp.TCPConnector(limit=connections + 8, force_close=True),
                                 timeout=aiohttp.ClientTimeout(total=600.0, connect=30.0))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(results: list[Result], wall_s: float, sample_rate: int) -> dict:
    """Per load: TTFB percentiles, chunk gaps, per-stream RTF, audio seconds per second, refusals."""
    served = [r for r in results if r.first_audio is not None]
    ttfb = [r.first_audio for r in served]
    from_start = [r.first_audio_from_start for r in served]
    queued = [r.queued for r in results]
    gaps = [g for r in served for g in r.gaps]
    whole = [r for r in served if not r.left_early and r.error is None]
    rtf = [r.arrivals[-1] / (r.samples / sample_rate) for r in whole if r.samples]
    audio_s = sum(r.samples for r in results) / sample_rate
    server = lambda key: [r.server[key] for r in served if r.server.get(key) is not None]  # noqa: E731
    handoff = [r.handoff_s for r in served if r.handoff_s is not None]
    return {"requests": len(results), "served": len(served), "refused": sum(r.refused for r in results),
            "errors": sum(1 for r in results if r.error and not r.refused),
            "left_early": sum(r.left_early for r in results),
            "ttfb_p50_ms": _ms(percentile(ttfb, 50)), "ttfb_p95_ms": _ms(percentile(ttfb, 95)),
            "ttfb_p99_ms": _ms(percentile(ttfb, 99)),
            "from_start_p50_ms": _ms(percentile(from_start, 50)), "from_start_p95_ms": _ms(percentile(from_start, 95)),
            "queued_p95_ms": _ms(percentile(queued, 95)), "gap_p95_ms": _ms(percentile(gaps, 95)),
            "gap_max_ms": _ms(max(gaps) if gaps else None), "rtf_p50": percentile(rtf, 50),
            "rtf_p95": percentile(rtf, 95), "audio_s_per_s": audio_s / wall_s if wall_s else None,
            "wall_s": wall_s, "late_gaps": sum(r.late(sample_rate) for r in served),
            **{f"server_{key}_p{q}_ms": _ms(percentile(server(f"{key}_s"), q))
               for key in ("intake", "queue", "ttfp") for q in (50, 95)},
            "server_handoff_p50_ms": _ms(percentile(handoff, 50)), "server_handoff_p95_ms": _ms(percentile(handoff, 95))}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


# Several client processes. One Python process reading 64 streams parses every frame of all of them
# on one event loop, so a slow client can pass for a slow server. Here each of N processes sends its
# share (every N-th request of a burst, or a Poisson stream at rate / N: together still Poisson at the
# full rate) from one shared start time on the perf_counter clock, which on Linux is the system's
# monotonic clock and so the same in every process.
START_MARGIN_S = 5.0  # every process started and connected before the load begins


def shifted(i: int, fn, k: int, n: int):
    """fn of the request's index in the whole load, from its index in process k's share."""
    return fn(k + n * i)


def _part(kind: str, k: int, n: int, url: str, size: float, duration: float, body, leave, start_at: float):
    body, leave = functools.partial(shifted, fn=body, k=k, n=n), functools.partial(shifted, fn=leave, k=k, n=n)
    if kind == "burst":
        share = len(range(k, int(size), n))
        return asyncio.run(burst(url, share, body, leave, start_at=start_at))
    return asyncio.run(poisson(url, size / n, duration, body, leave, seed=k, start_at=start_at))


def in_processes(kind: str, processes: int, url: str, size: float, body, leave, duration: float = 0.0):
    """(results, wall seconds) of a burst of `size` requests or Poisson arrivals at `size` per second
    for `duration` seconds, split over `processes` client processes. body and leave: picklable."""
    start_at = time.perf_counter() + START_MARGIN_S
    with concurrent.futures.ProcessPoolExecutor(processes) as pool:
        futures = [pool.submit(_part, kind, k, processes, url, size, duration, body, leave, start_at)
                   for k in range(processes)]
        parts = [f.result() for f in futures]
    return [r for results, _ in parts for r in results], max(wall for _, wall in parts)
