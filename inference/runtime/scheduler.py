"""Which stream holds which row, and the batch loop: the only code that changes a Stream's state.

A started stream takes the lowest free row and waits among the joining; the next `step()` admits
it (prefill), and from then on it is live: each step launches one patch of every live stream that
wants one and collects the oldest patch in flight (the runner keeps one in flight, so the host's
work overlaps the device's). A collected patch goes to the stream's Continuation, which says
whether the stream goes on, re-enters its row for another segment, or is over.
"""
from __future__ import annotations

import collections
import heapq

from ..request.continuation import Continuation, SegmentStart
from ..request.request import AudioChunk
from .runner import BatchRunner, Join
from .stream import Stream

# (stream, index of the patch, the stream's generation when it was launched)
Launched = list[tuple[Stream, int, int]]


class EngineFull(RuntimeError):
    """Every row holds a stream; the caller should wait for one to end (the worker queues)."""


class Scheduler:
    def __init__(self, runner: BatchRunner, rows: int):
        self.runner, self.rows = runner, rows
        self.free = list(range(rows))  # a heap: the lowest free row first keeps buckets small
        self.joining: list[Stream] = []
        self.live: list[Stream] = []
        self.launched: collections.deque[Launched] = collections.deque()

    @property
    def active(self) -> int:
        """Streams holding a row (joining or live)."""
        return len(self.joining) + len(self.live)

    def add(self, stream: Stream, plan: Continuation):
        """Gives the stream a row; it joins the batch at the next step. Raises EngineFull (and
        closes the plan) when every row is taken."""
        if not self.free:
            plan.close()
            raise EngineFull(f"all {self.rows} streams are in use: wait for one to end")
        stream.plan, stream.row = plan, heapq.heappop(self.free)
        stream.decode_context = plan.start.prompt.decode_context  # for the offline render of its latents
        self.enter(stream, plan.start)

    def enter(self, stream: Stream, start: SegmentStart, overrun: bool = False):
        """Into the joining streams, to be (re-)prefilled with `start` at the next step. overrun:
        the row's decoder has already decoded a patch launched past the last one collected."""
        stream.restart(len(start.prompt), start.cap)
        req = stream.plan.req
        stream.join = Join(stream.row, start.prompt, start.noise, req.inference_timesteps, float(req.cfg_value),
                           start.decoder, overrun)
        self.joining.append(stream)

    # -- the batch loop -----------------------------------------------------------------------------
    def step(self):
        """Admits the streams started since the last step, launches the next patch of every live
        stream, and collects the oldest patch in flight into each stream's chunks. Failures land
        on the streams they concern (Stream.error); the scheduler goes on."""
        for stream in [s for s in self.joining + self.live if s.cancelled]:
            self.retire(stream)
        if self.joining:
            self.admit()
        try:
            batch = self.schedule()
            if batch:
                self.launch(batch)
            if len(self.launched) > 1 or (self.launched and not batch):
                results = self.runner.collect()
                self.postprocess(self.launched.popleft(), *results)
        except Exception as exc:  # the patch of every live stream is lost: they all fail
            self.runner.drop_in_flight()
            self.launched.clear()
            for stream in list(self.live):
                self.fail(stream, exc)

    def admit(self):
        joining, self.joining = self.joining, []
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

    def postprocess(self, launched: Launched, audio, latents, stop):
        """One collected patch: audio [B, samples], latents [B, D, P] and stop flags [B] by row."""
        for stream, index, generation in launched:
            # Retired since this patch was launched (its row may be someone else's), or re-prefilled
            # for another segment (the patch ran past the end of the last one).
            if stream.done or generation != stream.generation:
                continue
            row = stream.row
            chunk = AudioChunk(audio=audio[row].copy(), latents=latents[row].copy(), index=index)
            after = stream.plan.add(chunk, stream.stops_after(index, bool(stop[row])))
            if after is True:
                self.retire(stream)
            elif after is not None:
                self.live.remove(stream)
                # Read before enter() restarts the count: was a patch launched after this one?
                self.enter(stream, after, overrun=stream.launched > index + 1)

    def retire(self, stream: Stream):
        if stream.done:
            return
        stream.done = True
        if stream.plan is not None:
            stream.plan.close()
        for group in (self.joining, self.live):
            if stream in group:
                group.remove(stream)
        heapq.heappush(self.free, stream.row)

    def fail(self, stream: Stream, exc: BaseException):
        stream.error = exc
        self.retire(stream)
