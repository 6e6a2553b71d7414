"""The app's one settings tree: every limit, rate and default the server keeps, each written once,
in a frozen object of sections built once from the command line (app.py; options.py takes its
defaults and help from these fields) and handed down: the engine's and the serving layer's limits
(inference/config.py Limits), the analysis process's (AnalysisSettings), and the app's own below.
The page reads what it needs of them from GET /voxcpm/spec. tests/unit/test_one_settings_tree.py
fails when a limit's value is written in a second product file.

Deliberately free of Gradio and of the app's other modules (any of them may import it), so that
app.py's command line answers in about a second.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from inference.config import LIMITS, AnalysisSettings, Limits


@dataclass(frozen=True)
class PageSettings:
    prebuffer_ms: float = 80.0  # audio the page's player holds before it starts
    notice: str | None = None  # a banner above the page, e.g. that the weights are random
    gradio_queue: int = 64  # Gradio's own events (clip uploads) waiting
    # How often Gradio's queue looks for a next event while it has none. Gradio's 1 ms woke the event
    # loop a thousand times a second, each wake a trip through the GIL the engine's thread shares:
    # an idle app's loop took 6% of a core. An event (an upload, a gradio_client call) may now start
    # up to this much later; the page's stream and the HTTP routes never go through that queue.
    gradio_poll_ms: float = 10.0
    loading_retry_s: int = 2  # while the engine loads: the loading page's reload, and /ready's Retry-After


@dataclass(frozen=True)
class WorkbenchSettings:
    """What the listening-QA workbench keeps in the browser (static/workbench/), sent to the page."""
    kept_mb: int = 200  # takes' samples kept in the browser: about 35 minutes of 48 kHz int16
    kept_takes: int = 100
    recording_mb: int = 64  # a recording loaded as B: larger is refused before it is read...
    recording_seconds: float = 600.0  # ...and longer once decoded (it is held in memory as int16)


@dataclass(frozen=True)
class AccessSettings:
    token: str | None = None  # when set, every request but the health probe must carry it (ui/guard/auth.py)
    allowed_hosts: list[str] | None = None  # Host names answered (ui/guard/hosts.py); None: any


@dataclass(frozen=True)
class HttpSettings:
    """What one request or connection may cost (ui/guard/, ui/http/common.py)."""
    max_upload_mb: int = 25  # a request body (a clip, a take to score)
    max_json_kb: int = 256  # a JSON body: 20,000 CJK characters escaped as \uXXXX, and room to spare
    max_request_files: int = 1  # files in one request to Gradio's upload route (the page sends one clip)
    max_voice_chars: int = 200  # a `voice` field: a saved voice's or a built-in name
    body_timeout_s: float = 60.0  # a request body must arrive within this (25 MiB at 3.5 Mbit/s)
    idle_timeout_s: float = 30.0  # a connection must send its request within this (ui/guard/connections.py)
    stall_timeout_s: float = 30.0  # a client that reads none of its response for this long is cut off
    send_buffer_bytes: int = 256 * 1024  # the kernel's send buffer per connection
    busy_retry_s: int = 5  # the Retry-After of a 503 for a server (or its analysis, or its database) that is busy
    # uvicorn's event loop and HTTP parser (one of LOOPS, PARSERS); "auto" takes uvloop and httptools
    # (requirements.txt): the event loop serves every door, and these are its C versions
    # (docs/benchmarks.md, "The event loop in C")
    loop: str = "auto"
    parser: str = "auto"

    LOOPS: ClassVar[tuple[str, ...]] = ("auto", "uvloop", "asyncio")  # uvicorn's names
    PARSERS: ClassVar[tuple[str, ...]] = ("auto", "httptools", "h11")


@dataclass(frozen=True)
class ClipSettings:
    """Uploaded reference clips (ui/library/uploads.py)."""
    upload_ttl_s: float = 1800.0
    clips_per_client: int = 16  # clips one client (address) may hold at once; more are refused
    min_seconds: float = 0.1  # shorter holds no voice to clone: a stray click or a cut file
    max_decoded_mb: int = 128  # what one decode may cost, counted as float32 frames x channels from the header
    decodes: int = 2  # clips decoded at once: a long 192 kHz file briefly needs ~100 MiB
    max_clips: int = 256  # clips held at once, in all
    max_total_mb: int = 512  # their converted float32, in all
    full_retry_s: int = 60  # the Retry-After of an upload refused because the store is full


@dataclass(frozen=True)
class LibrarySettings:
    """The voice library (ui/library/voice_store.py, pg_voice_store.py)."""
    data_dir: str | None = None  # the library lives in DATA_DIR/voices (ui/library/data_dir.py); None: no library
    voice_store: str | None = None  # a postgresql:// URL: one library for every replica; None: the folder
    max_voices: int = 100
    max_library_mb: int = 500
    writable: bool = True  # app.py: False when others can reach the server without a token
    db_connections: int = 8  # per replica; a query holds one for a millisecond or so
    db_wait_s: float = 2.0  # longest a voice route waits for a connection before it answers 503


@dataclass(frozen=True)
class RenderSettings:
    """Offline renders of finished takes (ui/services/renders.py)."""
    piece_patches: int = 12  # patches decoded per call on the engine's thread (1.9 s of audio)
    max_decodes: int = 4  # renders decoded at once, in all
    per_client: int = 2  # renders one client reads at once
    unread_pieces: int = 2  # a render not kept decodes ahead of its slowest reader by this many parts
    retry_s: int = 2  # the Retry-After of a render refused for its caps


@dataclass(frozen=True)
class EvaluationSettings:
    """A take scored by POST /voxcpm/evaluate (its text's length is the engine's max_text_chars)."""
    max_take_seconds: float = 600.0  # the body limit bounds it first at 48 kHz
    max_segments: int = 200
    words_wait_s: float = 60.0  # a stream's last words wait this long for the aligner, then come without it


@dataclass(frozen=True)
class LiveTextSettings:
    """WS /v1/audio/speech/stream (ui/http/live.py): text spoken as it arrives."""
    min_clause_chars: int = 12  # a clause shorter than this waits for the next: a word or two alone sounds wrong
    commit_after_s: float = 0.5  # pieces that stop this long: what is buffered is spoken up to its last word
    session_idle_s: float = 30.0  # a session that sends nothing this long is closed (it may hold a row)
    max_pieces_per_s: int = 200  # a client sending faster is closed: an LLM streams tens of tokens a second


@dataclass(frozen=True)
class BuildSettings:
    """What each take records as its model (app.py describes it)."""
    model_id: str = "tiny random model"
    model_revision: str | None = None
    lora: str | None = None  # the LoRA merged into the served weights (--lora)


@dataclass(frozen=True)
class Settings:
    limits: Limits = LIMITS  # the engine's and the serving layer's (inference/config.py)
    analysis: AnalysisSettings = AnalysisSettings()  # the analysis process's (inference/config.py)
    page: PageSettings = PageSettings()
    workbench: WorkbenchSettings = WorkbenchSettings()
    access: AccessSettings = AccessSettings()
    http: HttpSettings = HttpSettings()
    clips: ClipSettings = ClipSettings()
    library: LibrarySettings = LibrarySettings()
    renders: RenderSettings = RenderSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    live: LiveTextSettings = LiveTextSettings()
    build: BuildSettings = BuildSettings()
    warm_up: bool = False  # warm the engine on its worker thread (when from_pretrained did not)

    @classmethod
    def of(cls, **values) -> Settings:
        """The defaults with some fields changed, each named alone (no two sections share a
        field's name): Settings.of(prebuffer_ms=40, max_queue=2) changes page and limits."""
        sections: dict[str, dict] = {}
        for name, value in values.items():
            section = _SECTION_OF.get(name)
            if section is None:
                raise TypeError(f"no setting is named {name!r}")
            if section == "":
                sections[name] = value
            else:
                sections.setdefault(section, {})[name] = value
        built = {name: (dataclasses.replace(getattr(DEFAULTS, name), **given) if isinstance(given, dict) else given)
                 for name, given in sections.items()}
        return cls(**built)


def _sections() -> dict[str, str]:
    """Each field's section ("" for the root's own), checked unique."""
    out: dict[str, str] = {}
    for root in dataclasses.fields(Settings):
        kind = root.default.__class__ if root.default is not dataclasses.MISSING else None
        names = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else []
        for name in names:
            if name in out:
                raise TypeError(f"two sections name a setting {name!r}")
            out[name] = root.name
        out[root.name] = ""  # a whole section given at once, or the root's own field
    return out


DEFAULTS = Settings()
_SECTION_OF = _sections()
__all__ = ["AccessSettings", "BuildSettings", "ClipSettings", "DEFAULTS", "EvaluationSettings", "HttpSettings",
           "LibrarySettings", "LiveTextSettings", "PageSettings", "RenderSettings", "Settings", "WorkbenchSettings"]
