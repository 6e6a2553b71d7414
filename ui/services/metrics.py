"""What GET /metrics shows (Prometheus' text format, through prometheus_client; the route is in
ui/http/status.py).

Counted as the routes see requests end (`observe_stream` around each streamed body) and as
requests are refused before they are queued (`observe_refusal`, called by ui/http/common.submit);
each GPU's rows in use and waiting jobs are read from the worker when Prometheus scrapes, so they
are never stale. Every app has its own registry: two apps in one process (the tests) count apart.

Underruns happen in the listener's browser: the page reports each take's once it is kept
(POST /voxcpm/playback, ui/http/status.py), counted once per request the worker
knows, so a page reloaded or a stray client cannot count a take twice or invent one.

Token (ui/guard/auth.py): /metrics needs it when --token is set (it shows the traffic; Prometheus
sends it as `authorization: {credentials: TOKEN}`); /ready, like /voxcpm/health, stays open for
probes. While the model loads, the loading gate answers both with 503 (ui/page/loading.py).
"""
from __future__ import annotations

import collections
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from inference.serving import gc_pauses
from inference.serving.job import Job

TTFP_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
REPORTS_KEPT = 4096  # job ids already counted (more than the worker lists: keep_finished)
GAUGES = (("rows", "rows (streams batched at once)"), ("rows_in_use", "rows generating now"),
          ("waiting", "jobs waiting for a row"), ("alive", "1 while its worker thread serves"))


class Metrics:
    """The app's counters and histograms, and a collector that reads the GPUs at scrape time."""

    def __init__(self, worker):
        self.registry = CollectorRegistry()
        self.worker = worker
        r = self.registry
        self.requests = Counter("voxcpm_requests", "Streamed requests that ended, by mode and outcome",
                                ["mode", "outcome"], registry=r)
        self.ttfp = Histogram("voxcpm_ttfp_seconds", "Time from a request's start on the GPU to its first patch",
                              ["mode"], buckets=TTFP_BUCKETS, registry=r)
        self.rtf = Histogram("voxcpm_rtf", "Generation time over audio time of each finished request",
                             ["mode"], buckets=RTF_BUCKETS, registry=r)
        self.audio = Counter("voxcpm_audio_seconds", "Seconds of audio produced", ["mode"], registry=r)
        self.refusals = Counter("voxcpm_refusals", "Requests refused before they were queued, by reason",
                                ["outcome", "status"], registry=r)
        self.reports = Counter("voxcpm_playback_reports", "Takes whose playback a page reported", registry=r)
        self.underruns = Counter("voxcpm_playback_underruns", "Times a page's player ran dry mid-take", registry=r)
        self.gaps = Counter("voxcpm_playback_gap_seconds", "Silence the underruns left in takes", registry=r)
        self._reported: collections.OrderedDict[str, None] = collections.OrderedDict()  # job ids, newest last
        self._lock = threading.Lock()
        r.register(_GpuCollector(worker))
        r.register(_GcCollector(gc_pauses.watch()))

    def job_ended(self, job: Job):
        timings = job.timings()  # not job.status(): its text and listener marks are not counted here
        outcome = "client_left" if job.live else (job.outcome or "unknown")
        self.requests.labels(job.mode, outcome).inc()
        if timings["ttfp_s"] is not None:
            self.ttfp.labels(job.mode).observe(timings["ttfp_s"])
        if timings["rtf"] is not None and outcome == "ok":
            self.rtf.labels(job.mode).observe(timings["rtf"])
        self.audio.labels(job.mode).inc(timings["audio_s"])

    def refused(self, status: int, outcome: str):
        self.refusals.labels(outcome, str(status)).inc()

    def played(self, report) -> dict | None:
        """Counts a page's report of a take, once per job the worker still lists; None if not
        counted, else what was counted. A report is clamped to what its job could have had: at
        most one underrun per chunk sent, and no more silence than the time since it was asked
        for, so one client cannot make the playback figures say anything it likes."""
        job = self.worker.get(report.job)
        if job is None:
            return None
        with self._lock:
            if report.job in self._reported:
                return None
            self._reported[report.job] = None
            while len(self._reported) > REPORTS_KEPT:
                self._reported.popitem(last=False)
        underruns = min(report.underruns, job.chunks)
        gap_s = min(report.gap_ms / 1000.0, time.perf_counter() - job.queued_at) if underruns else 0.0
        self.reports.inc()
        self.underruns.inc(underruns)
        self.gaps.inc(gap_s)
        return {"underruns": underruns, "gap_ms": round(gap_s * 1000.0, 3)}


class _GpuCollector:
    def __init__(self, worker):
        self.worker = worker

    def collect(self):
        gpus = self.worker.gpus()
        for key, help_text in GAUGES:
            family = GaugeMetricFamily(f"voxcpm_gpu_{key}", f"Per GPU: {help_text}", labels=["gpu", "device"])
            for index, gpu in enumerate(gpus):
                family.add_metric([str(index), str(gpu["device"])], float(gpu[key]))
            yield family


class _GcCollector:
    """The process's garbage-collection pauses (inference/serving/gc_pauses.py), per generation."""

    def __init__(self, watch: gc_pauses.PauseWatch):
        self.watch = watch

    def collect(self):
        seen = self.watch.snapshot()
        families = (CounterMetricFamily("voxcpm_gc_collections", "Garbage collections, by generation",
                                        labels=["generation"]),
                    CounterMetricFamily("voxcpm_gc_pause_seconds", "Time every thread stood still in "
                                        "garbage collection, by generation", labels=["generation"]),
                    GaugeMetricFamily("voxcpm_gc_pause_longest_seconds", "The longest garbage collection "
                                      "so far, by generation", labels=["generation"]))
        for family, key in zip(families, ("count", "seconds", "longest")):
            for generation, value in enumerate(seen[key]):
                family.add_metric([str(generation)], float(value))
            yield family


async def observe_stream(metrics: Metrics, job: Job, body):
    """`body` (a streamed response's chunks) passed through; the job counted once it ends."""
    try:
        async for chunk in body:
            yield chunk
    finally:
        await body.aclose()
        metrics.job_ended(job)


def observe_refusal(state, status: int, outcome: str):
    state.metrics.refused(status, outcome)
