"""The engine's and the serving layer's limits, each written once.

Engine, EngineWorker and WorkerPool take their defaults from `LIMITS`; app.py's command line
(options.py) reads its defaults and help from these fields, and the app (ui/context.AppSettings)
holds one `Limits` it hands down. Frozen: a limit is chosen at start-up and never changed after.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    # The engine's (inference/runtime/engine.py): they size its batch and refuse what would not fit.
    max_streams: int = 128  # streams generated at once, one batch row each (fewer if memory holds fewer)
    max_text_chars: int = 20000  # longest text, description or transcript
    max_audio_seconds: float = 60.0  # longest reference clip
    # The most audio one request may produce, speech and pauses as its listener hears them: 10 min is 110 MiB of
    # float32 at 48 kHz. A text whose pauses alone pass it is refused; otherwise the audio is cut there.
    max_output_seconds: float = 600.0
    # The serving layer's (inference/serving/): admission, and what a client that stops reading may cost.
    max_queue: int = 16  # requests waiting for a free row (per GPU with several)
    # Requests prepared at once (text, tokens, clips), per GPU: as many as anyio's threads took before
    # (a limit of 4 served a burst of 64 no faster on an H100: docs/benchmarks.md).
    prepare_threads: int = 40
    # Processes beside the app that normalize texts sent with normalize on, for every GPU's intake:
    # WeText's grammars keep the GIL 20-70 ms a sentence, which on an intake thread would stop the
    # engine's thread and the event loop (text/normalize.py). 0: on the intake threads.
    normalize_processes: int = 1
    max_backlog_s: float = 120.0  # how far one stream's client may fall behind playing it before it is stopped
    max_unread_s: float = 240.0  # unread audio all streams together may hold (serving/delivery.py)
    keep_finished: int = 256  # finished requests whose status can still be asked for
    failing_gpu_pause_s: float = 30.0  # a GPU whose last jobs all failed gets none (while another can) for this long
    max_call_wait_s: float = 2.0  # engine work besides streams waits at most this for the listeners to have room
    latents_mb: int = 64  # finished requests' latents kept for their offline render (serving/latent_store.py)
    latents_ttl_s: float = 1800.0  # ... and for how long

    def engine_options(self) -> dict:
        """Engine.from_pretrained's limit arguments."""
        return dict(max_streams=self.max_streams, max_text_chars=self.max_text_chars,
                    max_audio_seconds=self.max_audio_seconds, max_output_seconds=self.max_output_seconds)

    def worker_options(self) -> dict:
        """EngineWorker's (and WorkerPool's) limit arguments; the latent store is built by its owner."""
        return dict(max_queue=self.max_queue, prepare_threads=self.prepare_threads,
                    keep_finished=self.keep_finished, max_backlog_s=self.max_backlog_s,
                    max_unread_s=self.max_unread_s, max_output_s=self.max_output_seconds,
                    max_call_wait_s=self.max_call_wait_s)


LIMITS = Limits()


@dataclass(frozen=True)
class AnalysisSettings:
    """The analysis process's (inference/analysis/): the models that listen to audio, beside the engine."""
    recognizer: str | None = None  # Whisper checkpoint, hub id or folder (app.py: --asr-model); None: off
    speaker: str | None = None  # WavLM x-vector checkpoint (app.py: --speaker-model); None: off
    device: str = "auto"  # cpu, cuda or cuda:N; auto: the first engine's device
    max_pending: int = 8  # jobs waiting or running in it; more are refused at once (503)
    # Segments waiting for their words (a stream's word timestamps), counted apart: a burst of streams
    # ends its segments together, and their words may wait (about 1.3 MB of audio each) where a
    # person waiting for a transcript may not.
    max_pending_words: int = 64
    max_batch: int = 8  # recognizer windows in one model call
    load_wait_s: float = 10.0  # how long a job waits for a model being loaded before it hears "still loading"
    retry_after_s: float = 60.0  # a model that failed to load is tried again after this
    # What loads each model: `module:function(name, device)`; tests name stand-ins with the same interface.
    recognizer_loader: str = "inference.analysis.recognition:load_recognizer"
    # Where a CTranslate2 (faster-whisper) recognizer folder is converted to transformers' format,
    # once (app.py: DATA_DIR/models); None: the loader's own default (recognition.converted_root).
    converted_models: str | None = None
    speaker_loader: str = "inference.analysis.speaker:load_speaker"
    log_level: str = "INFO"
