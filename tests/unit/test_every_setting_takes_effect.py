"""Every field of the settings tree takes effect (issue 56, item 4): Settings.of(field=value) given to
create_app reaches what the app builds, or is read by a route from the served settings, or this
file says why neither can be seen here. The walk covers every field of ui/settings.Settings, so a
field added to the tree without being wired to anything fails here until it is.

Each field is changed to a value of its own, all at once, in one app (its engine loaded from the
same settings, as app.py loads it); a second app is built from the defaults. A field's observer
must give the changed value in the first and the default in the second: so it reads that field,
not a default or a neighbour. The shared library's fields and the GPU pool's need a library in
PostgreSQL and several engines, so they get an app of their own (and a baseline with the same
library)."""
from __future__ import annotations

import ast
import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.requests import Request

from tests.support.app_helpers import load_engine
from ui import create_app
from ui.guard.connections import PROTOCOLS, server_config
from ui.http.status import spec
from ui.settings import DEFAULTS, Settings

ROOT = Path(__file__).resolve().parents[2]
# Nothing listens on port 1: the library opens at once and answers 503 until the database does.
NO_DATABASE = "postgresql://nobody@127.0.0.1:1/voices"
TOKEN = "changed-token-1234"
# The shared library's and the pool's fields, built apart: (changed build, baseline build).
SHARED = {"db_connections": 3, "db_wait_s": 0.7, "failing_gpu_pause_s": 7.5}


def changed_values(data_dir: str) -> dict:
    """A value of its own for every field but SHARED's, none equal to its default."""
    return dict(
        max_streams=3, max_text_chars=321, max_audio_seconds=17.0, max_output_seconds=91.0, max_queue=5,
        prepare_threads=3, normalize_processes=2, max_backlog_s=33.0, max_unread_s=77.0, keep_finished=19, max_call_wait_s=0.9,
        latents_mb=9, latents_ttl_s=99.0,
        recognizer="changed/recognizer", speaker="changed/speaker", device="cuda:7", max_pending=3,
        max_pending_words=11, max_batch=3, load_wait_s=4.5, retry_after_s=13.0, recognizer_loader="changed:loader",
        speaker_loader="changed:speaker_loader", log_level="DEBUG", converted_models="/changed/models",
        prebuffer_ms=45.0, notice="a changed notice", gradio_queue=9, gradio_poll_ms=25.0, loading_retry_s=7,
        kept_mb=21, kept_takes=22, recording_mb=23, recording_seconds=24.0,
        token=TOKEN, allowed_hosts=["voice.example"],
        max_upload_mb=11, max_json_kb=99, max_request_files=3, max_voice_chars=77, body_timeout_s=13.0,
        idle_timeout_s=14.0, stall_timeout_s=15.0, send_buffer_bytes=65536, busy_retry_s=9, loop="asyncio",
        parser="h11",
        upload_ttl_s=600.0, clips_per_client=6, min_seconds=0.4, max_decoded_mb=33, decodes=3, max_clips=29,
        max_total_mb=31, full_retry_s=41,
        data_dir=data_dir, max_voices=7, max_library_mb=51, writable=False,
        piece_patches=5, max_decodes=3, per_client=4, unread_pieces=3, retry_s=6,
        max_take_seconds=120.0, max_segments=17, words_wait_s=12.0,
        min_clause_chars=5, commit_after_s=0.25, session_idle_s=11.0, max_pieces_per_s=50,
        model_id="changed/model", model_revision="abc123", lora="changed-lora", warm_up=True,
    )


@dataclass
class Built:
    app: object
    worker: object
    engine: object

    @property
    def ctx(self):
        return self.app.state.ctx

    def middleware(self, name: str) -> dict:
        return next(m.kwargs for m in self.app.user_middleware if m.cls.__name__ == name)

    def spec(self) -> dict:
        """GET /voxcpm/spec as the route answers it: what the page reads."""
        return asyncio.run(spec(Request({"type": "http", "app": self.app, "headers": []})))

    def connection(self, name: str):
        return server_config(self.app, self.ctx.settings).http.keywords[name]

    def parser(self) -> str:
        """The parser whose guarded protocol the server is given."""
        protocol = server_config(self.app, self.ctx.settings).http.func
        return next(name for name, kind in PROTOCOLS.items() if kind is protocol)


