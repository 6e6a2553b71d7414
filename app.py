"""VoxCPM2 streaming demo: load and warm the engine, build the web app, serve it.

    python app.py                      # openbmb/VoxCPM2 from the Hugging Face cache (downloaded once)
    python app.py --model /path/to/checkpoint
    python app.py --random-weights     # a tiny random model: try the interface without weights
    python app.py --host 0.0.0.0 --token "$(openssl rand -hex 16)"   # reachable by others, with a token
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import tempfile
import time

RANDOM_NOTICE = ("Random weights: this server runs a tiny untrained model, so every output is noise. "
                 "It is here to try the interface, the player and the metrics.")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="VoxCPM2 streaming text-to-speech demo")
    p.add_argument("--model", default="openbmb/VoxCPM2", help="hub id or local checkpoint folder")
    p.add_argument("--random-weights", action="store_true", help="tiny random model; the output is noise")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="bfloat16 or float32 (default: bfloat16 on cuda)")
    p.add_argument("--host", default=None, help="default 127.0.0.1; 0.0.0.0 on a Hugging Face Space")
    p.add_argument("--port", type=int, default=None, help="default $GRADIO_SERVER_PORT or 7860")
    p.add_argument("--allowed-hosts", default="",
                   help="comma-separated host names to answer to besides loopback ones (e.g. a name that "
                        "points at this machine); requests naming any other host are refused")
    p.add_argument("--token", default=None,
                   help="require this access token (default $VOXCPM_TOKEN); open /?token=... once in the browser")
    p.add_argument("--max-queue", type=int, default=16, help="requests allowed to wait for the engine")
    p.add_argument("--max-text-chars", type=int, default=2000, help="longest text, description or transcript")
    p.add_argument("--max-audio-seconds", type=float, default=60.0, help="longest reference clip")
    p.add_argument("--max-upload-mb", type=int, default=25, help="largest uploaded file")
    p.add_argument("--upload-ttl-min", type=float, default=30.0, help="how long an uploaded clip is kept")
    p.add_argument("--prebuffer-ms", type=float, default=80.0, help="audio the player holds before it starts")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def resolve_host(args) -> str:
    if args.host:
        return args.host
    if os.environ.get("GRADIO_SERVER_NAME"):
        return os.environ["GRADIO_SERVER_NAME"]
    # A Space's proxy reaches the app from outside the container; anywhere else stay local.
    return "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"


def resolve_token(args) -> str | None:
    token = args.token or os.environ.get("VOXCPM_TOKEN") or None
    from ui.auth import TOKEN_PATTERN

    if token is not None and not re.fullmatch(TOKEN_PATTERN, token):
        raise SystemExit("the token needs 8 to 256 characters from A-Z a-z 0-9 . _ ~ - "
                         "(it travels in URLs and cookies); e.g. --token \"$(openssl rand -hex 16)\"")
    return token


def resolve_port(args) -> int:
    return args.port or int(os.environ.get("GRADIO_SERVER_PORT", "7860"))


def load_engine(args):
    from inference import Engine

    source = args.model
    if args.random_weights:
        from inference.tiny import write_tiny_checkpoint

        source = tempfile.mkdtemp(prefix="voxcpm2-random-")
        write_tiny_checkpoint(source, seed=0)
    log = logging.getLogger("voxcpm.app")
    log.info("loading %s (the first run downloads it into the Hugging Face cache)", source)
    start = time.perf_counter()
    # Warm-up (CUDA-graph capture) happens on the worker thread that will replay the graphs.
    engine = Engine.from_pretrained(source, device=args.device, dtype=args.dtype, warmup=False,
                                    max_text_chars=args.max_text_chars, max_audio_seconds=args.max_audio_seconds)
    log.info("engine loaded in %.1f s", time.perf_counter() - start)
    return engine


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from ui import AppSettings, create_app
    from ui.connections import server_config
    from ui.hosts import allowed_hosts_for, is_loopback

    log = logging.getLogger("voxcpm.app")
    host, port, token = resolve_host(args), resolve_port(args), resolve_token(args)
    if token is None and not is_loopback(host):
        log.warning("bound to %s without a token: anyone who can reach this port can use the GPU "
                    "(set --token or VOXCPM_TOKEN to require one)", host)
    engine = load_engine(args)
    settings = AppSettings(max_queue=args.max_queue, prebuffer_ms=args.prebuffer_ms, warm_up=True,
                           notice=RANDOM_NOTICE if args.random_weights else None, token=token,
                           allowed_hosts=allowed_hosts_for(host, args.allowed_hosts.split(",")),
                           max_upload_mb=args.max_upload_mb, upload_ttl_s=args.upload_ttl_min * 60)
    app, worker = create_app(engine, settings)
    start = time.perf_counter()
    worker.ready.wait()
    log.info("engine warmed in %.1f s", time.perf_counter() - start)
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    print(f"VoxCPM2 demo on {url}" + (" (token required: open /?token=<your token> once)" if token else ""),
          flush=True)
    # Clip shares go by client address: behind a Space's proxy that is X-Forwarded-For, which only
    # the proxy can reach this port to set; elsewhere uvicorn trusts it from loopback proxies only.
    forwarded = "*" if os.environ.get("SPACE_ID") else None
    uvicorn.Server(server_config(app, host, port, log_level="warning", forwarded_allow_ips=forwarded)).run()


if __name__ == "__main__":
    main()
