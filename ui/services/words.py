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
import logging
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

log = logging.getLogger("voxcpm.words")


@dataclass
class Segment:
    index: int
    start: float  # where its audio starts on the stream's timeline, s
    audio: list[np.ndarray] = field(default_factory=list)
    handed: asyncio.Task | None = None  # its audio resampled and queued for the aligner, off the stream's path
    future: concurrent.futures.Future | None = None
    error: str | None = None

    @property
    def ready(self) -> bool:
        return self.error is not None or (self.handed is not None and self.handed.done()
                                          and (self.error is not None or self.future.done()))


class WordTrack:
    """One stream's words: add() each piece of audio as it is sent, with its segment; ready() the
    segments aligned since; rest() the others, once the audio has ended. Nothing here makes the
    audio wait: a segment's audio is resampled and queued for the aligner by a task of its own."""

    def __init__(self, analysis, job: Job, rate: int, wait_s: float):
        self.analysis, self.job, self.rate, self.wait_s = analysis, job, rate, wait_s
        self.current: Segment | None = None
        self.waiting: list[Segment] = []  # ended, words not yet sent, oldest first
        self.ended = -1  # the last segment handed to the aligner
        job.ask_words()

    def add(self, segment: int, audio: np.ndarray, pause: bool, offset: int):
        """A piece of the audio sent. A segment ends at a piece of a later one, or at a pause's
        silence once the text's report counts it finished (a later segment's audio may come only
        once it is whole: the words before a pause need not wait for it). A pause's silence is on
        the timeline and holds no words. `offset`: where the piece starts in the audio sent."""
        report = self.job.text_report
        finished = self.current is not None and report is not None and len(report.seeds) > self.current.index
        if self.current is not None and (segment != self.current.index or (pause and finished)):
            self._end()
        if self.current is None and segment > self.ended and not pause:
            self.current = Segment(segment, offset / self.rate)
        if self.current is not None and len(audio):
            self.current.audio.append(np.asarray(audio, np.float32))

    def finish(self, tail: np.ndarray):
        """The audio has ended (`tail`: its last samples, of the last segment)."""
        if len(tail) and self.current is not None:
            self.current.audio.append(np.asarray(tail, np.float32))
        if self.current is not None:
            self._end()

    def ready(self) -> list[dict]:
        """The words of each segment aligned since the last call, in the segments' order."""
        out = []
        while self.waiting and self.waiting[0].ready:
            out.append(self._words(self.waiting.pop(0)))
        return out

    async def rest(self) -> list[dict]:
        """Every segment's words still to come: waited for, at most wait_s in all."""
        async def aligned(segment: Segment):
            await segment.handed
            if segment.error is None:
                await asyncio.wrap_future(segment.future)
        pending = [aligned(s) for s in self.waiting if s.error is None]
        if pending:
            await asyncio.wait([asyncio.ensure_future(p) for p in pending], timeout=self.wait_s)
        out = []
        for segment in self.waiting:
            if not segment.ready:
                segment.error = f"the words were not aligned within {self.wait_s:g} s (the server's audio analysis is busy)"
            out.append(self._words(segment))
        self.waiting = []
        return out

    def _end(self):
        segment, self.current = self.current, None
        self.ended = segment.index
        report = self.job.text_report
        text = report.segments[segment.index] if report is not None and segment.index < len(report.segments) else ""
        self.waiting.append(segment)
        audio = np.concatenate(segment.audio) if segment.audio else np.zeros(0, np.float32)
        segment.audio = []
        segment.handed = asyncio.get_running_loop().create_task(self._hand(segment, audio, text))

    async def _hand(self, segment: Segment, audio: np.ndarray, text: str):
        try:
            at_rate = await anyio.to_thread.run_sync(resample, audio, self.rate, RATE)
            take = Take(at_rate, [(text, 0.0, len(at_rate) / RATE)], None, scores.is_chinese(text))
            segment.future = await anyio.to_thread.run_sync(self.analysis.align, take)
        except (ModelUnavailable, QueueFullError) as exc:
            segment.error = f"no word timestamps for this segment: {exc}"
        except Exception:  # noqa: BLE001 - ours: logged; the stream and its other segments go on
            log.exception("request %s: segment %d could not be handed to the aligner", self.job.id, segment.index)
            segment.error = "no word timestamps for this segment: an internal error on the server (logged)"

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
        self.job.add_word_error(segment.index, segment.error)  # its words URL and subtitles say why later
        return {"segment": segment.index, "words": [], "error": segment.error}
