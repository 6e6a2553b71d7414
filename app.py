"""VoxCPM2 streaming demo: load and warm the engine, build the web app, serve it.

    python app.py                      # openbmb/VoxCPM2 from the Hugging Face cache (downloaded once)
    python app.py --model /path/to/checkpoint
    python app.py --random-weights     # a tiny random model: try the interface without weights
    python app.py --host 0.0.0.0 --token "$(openssl rand -hex 16)"   # reachable by others, with a token
    python app.py --host 0.0.0.0 --open  # without one, on purpose (e.g. behind a proxy that authenticates)
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import re
import signal
import sys
import tempfile
import threading

import options
import startup
from inference.errors import CheckpointError
from startup import StartupError

TOKEN_FIX = 'set a token: --token "$(openssl rand -hex 16)", or the environment variable VOXCPM_TOKEN'
RANDOM_NOTICE = ("Random weights: this server runs a tiny untrained model, so every output is noise. "
                 "It is here to try the interface, the player and the metrics.")


def parse_args(argv=None) -> argparse.Namespace:
    return options.build_parser().parse_args(argv)


def resolve_host(args) -> str:
    if args.host:
        return args.host
    if os.environ.get("GRADIO_SERVER_NAME"):
        return os.environ["GRADIO_SERVER_NAME"]
    # A Space's proxy reaches the app from outside the container; anywhere else stay local.
    return "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"


def resolve_token(args) -> str | None:
    """The access token: --token, else $VOXCPM_TOKEN; None when neither gives one. An empty or blank
    VOXCPM_TOKEN is none (an environment variable set to nothing is how many tools leave it unset),
    but an empty --token is refused: it was typed on purpose, so it is a mistake (`--token $TOKEN`
    with TOKEN unset), and serving without a token would be the opposite of what was asked."""
    if args.token is not None and not args.token.strip():
        raise StartupError("--token is empty, so it would protect nothing (was it a shell variable that is not "
                           f"set?).\nTo fix: {TOKEN_FIX}, or leave --token out.")
    env = os.environ.get("VOXCPM_TOKEN", "")
    token = args.token or (env if env.strip() else None)
    if token is None:
        return None
    from ui.guard.auth import TOKEN_PATTERN  # only when a token is given: Starlette, a third of a second

    if not re.fullmatch(TOKEN_PATTERN, token):
        raise StartupError("the token needs 8 to 256 characters from A-Z a-z 0-9 . _ ~ - "
                           f"(it travels in URLs and cookies).\nTo fix: {TOKEN_FIX}.")
    return token


def check_exposure(host: str, token: str | None, args) -> None:
    """Refuses to listen beyond this machine without a token unless opened on purpose (--open,
    VOXCPM_OPEN=1, or a Hugging Face Space, which its owner makes public or private): anyone who
    reaches the port could otherwise use the GPU. Loopback needs no token."""
    from ui.guard.hosts import is_loopback

    if token is not None or is_loopback(host) or opened(args):
        return
    raise StartupError(f"the app would listen on {host} with no token, so anyone who reaches the port could use "
                       f"the GPU.\nTo fix: {TOKEN_FIX}; or --open (VOXCPM_OPEN=1) to serve without one on purpose, "
                       "e.g. behind a proxy that authenticates; or --host 127.0.0.1 for this machine only.")


def opened(args) -> bool:
    """--open, VOXCPM_OPEN=1, or a Space. Any other VOXCPM_OPEN is refused, not guessed at (if "yes"
    opened the server, would "no"?)."""
    value = os.environ.get("VOXCPM_OPEN", "").strip()
    if value not in ("", "0", "1"):
        raise StartupError(f"VOXCPM_OPEN is {value[:20]!r}; it must be 1 (serve without a token on purpose) or 0.\n"
                           f"To fix: VOXCPM_OPEN=1, or unset it and {TOKEN_FIX}.")
    return args.open or value == "1" or bool(os.environ.get("SPACE_ID"))


def resolve_port(args) -> int:
    if args.port:
        return args.port
    value = os.environ.get("GRADIO_SERVER_PORT", "7860")
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise StartupError(f"GRADIO_SERVER_PORT is {value!r}; it must be a port number.\n"
                           "To fix: unset it, or pass --port 7860.")
    return int(value)


def page_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host == "0.0.0.0" else "[::1]" if host == "::" else host
    return f"http://[{shown}]:{port}" if ":" in shown and not shown.startswith("[") else f"http://{shown}:{port}"


def library_settings(args, host: str, log) -> dict:
    """Where the voice library lives, and whether requests may change it: only token holders when
    others can reach the server (without a token, anyone could delete everyone's voices)."""
    from ui.library.data_dir import resolve_data_dir
    from ui.guard.hosts import is_loopback

    writable = bool(args.token) or is_loopback(host)
    limits = dict(max_voices=args.max_voices, max_library_mb=args.max_library_mb, writable=writable)
    shared = args.voice_store or os.environ.get("VOXCPM_VOICE_STORE") or None
    if shared is not None:
        return dict(voice_store=shared_store(shared, log, writable), **limits)
    folder, why = resolve_data_dir(args.data_dir)
    try:
        (folder / "voices").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create the voice library's folder {folder / 'voices'} ({exc.strerror}).\n"
                           "To fix: pass --data-dir with a folder this user can write.") from None
    log.info("voice library in %s (%s)%s", folder / "voices", why,
             "" if writable else "; read-only: set --token so that token holders can change it")
    return dict(data_dir=str(folder), **limits)


