"""What runs inside the analysis process (process.py spawns it): take the jobs waiting, as one
batch; run each model once over the batch's audio; answer each job.

Jobs are (id, kind, payload): `transcribe` (rate, float32 clip) -> its transcript; `evaluate` an
evaluation.Take -> its scores; `align` an evaluation.Take -> its words timed (words.py); `ping` ->
the process's id (it is up and answering). Answers are (id, ok, result or exception): the exceptions meant for
the client (a bad input, a model not available) cross whole; anything else is logged here and
crosses as a generic error.
"""
from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import queue
import signal
from typing import Callable

from ..config import AnalysisSettings
from ..errors import InputError
from ..request.audio_input import resample
from . import recognition, speaker
from .evaluation import RATE, Evaluation
from .words import TakeWords
from .loading import ModelUnavailable, Slot, resolve

log = logging.getLogger("voxcpm.analysis")
PARENT_CHECK_S = 1.0  # how often an idle process looks whether the app that started it is still there


class Models:
    """The process's models, each loaded on first use (loading.Slot)."""

    def __init__(self, settings: AnalysisSettings):
        def slot(kind, name, loader, **given):
            load = functools.partial(resolve(loader), **given) if given else resolve(loader)
            return Slot(kind, name, settings.device, load, settings.retry_after_s, settings.load_wait_s)
        # Only when set: the tests' stand-in loaders take (name, device) alone.
        converted = {"converted_in": settings.converted_models} if settings.converted_models else {}
        self.recognizer = slot(recognition.KIND, settings.recognizer, settings.recognizer_loader, **converted)
        self.speaker = slot(speaker.KIND, settings.speaker, settings.speaker_loader)


