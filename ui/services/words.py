"""Word timestamps for a stream that asked for them (`timestamps: "word"`): each segment's audio,
as its listener hears it, is handed to the analysis process the moment the segment ends, and its
words come back timed on the stream's timeline.

The stream never waits for them: a segment's words are sent when they are ready, between two
patches, and only the end of the body (its status) waits for the last ones, at most
`words_wait_s`. A segment the aligner cannot take (its queue full, its model off or failed) gets
an error in place of its words; the audio is never touched.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field

import anyio
import numpy as np

from inference.analysis import scores
from inference.analysis.evaluation import RATE, Take
from inference.analysis.loading import ModelUnavailable
from inference.analysis.process import AnalysisStopped
from inference.errors import QueueFullError
from inference.request.audio_input import resample
from inference.serving.job import Job


@dataclass
class Segment:
    index: int
    start: float  # where its audio starts on the stream's timeline, s
    audio: list[np.ndarray] = field(default_factory=list)
    future: concurrent.futures.Future | None = None
    error: str | None = None


class WordTrack:
    """One stream's words: add() each piece of audio as it is sent, with its segment; ready() the
    segments aligned since; rest() the others, once the audio has ended."""

    def __init__(self, analysis, job: Job, rate: int, wait_s: float):
        self.analysis, self.job, self.rate, self.wait_s = analysis, job, rate, wait_s
        self.current: Segment | None = None
        self.sent = 0  # samples on the timeline so far
        self.waiting: list[Segment] = []  # ended, words not yet sent, oldest first
        self.ended = -1  # the last segment handed to the aligner
        job.ask_words()

    async def add(self, segment: int, audio: np.ndarray):
        """A piece of the audio sent. A segment ends at a piece of a later one, or as soon as the
        text's report counts it finished (a later segment's audio may come only once it is whole:
        its words need not wait for it). What follows a finished segment (a pause's silence) is on
        the timeline, and holds no words."""
        if self.current is not None and segment != self.current.index:
            await self._end()
        if self.current is None and segment > self.ended:
            self.current = Segment(segment, self.sent / self.rate)
        if self.current is not None and len(audio):
            self.current.audio.append(np.asarray(audio, np.float32))
        self.sent += len(audio)
        report = self.job.text_report
        if self.current is not None and report is not None and len(report.seeds) > self.current.index:
            await self._end()

    async def finish(self, tail: np.ndarray):
        """The audio has ended (`tail`: its last samples, of the last segment)."""
        if len(tail) and self.current is not None:
            self.current.audio.append(np.asarray(tail, np.float32))
            self.sent += len(tail)
        if self.current is not None:
            await self._end()

    def ready(self) -> list[dict]:
        """The words of each segment aligned since the last call, in the segments' order."""
        out = []
        while self.waiting and (self.waiting[0].error is not None or self.waiting[0].future.done()):
            out.append(self._words(self.waiting.pop(0)))
        return out

    async def rest(self) -> list[dict]:
        """Every segment's words still to come: waited for, at most wait_s in all."""
        pending = [s.future for s in self.waiting if s.error is None]
        if pending:
            await asyncio.wait([asyncio.wrap_future(f) for f in pending], timeout=self.wait_s)
        out = []
        for segment in self.waiting:
            if segment.error is None and not segment.future.done():
                segment.error = f"the words were not aligned within {self.wait_s:g} s (the server's audio analysis is busy)"
            out.append(self._words(segment))
        self.waiting = []
        return out

    async def _end(self):
        segment, self.current = self.current, None
        self.ended = segment.index
        report = self.job.text_report
        text = report.segments[segment.index] if report is not None and segment.index < len(report.segments) else ""
        self.waiting.append(segment)
        audio = np.concatenate(segment.audio) if segment.audio else np.zeros(0, np.float32)
        segment.audio = []
        try:
            at_rate = await anyio.to_thread.run_sync(resample, audio, self.rate, RATE)
            take = Take(at_rate, [(text, 0.0, len(at_rate) / RATE)], None, scores.is_chinese(text))
            segment.future = await anyio.to_thread.run_sync(self.analysis.align, take)
        except (ModelUnavailable, QueueFullError) as exc:
            segment.error = f"no word timestamps for this segment: {exc}"

    def _words(self, segment: Segment) -> dict:
        """A segment's frame: its words on the stream's timeline, or why there are none."""
        if segment.error is None:
            try:
                words = [{**w, "segment": segment.index, "start_s": round(w["start_s"] + segment.start, 3),
                          "end_s": round(w["end_s"] + segment.start, 3)} for w in segment.future.result()]
            except (ModelUnavailable, AnalysisStopped) as exc:
                segment.error = f"no word timestamps for this segment: {exc}"
            except Exception as exc:  # noqa: BLE001 - the process's generic failure: its message is safe
                segment.error = f"no word timestamps for this segment: {exc}"
            else:
                self.job.add_words(words)
                return {"segment": segment.index, "words": words}
        return {"segment": segment.index, "words": [], "error": segment.error}