def shared_store(url: str, log, writable: bool) -> str:
    """The PostgreSQL URL, checked for its form only: the server starts whether or not the
    database answers (its voice routes answer 503 until it does; docs/deploy.md)."""
    from inference.errors import InputError
    from ui.library.pg_voice_store import check_url, where

    try:
        check_url(url)
    except InputError as exc:
        raise StartupError(f"{exc}.\nTo fix: pass --voice-store (or VOXCPM_VOICE_STORE) as "
                           "postgresql://user@host/database, or leave it out for the folder library.") from None
    log.info("voice library in PostgreSQL at %s, shared with every replica that names it%s", where(url),
             "" if writable else "; read-only: set --token so that token holders can change it")
    return url


def checkpoint_source(args, cleanup: contextlib.ExitStack) -> tuple[str, bool]:
    """(what to load, whether it is a hub id). Folders are checked file by file before anything loads."""
    if args.random_weights:
        # Removed at exit however the process ends short of SIGKILL (failed start, Ctrl-C, SIGTERM).
        tmp = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="voxcpm2-random-", ignore_cleanup_errors=True))
        return tmp, False
    if startup.is_folder_name(args.model):
        return str(startup.check_folder(args.model)), False
    return args.model, True


def load(args, settings, source: str, is_hub: bool, devices: list[str], dtype: str, phases):
    """On the loading thread: fetch, load (one engine per device), build the app, warm up; the app,
    ready to serve."""
    source = fetch_checkpoint(args, source, is_hub, phases)
    settings = describe_model(settings, args, source)
    engines = []
    for device in devices:  # one after the other: reading the checkpoint is the slow part
        logging.getLogger("voxcpm.app").info("loading %s on %s in %s", source, device, dtype)
        phases.begin("loading weights" + (f" on {device}" if len(devices) > 1 else ""))
        engines.append(load_engine(args, settings, source, device, dtype))
        phases.end()
    return warm_up(engines, settings, phases)


