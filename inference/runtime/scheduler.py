"""Which stream holds which row, and the batch loop: the only code that changes a Stream's state.

A started stream takes the lowest free row and waits among the joining; a later `step()` admits
it (prefill), and from then on it is live: each step launches one patch of every live stream that
wants one and collects the oldest patch in flight (the runner keeps one in flight, so the host's
work overlaps the device's). A collected patch goes to the stream's Continuation, which says
whether the stream goes on, re-enters its row for another segment, or is over.

Deadlines. Each stream's listener starts playing with its first audio and plays in real time, so
its buffer runs dry at a deadline (its Listener's, inference/request/listener.py: the first
audio's time on the scheduler's clock plus the audio released since, as long as it lasts for them;
after a dry spell, from when audio came again); its slack is the time left before it. The rows of
a patch all advance together (one bucket over rows 0..max live row, no per-row mask: that keeps
batched exactly equal to solo), so no running
stream is ever left out of a step; what the scheduler chooses is when joining streams are
prefilled and when held audio goes out:

- Admission: joining streams that already play (a next segment, a retry) go first, by deadline,
  then newcomers in arrival order. A prefill delays the patches of every running stream, so one
  step admits only as many as fit, with the step itself, in the shortest slack of a playing
  stream (pacing.StepCosts learns a step's and a prefill's time on the clock); always at least
  one, and all of them while no stream plays. A newcomer's first patch is launched in the step
  that admits it and collected in the next one, so a joining stream that plays and has less than
  URGENT_STEPS steps of audio left (or less than that shortest slack) runs dry if it is held back
  one more step: it is admitted whatever it costs, since holding it back spares nobody's buffer
  that is not its own. Without that rule, once buffers had run dry (a stall, a load's start), the
  streams admitted after it had no slack, so a step could admit one stream at a seam while the
  rest ran dry waiting, and so on: 128 live sessions made 50 s of audio a second with every seam
  heard; with a horizon of one step, each such stream came in a step too late
  (docs/benchmarks.md).
- Admission ahead: while no stream plays and no patch is in flight, a burst's newcomers are
  prefilled in groups of ADMIT_AHEAD as they are started, before the step that launches their
  first patch, so the device works through the prefills while the host prepares the rest.
- Parking: a live request (inference/request/feed.py) that has spoken all the text it has keeps
  its row among the parked, out of the batch, until more text comes (Continuation.resume, read at
  the start of each step) or its feed closes. Its decoder state is kept at the segment's end, as
  for any next segment (DecodeStep.keep_end), since its row runs on with the batch meanwhile.
- Segment hold: a later segment's audio is held until the segment ends (the runaway guard,
  inference/request/continuation.py), but never until the listener runs dry: once a holding
  stream's slack is within two steps, what it holds goes out and the attempt streams on (it can
  no longer be retried; a runaway is cut at its cap).
- The way to the listener: a released patch reaches its listener some milliseconds later (the
  event loop's send, the socket), and not always as soon as their first patch did, from which
  their player's clock runs. So every slack the scheduler plans with is the listener's less
  WAY_TO_LISTENER_S: a seam's audio, admitted and released just in time on the engine's clock,
  was heard late (docs/benchmarks.md). The steps' log counts the listeners dry on the engine's
  own clock.
"""
from __future__ import annotations

import collections
import heapq
import json
import logging
import time
from typing import Callable

import numpy as np

from ..request.continuation import PARK, Continuation, DecoderStart, SegmentStart
from ..request.request import AudioChunk, Half
from .pacing import StepCosts
from .decode_step import Join
from .runner import BatchRunner, Collected
from .stream import Stream

# (stream, index of the patch, the stream's generation when it was launched)
Launched = list[tuple[Stream, int, int]]
# A playing joiner with less audio left than this many steps is admitted at once: its first chunk
# comes at the end of the step after the one that admits it, three steps away if it is held back one
URGENT_STEPS = 3
# The audio's way from a step to its listener, planned for ahead of their deadline: at 128 live
# sessions a seam's first audio left the event loop 5-17 ms (median), at most 65 ms after the step
# handed it over, and their first audio 13-29 ms.
WAY_TO_LISTENER_S = 0.05