def _limits(b: Built, name: str) -> tuple:
    """One engine limit as each piece that enforces or shows it holds it: the engine, the served
    limits and the spec the page reads."""
    return getattr(b.engine, name), getattr(b.ctx.limits, name), b.spec()["limits"][name]


def _many(*values) -> tuple:
    return values


# Where the built app uses each field: a function of the build, giving the value it holds (a tuple
# holds the value once for each place that keeps its own copy).
OBSERVED = {
    "max_streams": lambda b: b.worker.rows,
    "max_text_chars": lambda b: _limits(b, "max_text_chars"),
    "max_audio_seconds": lambda b: _limits(b, "max_audio_seconds") + (b.ctx.clips.max_seconds,),
    "max_output_seconds": lambda b: _limits(b, "max_output_seconds") + (b.worker.output.max_output_s,),
    "max_queue": lambda b: b.worker.max_queue,
    "prepare_threads": lambda b: b.worker._intake._max_workers,
    "normalize_processes": lambda b: b.worker._normalizer.processes,
    "max_backlog_s": lambda b: b.worker.unread.per_job_s,
    "max_unread_s": lambda b: b.worker.unread.total_s,
    "keep_finished": lambda b: b.worker._keep_finished,
    "max_call_wait_s": lambda b: b.worker._calls.max_wait_s,
    "latents_mb": lambda b: _many(b.ctx.latents.max_bytes // 2**20, b.worker.latents.max_bytes // 2**20),
    "latents_ttl_s": lambda b: b.ctx.latents.ttl_s,
    "warm_up": lambda b: b.worker._warm_up,
    "prebuffer_ms": lambda b: b.spec()["prebuffer_ms"],
    "notice": lambda b: _notice(b),
    "gradio_queue": lambda b: _demo(b)._queue.max_size,
    "gradio_poll_ms": lambda b: _gradio_poll_ms(b),
    "token": lambda b: b.middleware("TokenGate")["token"] if _has(b, "TokenGate") else None,
    "allowed_hosts": lambda b: b.middleware("HostGuard")["allowed_hosts"],
    "max_upload_mb": lambda b: _many(b.middleware("RequestLimits")["max_body_bytes"] // 2**20,
                                     b.ctx.clips.max_bytes // 2**20, b.spec()["limits"]["max_upload_mb"]),
    "max_request_files": lambda b: b.middleware("RequestLimits")["max_files"],
    "body_timeout_s": lambda b: b.middleware("RequestLimits")["body_timeout_s"],
    "idle_timeout_s": lambda b: b.connection("idle_s"),
    "stall_timeout_s": lambda b: b.connection("stall_s"),
    "send_buffer_bytes": lambda b: b.connection("send_buffer"),
    "loop": lambda b: server_config(b.app, b.ctx.settings).loop,
    "parser": lambda b: b.parser(),
    "upload_ttl_s": lambda b: b.ctx.clips.ttl_s,
    "clips_per_client": lambda b: b.ctx.clips.max_per_client,
    "min_seconds": lambda b: b.ctx.clips.min_seconds,
    "max_decoded_mb": lambda b: b.ctx.clips.max_decoded_bytes // 2**20,
    "decodes": lambda b: b.ctx.clips.decodes,
    "max_clips": lambda b: b.ctx.clips.max_clips,
    "max_total_mb": lambda b: b.ctx.clips.max_total_bytes // 2**20,
    "data_dir": lambda b: str(b.ctx.voices.folder.parent) if b.ctx.voices is not None else None,
    "voice_store": lambda b: getattr(b.ctx.voices, "url", None),
    "max_voices": lambda b: b.ctx.voices.max_voices if b.ctx.voices is not None else DEFAULTS.library.max_voices,
    "max_library_mb": lambda b: (b.ctx.voices.max_bytes // 2**20 if b.ctx.voices is not None
                                 else DEFAULTS.library.max_library_mb),
    "db_connections": lambda b: b.ctx.voices._pool.max_size,
    "db_wait_s": lambda b: b.ctx.voices._pool.timeout,
    "failing_gpu_pause_s": lambda b: b.worker.failing_pause_s,
    "piece_patches": lambda b: b.ctx.renders.settings.piece_patches,
    "unread_pieces": lambda b: b.ctx.renders.settings.unread_pieces,
    "max_decodes": lambda b: b.ctx.renders.slots.max_decodes,
    "per_client": lambda b: b.ctx.renders.slots.per_client,
    "retry_s": lambda b: b.ctx.renders.slots.retry_s,
    "model_id": lambda b: b.ctx.build["model"],
    "model_revision": lambda b: b.ctx.build["revision"],
    "lora": lambda b: b.ctx.build["lora"],
}
# The workbench's section goes to the page whole, in the spec.
OBSERVED.update({f.name: (lambda b, name=f.name: b.spec()["workbench"][name])
                 for f in dataclasses.fields(DEFAULTS.workbench)})
# The analysis process is handed its section whole (it reads it there, inference/analysis/runner.py);
# its device is the first engine's unless one is named.
OBSERVED.update({f.name: (lambda b, name=f.name: getattr(b.ctx.analysis.settings, name))
                 for f in dataclasses.fields(DEFAULTS.analysis)})
# "auto" is resolved: to the engine's device, the CPU here; to httptools where it is installed
BASELINE = {"device": "cpu", "parser": "httptools" if "httptools" in PROTOCOLS else "h11"}

# Read by a route from the served settings (ctx.settings) each time a request comes: the test
# checks that the served settings carry the value and that the file named reads that field there.
READ_PER_REQUEST = {
    "max_json_kb": "ui/http/common.py",
    "busy_retry_s": "ui/http/common.py",
    "max_voice_chars": "ui/http/common.py",
    "full_retry_s": "ui/http/clips.py",
    "writable": "ui/http/voices.py",
    "loading_retry_s": "ui/http/status.py",
    "max_take_seconds": "ui/http/evaluate.py",
    "max_segments": "ui/http/evaluate.py",
    "words_wait_s": "ui/http/stream.py",
    "min_clause_chars": "ui/http/live.py",
    "commit_after_s": "ui/http/live.py",
    "session_idle_s": "ui/http/live.py",
    "max_pieces_per_s": "ui/http/live.py",
}


def _demo(b: Built):
    return b.middleware("KnownEvents")["demo"]


def _gradio_poll_ms(b: Built) -> float:
    """The wait of Gradio's queue between its looks for work, as long as its loops still read the
    attributes the app sets (a Gradio that renamed them would poll at its own pace again)."""
    import inspect

    from gradio.queueing import Queue

    loops = inspect.getsource(Queue.start_processing) + inspect.getsource(Queue.start_progress_updates)
    queue = _demo(b)._queue
    assert "await asyncio.sleep(self.sleep_when_free)" in loops
    assert "await asyncio.sleep(self.progress_update_sleep_when_free)" in loops
    assert queue.progress_update_sleep_when_free == 10 * queue.sleep_when_free
    return round(queue.sleep_when_free * 1000.0, 6)


def _notice(b: Built) -> str | None:
    """The served notice when the page shows it."""
    notice = b.ctx.settings.page.notice
    return notice if notice is not None and notice in str(_demo(b).config) else None


def _has(b: Built, name: str) -> bool:
    return any(m.cls.__name__ == name for m in b.app.user_middleware)


def leaves(settings=DEFAULTS):
    """(section, field, default) for every field of the tree, walked from its dataclasses."""
    for root in dataclasses.fields(settings):
        value = getattr(settings, root.name)
        if dataclasses.is_dataclass(value):
            yield from ((root.name, f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
        else:
            yield "", root.name, value


FIELDS = [name for _, name, _ in leaves()]


def _build(engine, settings: Settings) -> Built:
    app, worker = create_app(engine, settings)
    return Built(app, worker, engine if not isinstance(engine, list) else engine[0])


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    changed = changed_values(str(tmp_path_factory.mktemp("data")))
    settings = Settings.of(**changed)
    default_engine = load_engine(**DEFAULTS.limits.engine_options())
    # The pool's two workers share one engine: neither is given a request, and nothing warms up.
    built = {"changed": _build(load_engine(**settings.limits.engine_options()), settings),
             "default": _build(default_engine, Settings()),
             "shared": _build([default_engine, default_engine], Settings.of(voice_store=NO_DATABASE, **SHARED)),
             "shared default": _build([default_engine, default_engine], Settings.of(voice_store=NO_DATABASE))}
    yield changed, built
    for b in built.values():
        b.worker.close()
        b.ctx.analysis.close()
        if b.ctx.voices is not None:
            b.ctx.voices.close()


def _pair(field: str) -> tuple[str, str]:
    if field in SHARED:
        return "shared", "shared default"
    return ("shared" if field == "voice_store" else "changed"), "default"


def _expect(value, observed):
    return tuple(value for _ in observed) if isinstance(observed, tuple) else value


@pytest.mark.parametrize("field", FIELDS)
def test_a_changed_field_reaches_what_the_app_builds(builds, field):
    changed, built = builds
    value = {**changed, **SHARED, "voice_store": NO_DATABASE}[field]
    default = dict((name, d) for _, name, d in leaves())[field]
    assert value != default, f"{field}: the changed value must differ from the default"
    changed_build, baseline_build = (built[name] for name in _pair(field))
    if field in READ_PER_REQUEST:
        section = next(s for s, name, _ in leaves() if name == field)
        assert getattr(getattr(changed_build.ctx.settings, section), field) == value
        reader = (ROOT / READ_PER_REQUEST[field]).read_text(encoding="utf-8")
        assert f"settings.{section}" in reader and f".{field}" in reader, \
            f"{READ_PER_REQUEST[field]} does not read {section}.{field} from the served settings"
        return
    assert field in OBSERVED, f"{field}: no observer says where the app uses it (add one, or a reason)"
    seen = OBSERVED[field](changed_build)
    assert seen == _expect(value, seen), f"{field}: changed to {value!r}, the app holds {seen!r}"
    base = OBSERVED[field](baseline_build)
    want = BASELINE.get(field, default if field != "voice_store" else None)
    assert base == _expect(want, base), f"{field}: the observer gives {base!r} on the defaults, not {want!r}"


def test_the_app_serves_one_limits(builds):
    """The routes read ctx.limits; the settings they read (ctx.settings) hold the same object."""
    for b in builds[1].values():
        assert b.ctx.settings.limits is b.ctx.limits


def test_an_engine_built_apart_keeps_its_own_limits_and_says_so(caplog):
    """A test (or a caller) may build the engine with its own limits: those are the ones it
    enforces, so they are the ones served, and a setting that says otherwise is named in the log."""
    engine = load_engine(max_text_chars=50)
    with caplog.at_level(logging.WARNING, logger="voxcpm.app"):
        app, worker = create_app(engine, Settings.of(max_text_chars=400))
    try:
        assert app.state.ctx.limits.max_text_chars == 50 == app.state.ctx.settings.limits.max_text_chars
        assert "max_text_chars" in caplog.text
    finally:
        worker.close()
        app.state.ctx.analysis.close()


# The engine library's own defaults, for a caller without the app (benchmarks, tests, a script):
# create_app passes every one of them (the walk above checks that), so none stands in for a setting.
LIBRARY_DEFAULTS = {"inference/runtime/engine.py", "inference/serving/worker.py", "inference/serving/pool.py",
                    "inference/serving/latent_store.py", "inference/request/audio_input.py"}
# A command of its own, with no server's settings to be given: it names the servers' defaults.
COMMANDS = {"ui/library/copy_voices.py"}


def default_readers() -> set[str]:
    """The product modules that import the tree's defaults (DEFAULTS or LIMITS)."""
    found = set()
    for path in [p for top in ("ui", "inference") for p in (ROOT / top).rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and {a.name for a in node.names} & {"DEFAULTS", "LIMITS"}:
                found.add(str(path.relative_to(ROOT)))
    return found - {"ui/settings.py", "inference/config.py"}


def test_no_module_of_the_app_reads_a_default_instead_of_its_settings():
    assert default_readers() == LIBRARY_DEFAULTS | COMMANDS
