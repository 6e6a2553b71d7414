#!/usr/bin/env python3
"""The served path: the whole app (app.py) over HTTP under load, as visitors of a hosted demo get it.

    python -m bench.serve --out DIR                          # published architecture, random weights
    python -m bench.serve --checkpoint DIR --out DIR         # a real checkpoint folder
    python -m bench.serve --url http://127.0.0.1:7860 ...    # an app already running

Starts `app.py --model CHECKPOINT` on a free loopback port (a random checkpoint of the published
architecture is written in the official layout first), waits for /voxcpm/health, then runs
closed-loop bursts (--concurrency) and open-loop Poisson arrivals (--rates for --duration s, a
share --leave of clients closing the stream --leave-after s after their first audio). Reports per
load TTFB p50/p95/p99 (from the request's send, and from its coroutine's start beside it:
bench/http_load.py says why), chunk gap p95 and max, per-stream RTF, audio seconds per second,
refusals, and the server's RSS and GPU memory before and after. bench/README.md has the recipe for the GPU
machine (Gradio travels as wheels).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench import http_load  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog while the morning sun rises slowly "
        "above the quiet green hills today.")
SAMPLE_RATE = 48000


def write_random_checkpoint(config: Path, folder: Path, seed: int = 0) -> Path:
    """The published architecture with random weights (bf16 LM, float32 VAE) in the official layout."""
    import torch
    from safetensors.torch import save_file

    from inference.model.tiny_checkpoint import random_state_dicts, write_json, write_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder)  # a small vocabulary: its ids are valid rows of the big embedding
    raw = json.loads(config.read_text())
    write_json(folder / "config.json", raw)
    model, vae = random_state_dicts(raw, seed)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in model.items()}, str(folder / "model.safetensors"))
    torch.save({"state_dict": vae}, folder / "audiovae.pth")
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(checkpoint: str, port: int, extra: list[str], log: Path, root: Path = ROOT) -> subprocess.Popen:
    """app.py of `root` (default this checkout; another, to measure an earlier version beside it)."""
    cmd = [sys.executable, str(root / "app.py"), "--model", checkpoint, "--host", "127.0.0.1",
           "--port", str(port), *extra]
    print("starting:", " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=root, env=env)


def start_floor(port: int, extra: list[str], log: Path) -> subprocess.Popen:
    """bench/floor.py's server under uvicorn, on the loop and parser the app would take (`extra`:
    the app's --loop and --http, if given)."""
    options = dict(zip(extra[::2], extra[1::2]))
    cmd = [sys.executable, "-m", "uvicorn", "bench.floor:app", "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning", "--loop", options.get("--loop", "auto"), "--http", options.get("--http", "auto")]
    print("starting the floor:", " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def wait_ready(url: str, app: subprocess.Popen | None, timeout_s: float = 900.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if app is not None and app.poll() is not None:
            raise SystemExit(f"the app exited with code {app.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/voxcpm/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"the app was not ready within {timeout_s:.0f} s")


def server_memory(pid: int | None) -> dict:
    """The app's resident memory and the GPU memory in use (whole card, from nvidia-smi)."""
    out = {"rss_mb": None, "gpu_used_mb": None}
    if pid is not None:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) / 1024
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        out["gpu_used_mb"] = sum(float(v) for v in smi.stdout.split())
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return out


def scenarios(args) -> list[tuple[str, object]]:
    """(label, function returning (results, wall seconds)) for every load of the run."""
    body = functools.partial(http_load.request_body, patches=args.patches, timesteps=args.timesteps, text=TEXT)
    leave = functools.partial(http_load.leave_share, share=args.leave, after=args.leave_after)
    out = [(f"burst c={c}", functools.partial(_load, args, "burst", c, body, http_load.stay))
           for c in args.concurrency]
    out += [(f"Poisson {rate:g}/s {args.duration:g} s, {args.leave:.0%} leave",
             functools.partial(_load, args, "poisson", rate, body, leave)) for rate in args.rates]
    return out


def _load(args, kind: str, size: float, body, leave):
    if args.clients > 1:
        return http_load.in_processes(kind, args.clients, args.url, size, body, leave, args.duration)
    if kind == "burst":
        return asyncio.run(http_load.burst(args.url, int(size), body, leave))
    return asyncio.run(http_load.poisson(args.url, size, args.duration, body, leave))


def table(rows: list[dict]) -> str:
    head = ("| load | served | refused | errors | TTFB p50 / p95 / p99 ms | from the client's start p50 / p95 ms "
            "| client's own wait p95 ms | gap p95 / max ms | late gaps "
            "| RTF p50 / p95 | audio s per s | server p50 / p95 ms: intake, line, TTFP, hand-off |"
            "\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [f"| {r['load']} | {r['served']}/{r['requests']} | {r['refused']} | {r['errors']} "
             f"| {f(r['ttfb_p50_ms'])} / {f(r['ttfb_p95_ms'])} / {f(r['ttfb_p99_ms'])} "
             f"| {f(r['from_start_p50_ms'])} / {f(r['from_start_p95_ms'])} | {f(r['queued_p95_ms'])} "
             f"| {f(r['gap_p95_ms'])} / {f(r['gap_max_ms'])} | {r['late_gaps']} "
             f"| {f(r['rtf_p50'], 3)} / {f(r['rtf_p95'], 3)} | {f(r['audio_s_per_s'], 1)} "
             f"| {_split(r, f)} |" for r in rows]
    return "\n".join([head, *lines])


def _split(row: dict, f) -> str:
    """Where the first audio's time went on the server: its intake (body, checks, preparation),
    the line, the GPU up to the first patch, the hand-over to the socket; the rest of the client's
    TTFB is HTTP around the handler."""
    parts = ("intake", "queue", "ttfp", "handoff")
    return ", ".join(f"{f(row[f'server_{k}_p50_ms'])} / {f(row[f'server_{k}_p95_ms'])}" for k in parts)


def run_loads(args, pid: int | None) -> list[dict]:
    rows = []
    for label, make in scenarios(args):
        for _ in range(args.rounds if label.startswith("burst") else 1):
            results, wall = make()
            row = {"load": label, **http_load.summarize(results, wall, SAMPLE_RATE), **server_memory(pid)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an app already running (default: start one)")
    ap.add_argument("--checkpoint", help="a checkpoint folder (default: random published weights)")
    ap.add_argument("--config", default=str(ROOT / "bench" / "voxcpm2_config.json"))
    ap.add_argument("--app-args", default="", help="extra app.py arguments (default: none, the app as shipped)")
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32, 64, 128])
    ap.add_argument("--rounds", type=int, default=2, help="rounds per burst")
    ap.add_argument("--rates", type=float, nargs="*", default=[20.0], help="Poisson arrivals per second")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of Poisson arrivals")
    ap.add_argument("--leave", type=float, default=0.2, help="share of Poisson clients that leave early")
    ap.add_argument("--leave-after", type=float, default=1.0, help="seconds after first audio they leave")
    ap.add_argument("--patches", type=int, default=80)
    ap.add_argument("--timesteps", type=int, default=10)
    ap.add_argument("--clients", type=int, default=1,
                    help="client processes sharing each load (bench/http_load.py in_processes; default: one)")
    ap.add_argument("--floor", action="store_true",
                    help="the same loads against bench/floor.py, a server that answers at once: what the client "
                         "processes and HTTP take before any server work")
    ap.add_argument("--out", default=None, help="folder for serve.json, serve.md and the app's log")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="voxcpm_serve_"))
    out.mkdir(parents=True, exist_ok=True)
    app = None
    if args.floor:
        port = free_port()
        args.url = f"http://127.0.0.1:{port}"
        app = start_floor(port, args.app_args.split(), out / "floor.log")
    elif not args.url:
        checkpoint = args.checkpoint or str(write_random_checkpoint(Path(args.config), out / "checkpoint"))
        port = free_port()
        args.url = f"http://127.0.0.1:{port}"
        app = start_app(checkpoint, port, args.app_args.split(), out / "app.log")
    try:
        wait_ready(args.url, app)
        before = server_memory(app.pid if app else None)
        rows = run_loads(args, app.pid if app else None)
        after = server_memory(app.pid if app else None)
    finally:
        if app is not None:
            app.terminate()
            app.wait(30)
    report = table(rows) + f"\n\nserver before: {before}; after: {after}\n"
    print(report)
    (out / "serve.md").write_text(report)
    (out / "serve.json").write_text(json.dumps({"rows": rows, "before": before, "after": after}, indent=1))


if __name__ == "__main__":
    main()