def fetch_checkpoint(args, source: str, is_hub: bool, phases) -> str:
    """The folder to load: the random checkpoint written, or the hub id downloaded (a phase)."""
    if args.random_weights:
        from inference.model.tiny_checkpoint import write_tiny_checkpoint

        write_tiny_checkpoint(source, seed=0)
    if not is_hub:
        return source
    from inference.model.checkpoint import resolve_checkpoint

    logging.getLogger("voxcpm.app").info("downloading %s into the Hugging Face cache (files already there are "
                                         "reused)", source)
    phases.begin("downloading the checkpoint")
    try:
        folder = str(resolve_checkpoint(source))
    except CheckpointError as exc:
        if exc.__cause__ is None:  # the hub answered, but with no VoxCPM2 checkpoint
            raise
        raise startup.hub_failure(args.model, exc) from exc
    phases.end()
    return folder


def describe_model(settings, args, source: str):
    """The settings with what each take records as its model: the name, and the revision of a hub
    download (known only once it is fetched, so the settings are completed here, before the app)."""
    lora = None
    if args.lora is not None:
        from inference.model.lora import lora_label

        lora = lora_label(args.lora)
    # A hub download sits in .../snapshots/<commit>/: that commit is the checkpoint's revision.
    parts = os.path.normpath(source).split(os.sep)
    revision = parts[-1] if len(parts) > 1 and parts[-2] == "snapshots" else None
    from ui.settings import BuildSettings

    return dataclasses.replace(settings, build=BuildSettings(
        model_id="tiny random model" if args.random_weights else args.model, model_revision=revision, lora=lora))


def warm_up(engines: list, settings, phases):
    """Builds the app and waits for its worker(s) to warm up; the app, ready to serve."""
    from inference.serving import gc_pauses
    from ui import create_app

    phases.begin("warm-up (graph capture, compilation, one request per mode)"
                 + (f", {len(engines)} GPUs in turn" if len(engines) > 1 else ""))
    # Warm-up (CUDA-graph capture) happens on the worker thread that will replay the graphs; with
    # several GPUs each worker warms up its own engine, one at a time (torch.compile is not
    # thread-safe: see inference/runtime/engine.py WARMUP_LOCK).
    app, worker = create_app(engines if len(engines) > 1 else engines[0], settings)
    worker.ready.wait()
    if worker.warmup_error is not None:  # ends the start with its short message instead of serving
        raise worker.warmup_error
    # One engine measured its own warm-up, closer to the work; several GPUs take the phase's time.
    phases.end(engines[0].warmup_seconds if len(engines) == 1 else None)
    # Everything loaded so far lives as long as the app: out of every later collection's walk,
    # which would otherwise stall all streams for 100-200 ms (inference/serving/gc_pauses.py).
    logging.getLogger("voxcpm.app").info("%d objects set aside from garbage collection", gc_pauses.settle())
    return app


def load_engine(args, settings, source: str, device: str, dtype: str):
    from inference import Engine

    return Engine.from_pretrained(source, device=device, dtype=dtype, warmup=False, lora=args.lora,
                                  **settings.limits.engine_options())


def serve(args, cleanup: contextlib.ExitStack):
    """Every check that can fail fast, then the server (a loading page at first) and the load."""
    startup.check_limits(args)
    startup.check_server(args)
    host, port = resolve_host(args), resolve_port(args)
    args.token = resolve_token(args)
    check_exposure(host, args.token, args)  # before the port is taken: a refused start serves nothing
    sock = cleanup.enter_context(startup.bind_port(host, port))
    device = startup.check_device(args.device)
    dtype = startup.check_dtype(args.dtype, device)
    devices = startup.check_gpus(args.gpus, device)
    source, is_hub = checkpoint_source(args, cleanup)
    startup.check_lora(args.lora)
    import uvicorn

    from ui.guard.connections import server_config
    from ui.page.loading import LoadingGate, Phases, quiet_engine_warmup

    settings = app_settings(args, host)
    quiet_engine_warmup()
    phases = Phases()
    gate = LoadingGate(phases, settings.page.loading_retry_s)
    # Clip shares go by client address: behind a Space's proxy that is X-Forwarded-For, which only
    # the proxy can reach this port to set; elsewhere uvicorn trusts it from loopback proxies only.
    forwarded = "*" if os.environ.get("SPACE_ID") else None
    server = uvicorn.Server(server_config(gate, settings, log_level="warning", lifespan="on",
                                          forwarded_allow_ips=forwarded))
    url = page_url(host, port)
    failure = start_loading(server, gate, url, lambda: load(args, settings, source, is_hub, devices, dtype, phases))
    # Not "demo at": the load may still fail; "ready at" follows once it serves.
    print(f"Loading VoxCPM2: the page at {url} shows which phase until the demo is ready"
          + (" (token required: open /?token=<your token> once)" if args.token else ""), flush=True)
    server.run(sockets=[sock])
    if failure:
        raise failure[0]