def serve(settings: AnalysisSettings, inbox, outbox):
    """The process's loop, until the app sends None or is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the app closes this process
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    models, jobs = Models(settings), Inbox(inbox)
    # Everything waiting is one batch (what may wait is bounded by the app: max_pending jobs and
    # max_pending_words alignments), answered kind by kind, a person's jobs before the words.
    while (batch := jobs.take(settings.max_pending + settings.max_pending_words)) is not None:
        for answers in run(batch, models, settings):
            for answer in answers:
                outbox.put(answer)


class Inbox:
    def __init__(self, inbox):
        self.inbox, self.stopping = inbox, False

    def take(self, most: int) -> list | None:
        """The jobs waiting (at least one, at most `most`); None once told to stop."""
        first = None
        while first is None and not self.stopping:
            try:
                first = self.inbox.get(timeout=PARENT_CHECK_S)
            except queue.Empty:
                self.stopping = parent_gone()
                continue
            self.stopping = first is None
        if first is None:
            return None
        batch = [first]
        while len(batch) < most:
            try:
                job = self.inbox.get_nowait()
            except queue.Empty:
                break
            if job is None:  # the batch is still answered; the next take() stops
                self.stopping = True
                break
            batch.append(job)
        return batch


def run(batch: list, models: Models, settings: AnalysisSettings):
    """Yields the batch's answers a kind at a time: pings and refusals, transcripts, evaluations,
    then alignments (a burst of streams' words waits behind a person waiting for a transcript)."""
    transcriptions = [(job, payload) for job, kind, payload in batch if kind == "transcribe"]
    evaluations = [(job, Evaluation(payload, settings.recognizer, settings.speaker))
                   for job, kind, payload in batch if kind == "evaluate"]
    alignments = [(job, TakeWords(payload)) for job, kind, payload in batch if kind == "align"]
    answers = [(job, True, os.getpid()) for job, kind, _ in batch if kind == "ping"]
    answers += [(job, False, InputError(f"unknown analysis job {kind!r}"))
                for job, kind, _ in batch if kind not in ("transcribe", "evaluate", "align", "ping")]
    yield answers
    if transcriptions:
        yield guarded([job for job, _ in transcriptions], lambda: transcribe(models, transcriptions, settings.max_batch))
    if evaluations:
        yield guarded([job for job, _ in evaluations], lambda: evaluate(models, evaluations, settings.max_batch))
    if alignments:
        yield guarded([job for job, _ in alignments], lambda: align(models, alignments, settings.max_batch))


def guarded(jobs: list[int], make: Callable[[], list]) -> list[tuple]:
    """make()'s answers, or each job's failure when it raises."""
    try:
        return [(job, True, value) for job, value in zip(jobs, make())]
    except (InputError, ModelUnavailable) as exc:
        return [(job, False, exc) for job in jobs]
    except Exception:  # noqa: BLE001 - a fault of the model or of ours: the process goes on serving
        log.exception("analysis of %d job(s) failed", len(jobs))
        failed = RuntimeError("the audio analysis failed because of an internal error on the server; it has been logged")
        return [(job, False, failed) for job in jobs]


def transcribe(models: Models, jobs: list, most: int) -> list[str]:
    recognizer = models.recognizer.get()
    clips = [resample(audio, rate, recognizer.rate) for _, (rate, audio) in jobs]
    return batched(recognizer.transcribe, clips, most)


def evaluate(models: Models, jobs: list, most: int) -> list[dict]:
    """Every evaluation's recognizer windows in batches, then its embeddings, then its scores."""
    evaluations = [evaluation for _, evaluation in jobs]
    to_hear = [e.recognition_clips() for e in evaluations]
    to_embed = [e.embedding_clips() for e in evaluations]
    languages = [e.language for e, clips in zip(evaluations, to_hear) for _ in clips]
    heard = measured(models.recognizer, sum(to_hear, []), lambda model, clips: heard_in(model, clips, languages, most))
    embedded = measured(models.speaker, sum(to_embed, []), lambda model, clips: [model.embed(c) for c in clips])
    results = []
    for evaluation, hear, embed in zip(evaluations, to_hear, to_embed):
        mine_heard, heard = share(heard, len(hear))
        mine_embedded, embedded = share(embedded, len(embed))
        results.append(evaluation.result(mine_heard, mine_embedded))
    return results


def heard_in(model, clips: list, languages: list[str], most: int) -> list:
    """Each clip heard in its take's language, batched by language, in the clips' order."""
    out: list = [None] * len(clips)
    for language in dict.fromkeys(languages):
        mine = [i for i, said in enumerate(languages) if said == language]
        heard = batched(lambda batch: model.hear(batch, language), [clips[i] for i in mine], most)
        for i, h in zip(mine, heard):
            out[i] = h
    return out


def align(models: Models, jobs: list, most: int) -> list[list[dict]]:
    """Every take's windows through the aligner in batches, then each take's words."""
    takes = [words for _, words in jobs]
    clips = [clip for t in takes for clip in t.clips()]
    texts = [text for t in takes for text in t.texts()]
    chinese = [c for t in takes for c in t.languages()]
    if not clips:  # nothing said (pauses only): no model needed
        return [[] for _ in takes]
    recognizer = models.recognizer.get()
    clips = [resample(clip, RATE, recognizer.rate) for clip in clips]
    aligned = []
    for at in range(0, len(clips), most):
        aligned += recognizer.align(clips[at:at + most], texts[at:at + most], chinese[at:at + most])
    results = []
    for take in takes:
        mine, aligned = aligned[:len(take.clips())], aligned[len(take.clips()):]
        results.append(take.result(mine))
    return results


def measured(slot: Slot, clips: list, make: Callable):
    """make(model, clips at its rate), or why there is no model (a measure then says so); no clips
    ask for no model."""
    if not clips:
        return []
    try:
        model = slot.get()
    except ModelUnavailable as exc:
        return exc
    return make(model, [resample(clip, RATE, model.rate) for clip in clips])


def share(made, count: int):
    """(the first `count` of what a model made, the rest); a ModelUnavailable is everyone's."""
    if isinstance(made, ModelUnavailable):
        return made, made
    return made[:count], made[count:]


def batched(fn: Callable[[list], list], items: list, most: int) -> list:
    out = []
    for at in range(0, len(items), most):
        out += fn(items[at:at + most])
    return out


def parent_gone() -> bool:
    """The app that started this process has ended (killed, so it could not say so)."""
    parent = multiprocessing.parent_process()
    return (parent is not None and not parent.is_alive()) or os.getppid() == 1