# One JSON line per step at DEBUG, for bench/lab/step_trace.py: what each step did and took, and
# the listeners it found dry. Off (the level above DEBUG), a step only asks whether it is on.
STEP_LOG = logging.getLogger("voxcpm.steps")

# Newcomers prefilled together while the batch is idle (the module's docstring says why). Starting
# a request takes the host about half a millisecond, and a prefill of 16 prompts of 96 positions
# about 10 ms on an H100: the device works through one group while the host starts the next. On
# an H100 128 requests arriving together heard their first audio after 151-167 ms with it against
# 182-205 ms without; at 64 the two were within the machines' spread (80-94 against 89-93 ms), and
# groups of 32 did worse than 16 (docs/benchmarks.md, "Admission ahead").
ADMIT_AHEAD = 16


class EngineFull(RuntimeError):
    """Every row holds a stream; the caller should wait for one to end (the worker queues)."""


class Scheduler:
    def __init__(self, runner: BatchRunner, rows: int, clock: Callable[[], float] = time.monotonic,
                 admit_ahead: int = ADMIT_AHEAD, way_s: float = WAY_TO_LISTENER_S):
        """clock: seconds, for the listeners' deadlines and the steps' costs (tests give a fake).
        admit_ahead: the group size of admission ahead (0: off, every prefill waits for a step).
        way_s: how long before a listener's deadline their audio is planned to be released."""
        self.runner, self.rows, self.clock, self.admit_ahead = runner, rows, clock, admit_ahead
        self.way_s = way_s
        step = runner.step
        self.rate = step.vae.cfg.out_sample_rate
        self.patch_s = step.patch_samples / self.rate  # audio seconds in one patch
        # On a GPU a prefill is queued behind the patch in flight: the next step waits for it.
        self.costs = StepCosts(lag=1 if step.device.type == "cuda" else 0)
        self.free = list(range(rows))  # a heap: the lowest free row first keeps buckets small
        self.joining: list[Stream] = []
        self.live: list[Stream] = []
        self.parked: list[Stream] = []  # live requests that have spoken all their text so far (row kept)
        self.launched: collections.deque[Launched] = collections.deque()
        # What the step under way released or ended, by stream: step() returns it. None between
        # steps (a stream stopped then is its stopper's to know about).
        self.produced: dict[Stream, list[AudioChunk]] | None = None
        # While STEP_LOG is on: the listeners the step under way found dry when their patch came,
        # at a seam (a segment's first patch) and inside a segment.
        self.dry: list[int] | None = None

    @property
    def active(self) -> int:
        """Streams holding a row (joining, live or parked)."""
        return len(self.joining) + len(self.live) + len(self.parked)

    @property
    def working(self) -> bool:
        """Whether a step would do anything: a stream joins or runs, or a patch is in flight."""
        return bool(self.joining or self.live or self.launched)

    def add(self, stream: Stream, plan: Continuation):
        """Gives the stream a row; it joins the batch at the next step (or, when running listeners
        have little slack, at a later one; or now, with a group admitted ahead). Raises
        EngineFull (and closes the plan) when every row is taken."""
        if not self.free:
            plan.close()
            raise EngineFull(f"all {self.rows} streams are in use: wait for one to end")
        stream.plan, stream.row = plan, heapq.heappop(self.free)
        stream.decode_context = plan.start.prompt.decode_context  # for the offline render of its latents
        self.enter(stream, plan.start)
        if self.admit_ahead and len(self.joining) >= self.admit_ahead and self.idle():
            self.admit()

    def idle(self) -> bool:
        """No patch in flight and no listener playing: a prefill now delays nobody's audio."""
        return not self.launched and not any(s.listener.playing for s in self.live)

    def enter(self, stream: Stream, start: SegmentStart):
        """Into the joining streams, to be (re-)prefilled with `start` at the next step."""
        stream.restart(len(start.prompt), start.cap)
        req = stream.plan.req
        stream.join = Join(stream.row, start.prompt, start.noise, req.inference_timesteps, float(req.cfg_value),
                           start.decoder, start.quiet)
        self.joining.append(stream)

    def resume_parked(self):
        """Parked streams whose text has come (or whose feed has closed) go on (or end)."""
        for stream in list(self.parked):
            after, chunks = stream.plan.resume(), stream.plan.resumed()
            if chunks:  # a pause the new clause opens with
                self.produced.setdefault(stream, []).extend(chunks)
                listener = stream.listener
                listener.release(sum(listener.lasts(len(c.audio), c.pause) for c in chunks), self.clock())
            if after is None:
                continue
            self.parked.remove(stream)
            if after is True:
                self.retire(stream)
            else:
                self.enter(stream, after)

    # -- the batch loop -----------------------------------------------------------------------------
    def step(self) -> list[tuple[Stream, list[AudioChunk]]]:
        """Admits joining streams (as many as the running streams' deadlines allow), launches the
        next patch of every live stream, and collects the oldest patch in flight. Returns what the
        step produced: each stream that released chunks or ended in it, with its chunks (oldest
        first; none for one that only ended). Failures land on the streams they concern
        (Stream.error); the scheduler goes on."""
        self.produced = {}
        started = self.clock()
        logged = self.log_start(started) if STEP_LOG.isEnabledFor(logging.DEBUG) else None
        for stream in [s for s in self.joining + self.live + self.parked if s.cancelled]:
            self.retire(stream)
        if self.parked:
            self.resume_parked()
        admitted = self.admit(self.admissible(started)) if self.joining else 0
        try:
            batch = self.schedule()
            if batch:
                self.launch(batch)
            if len(self.launched) > 1 or (self.launched and not batch):
                self.postprocess(self.launched.popleft(), self.runner.collect())
        except Exception as exc:  # the patch of every live stream is lost: they all fail
            self.runner.drop_in_flight()
            self.launched.clear()
            for stream in list(self.live):
                self.fail(stream, exc)
            batch = None
        if batch:
            self.costs.record(admitted, self.clock() - started)
        else:
            self.costs.skip()
        if logged is not None:
            self.log_end(logged, started, admitted)
        produced, self.produced = self.produced, None
        return list(produced.items())

    def log_start(self, now: float) -> dict:
        self.dry = [0, 0]
        slack = self.least_slack(now)
        return {"t": round(now, 4), "live": len(self.live), "joining": len(self.joining), "parked": len(self.parked),
                "slack_ms": None if slack is None else round(1000 * slack, 1)}

    def log_end(self, logged: dict, started: float, admitted: int):
        ms = lambda s: None if s is None else round(1000 * s, 2)  # noqa: E731
        STEP_LOG.debug("%s", json.dumps({**logged, "ms": ms(self.clock() - started), "admitted": admitted,
                                         "step_ms": ms(self.costs.step_s), "join_ms": ms(self.costs.join_s),
                                         "dry_seam": self.dry[0], "dry_inside": self.dry[1]}))
        self.dry = None

    def admissible(self, now: float) -> int:
        """How many joining streams this step may prefill (the module's docstring says why): as
        many as fit in the shortest slack of a playing stream, and at least every joining stream
        that already plays and would run dry if held back to the next step (or before that stream
        does)."""
        slack = self.least_slack(now)
        if slack is None:
            return len(self.joining)
        fits = self.costs.joiners_within(slack, len(self.joining))
        soon = max(slack, URGENT_STEPS * (self.costs.step_s or 0.0))
        urgent = sum(1 for s in self.joining if s.listener.playing and self.slack(s, now) <= soon)
        return max(fits, urgent)

    def slack(self, stream: Stream, now: float) -> float | None:
        """The audio its listener holds at `now` once what is released then has reached them
        (None: not playing yet)."""
        slack = stream.listener.slack(now)
        return None if slack is None else slack - self.way_s

    def least_slack(self, now: float | None = None) -> float | None:
        """The shortest slack of a playing stream (None: none plays)."""
        now = self.clock() if now is None else now
        return min((self.slack(s, now) for s in self.live if s.listener.playing), default=None)

    def admit(self, count: int | None = None) -> int:
        """Prefills the first `count` joining streams (all by default): those already playing by
        deadline, then newcomers in arrival order. Returns how many were admitted."""
        self.joining.sort(key=lambda s: (not s.listener.playing, s.listener.deadline or 0.0))
        count = len(self.joining) if count is None else count
        joining, self.joining = self.joining[:count], self.joining[count:]
        if not joining:
            return 0
        try:
            self.admit_group(joining)
        except Exception as exc:
            if len(joining) == 1:
                self.fail(joining[0], exc)
            else:  # one at a time, so that a stream that cannot fit fails alone
                for stream in joining:
                    try:
                        self.admit_group([stream])
                    except Exception as single:
                        self.fail(stream, single)
        for stream in joining:
            stream.join = None  # the prompt and noise are on the device now
        return len(joining)

    def admit_group(self, streams: list[Stream]):
        self.runner.admit([s.join for s in streams])
        self.live += streams

    def schedule(self) -> list[Stream]:
        """The live streams that get a patch this step."""
        return [s for s in self.live if s.wants_patch()]

    def launch(self, streams: list[Stream]):
        self.runner.launch(max(s.row for s in streams) + 1, max(s.position for s in streams),
                           max(s.iterations for s in streams))
        self.launched.append([(s, s.launched, s.generation) for s in streams])
        for s in streams:
            s.launched += 1

    def postprocess(self, launched: Launched, got: Collected):
        """One collected patch, by row (runner.Collected)."""
        now = self.clock()
        for stream, index, generation in launched:
            # Retired since this patch was launched (its row may be someone else's), or re-prefilled
            # for another segment (the patch ran past the end of the last one).
            if stream.done or generation != stream.generation:
                continue
            row, plan = stream.row, stream.plan
            if self.dry is not None and stream.listener.playing and stream.listener.slack(now) < 0:
                self.dry[index > 0] += 1
            early = plan.release_held() if plan.holding and self.running_dry(stream, now) else []
            chunks, after = plan.add(np.array(got.audio[row], dtype=np.float32), got.latents[row].copy(),
                                     stream.stops_after(index, bool(got.stop[row])), got.pcm[row].tobytes(),
                                     Half(got.half[row], got.half_pcm[row].tobytes()))
            if early or chunks:
                self.produced.setdefault(stream, []).extend(early + chunks)
                listener = stream.listener  # a pause's silence plays too, as long as written
                listener.release(sum(listener.lasts(len(c.audio), c.pause) for c in early + chunks), now)
            if after is True:
                self.retire(stream)
            elif after is not None:
                self.live.remove(stream)
                if after is PARK or after.decoder is DecoderStart.CARRY:  # a segment ended: its state kept
                    self.runner.step.keep_end(row, overrun=self.runner.ran_since(row))
                if after is PARK:
                    stream.park()
                    self.parked.append(stream)
                else:
                    self.enter(stream, after)

    def running_dry(self, stream: Stream, now: float) -> bool:
        """Whether its listener's buffer may run dry before the next step's patch is collected."""
        slack = self.slack(stream, now)
        return slack is not None and slack <= 2 * (self.costs.step_s or 0.0)

    def retire(self, stream: Stream):
        if stream.done:
            return
        stream.done = True
        if self.produced is not None:
            self.produced.setdefault(stream, [])
        if stream.plan is not None:
            stream.plan.close()
        for group in (self.joining, self.live, self.parked):
            if stream in group:
                group.remove(stream)
        heapq.heappush(self.free, stream.row)

    def fail(self, stream: Stream, exc: BaseException):
        stream.error = exc
        self.retire(stream)