def app_settings(args, host: str):
    """The app's settings from the command line (and a warning when anyone may use the GPU)."""
    from inference.config import AnalysisSettings, Limits
    from ui.settings import Settings
    from ui.guard.hosts import allowed_hosts_for, is_loopback

    log = logging.getLogger("voxcpm.app")
    if args.token is None and not is_loopback(host):  # opened on purpose (check_exposure)
        log.warning("bound to %s without a token, opened on purpose: anyone who can reach this port can use "
                    "the GPU (set --token or VOXCPM_TOKEN to require one)", host)
    limits = Limits(max_streams=args.max_streams, max_queue=args.max_queue, prepare_threads=args.prepare_threads,
                    normalize_processes=args.normalize_processes, max_text_chars=args.max_text_chars,
                    max_audio_seconds=args.max_audio_seconds, max_output_seconds=args.max_output_seconds)
    return Settings.of(limits=limits, prebuffer_ms=args.prebuffer_ms, warm_up=True,
                       notice=RANDOM_NOTICE if args.random_weights else None, token=args.token,
                       allowed_hosts=allowed_hosts_for(host, args.allowed_hosts.split(",")),
                       max_upload_mb=args.max_upload_mb, upload_ttl_s=args.upload_ttl_min * 60,
                       loop=args.loop, parser=args.http,
                       analysis=AnalysisSettings(recognizer=none_or(args.asr_model), speaker=none_or(args.speaker_model),
                                                 converted_models=str(converted_models(args)), log_level=args.log_level),
                       **library_settings(args, host, log))


def converted_models(args):
    """Where a CTranslate2 speech recognition folder (--asr-model) is converted, once: beside the
    voice library, in the data folder, so that it outlives a restart (even with the library in
    PostgreSQL)."""
    from ui.library.data_dir import resolve_data_dir

    return resolve_data_dir(args.data_dir)[0] / "models"


def none_or(name: str) -> str | None:
    """A model option's value: `none` (any case) switches the model off."""
    return None if name.strip().lower() == "none" else name


def start_loading(server, gate, url: str, load_app) -> list[BaseException]:
    """Runs load_app() on a thread of its own and hands its app to the gate; a failure stops the
    server and lands in the list returned, for serve() to raise once the server is down."""
    failure: list[BaseException] = []

    def load_then_open():
        try:
            ready = gate.open(load_app())
        except BaseException as exc:  # noqa: BLE001 - any failure ends the start, reported by main
            failure.append(exc)
            server.should_exit = True
            return
        if ready:
            print(f"VoxCPM2 demo ready at {url}", flush=True)

    threading.Thread(target=load_then_open, name="engine-loader", daemon=True).start()
    return failure


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds, so the random checkpoint's folder is removed


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with contextlib.ExitStack() as cleanup:
            serve(args, cleanup)
    except KeyboardInterrupt:
        raise SystemExit(130)
    except Exception as exc:  # noqa: BLE001 - a start-up failure: two lines, the traceback in the debug log
        logging.getLogger("voxcpm.app").debug("start-up failed", exc_info=exc)
        error = exc if isinstance(exc, StartupError) else startup.load_failure(exc)
        print(f"app.py: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(options.EXIT_CODE)


if __name__ == "__main__":
    main()
