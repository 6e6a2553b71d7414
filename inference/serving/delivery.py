"""Handing a running job what its stream made in a step (what Engine.step returned for it): each
chunk to its consumer, its latents kept for the offline render, its text's progress, and the check
that its consumer keeps up. Runs on the worker's thread after each engine step."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..request.request import AudioChunk
from .backlog import UnreadBudget
from .failures import FellBehind
from .interfaces import EngineStream
from .job import Job

log = logging.getLogger("voxcpm.worker")


@dataclass
class Running:
    """What the worker keeps of a job on the engine, besides what the job shows its consumer."""
    stream: EngineStream
    patches: list = field(default_factory=list)  # the latents delivered, filed in the LatentStore at the end
    pauses: list = field(default_factory=list)  # [patches delivered before it, samples] of each pause
    retries_logged: int = 0


def hand_over(job: Job, running: Running, chunks: list[AudioChunk], unread: UnreadBudget):
    """The chunks its stream made in the last step, to the job; raises FellBehind when its consumer lags."""
    report_text(job, running)
    for chunk in chunks:
        if chunk.pause:
            keep_pause(running, len(chunk.audio))
        else:
            running.patches.append(chunk.latents)
        job.deliver(chunk)
        if (why := unread.check(job, chunk.audio.shape[0])) is not None:
            raise FellBehind(why)


def keep_pause(running: Running, samples: int):
    """Where a pause's silence fell among the latents, for the offline render to put it there too;
    the chunks of one pause (and of tags in a row) make one run."""
    at = len(running.patches)
    if running.pauses and running.pauses[-1][0] == at:
        running.pauses[-1][1] += samples
    else:
        running.pauses.append([at, samples])


def report_text(job: Job, running: Running):
    """The text's progress to the job, and a log line for each runaway segment retried since."""
    report = running.stream.plan.snapshot()
    job.report_text(report)
    for retry in report.retries[running.retries_logged:]:
        log.warning("request %s: segment %d ran away (%d patches without a stop, seed %d); generating it "
                    "again with seed %d", job.id, retry["segment"], retry["patches"], retry["seed"], retry["seed"] + 1)
    running.retries_logged = len(report.retries)


def outcome_line(job: Job, served: int, streams: int, sample_rate: int) -> str:
    """The log line of a job's end: what was asked, how long it waited and took, how it ended."""
    m = job.metrics.as_dict(sample_rate)
    fmt = lambda v, unit="s": "-" if v is None else f"{v:.3f}{unit}"  # noqa: E731
    report = job.text_report
    retries = 0 if report is None else len(report.retries)
    return (f"request {job.id} #{served} mode={job.mode} text_chars={job.text_chars} queue={fmt(m['queue_s'])} "
            f"streams={streams} ttfp={fmt(m['ttfp_s'])} rtf={fmt(m['rtf'], '')} patches={m['patches']} "
            f"audio={fmt(m['audio_s'])} outcome={job.outcome} segments={len(job.segment_ends)} retries={retries}")
