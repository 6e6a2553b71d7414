#!/usr/bin/env python3
"""The served path: the whole app (app.py) over HTTP under load, as visitors of a hosted demo get it.

    python -m bench.serve --out DIR                          # published architecture, random weights
    python -m bench.serve --checkpoint DIR --out DIR         # a real checkpoint folder
    python -m bench.serve --url http://127.0.0.1:7860 ...    # an app already running
    python -m bench.serve --against "--prepare-threads 2"    # two apps on one GPU, loads in turns
    python -m bench.serve --apart                            # the app (A), the engine apart (B) and on a thread (C)

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


def launch(cmd: list[str], log: Path, root: Path = ROOT) -> subprocess.Popen:
    """A server process run from `root`, with `root` first on its path, its output to `log`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=root, env=env)


def start_app(checkpoint: str, port: int, extra: list[str], log: Path, root: Path = ROOT) -> subprocess.Popen:
    """app.py of `root` (default this checkout; another, to measure an earlier version beside it)."""
    cmd = [sys.executable, str(root / "app.py"), "--model", checkpoint, "--host", "127.0.0.1",
           "--port", str(port), *extra]
    print("starting:", " ".join(cmd), flush=True)
    return launch(cmd, log, root)


def start_apart(checkpoint: str, port: int, log: Path, thread: bool = False,
                rows: str | None = None) -> subprocess.Popen:
    """bench/lab/engine_apart.py: the engine in a child process (or on a thread: `thread`), a bare
    stream route in front; `rows`: its --max-streams (default the app's default)."""
    cmd = [sys.executable, "-m", "bench.lab.engine_apart", "--checkpoint", checkpoint, "--port", str(port),
           *(["--thread"] if thread else []), *(["--max-streams", rows] if rows else [])]
    print("starting the engine apart:", " ".join(cmd), flush=True)
    return launch(cmd, log)


def start_floor(port: int, extra: list[str], log: Path) -> subprocess.Popen:
    """bench/floor.py's server under uvicorn, on the loop and parser the app would take (`extra`:
    the app's --loop and --http, if given)."""
    options = dict(zip(extra[::2], extra[1::2]))
    cmd = [sys.executable, "-m", "uvicorn", "bench.floor:app", "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning", "--loop", options.get("--loop", "auto"), "--http", options.get("--http", "auto")]
    print("starting the floor:", " ".join(cmd), flush=True)
    return launch(cmd, log)


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


def table(rows: list[dict], labelled: bool = False) -> str:
    """labelled: each load named by its app's letter (a run with --against)."""
    head = ("| load | served | refused | errors | TTFB p50 / p95 / p99 ms | from the client's start p50 / p95 ms "
            "| client's own wait p95 ms | gap p95 / max ms | late gaps "
            "| RTF p50 / p95 | audio s per s | server p50 / p95 ms: intake, line, TTFP, hand-off |"
            "\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    lines = [f"| {r['app'] + ': ' if labelled else ''}{r['load']} | {r['served']}/{r['requests']} | {r['refused']} | {r['errors']} "
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
    ap.add_argument("--apart", action="store_true",
                    help="beside the app (A), bench/lab/engine_apart.py twice: B, the engine in a process of its own "
                         "behind a bare stream route (the best a split could give), and C, the same with the engine "
                         "on a thread of the front's process; loads in turns (default order ABCCBA)")
    ap.add_argument("--out", default=None, help="folder for serve.json, serve.md and the app's log")
    ap.add_argument("--against", default=None, metavar="APP_ARGS",
                    help="a second app (B) beside the first (A), with these app.py arguments ('' for none), "
                         "measured in turns with it on the same GPU")
    ap.add_argument("--against-root", default=None, metavar="DIR",
                    help="B's checkout (e.g. a git worktree of the commit before a change; default: this one)")
    ap.add_argument("--order", default=None, help="the turns of A and B (and C), each running every load "
                                                   "(default: ABBA; ABCCBA with --apart)")
    args = ap.parse_args(argv)
    if (args.against is not None or args.apart) and (args.url or args.floor):
        ap.error("--against and --apart start both servers: leave out --url and --floor")
    if args.against is not None and args.apart:
        ap.error("--against and --apart both name B: give one")
    args.order = args.order or ("ABCCBA" if args.apart else "ABBA")
    if set(args.order) - set("ABC" if args.apart else "AB"):
        ap.error(f"--order is made of A and B{' and C' if args.apart else ''}, not {args.order!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="voxcpm_serve_"))
    out.mkdir(parents=True, exist_ok=True)
    apps = start_servers(args, out)
    try:
        for url, proc in apps.values():
            wait_ready(url, proc)
        before = {name: server_memory(proc.pid if proc else None) for name, (_, proc) in apps.items()}
        rows = []
        for name in args.order if len(apps) > 1 else "A":
            args.url, proc = apps[name]
            rows += [{**row, "app": name} for row in run_loads(args, proc.pid if proc else None)]
        after = {name: server_memory(proc.pid if proc else None) for name, (_, proc) in apps.items()}
    finally:
        for _, proc in apps.values():
            if proc is not None:
                proc.terminate()
        for _, proc in apps.values():
            if proc is not None:
                proc.wait(30)
    report = table(rows, labelled=len(apps) > 1) + "".join(
        f"\n\nserver {name} before: {before[name]}; after: {after[name]}" for name in apps) + "\n"
    if args.apart:
        report += (f"\nA: app.py {args.app_args}\nB: bench/lab/engine_apart.py (the engine in a process of its own)"
                   "\nC: bench/lab/engine_apart.py --thread (the same, its engine on a thread of the front)\n")
    elif len(apps) > 1:
        report += f"\nA: app.py {args.app_args}\nB: app.py {args.against}{' of ' + args.against_root if args.against_root else ''}\n"
    print(report)
    (out / "serve.md").write_text(report)
    (out / "serve.json").write_text(json.dumps({"rows": rows, "before": before, "after": after}, indent=1))


def start_servers(args, out: Path) -> dict[str, tuple[str, subprocess.Popen | None]]:
    """{"A": (url, process or None for an app already running)}, and "B" with --against: a second
    app on the same GPU, started beside the first, so that the two are measured in one machine start
    with their loads alternating (--order), the way two versions are best told apart."""
    if args.floor:
        port = free_port()
        return {"A": (f"http://127.0.0.1:{port}", start_floor(port, args.app_args.split(), out / "floor.log"))}
    if args.url:
        return {"A": (args.url, None)}
    checkpoint = args.checkpoint or str(write_random_checkpoint(Path(args.config), out / "checkpoint"))
    wanted = {"A": (args.app_args, ROOT)}
    if args.against is not None:
        wanted["B"] = (args.against, Path(args.against_root) if args.against_root else ROOT)
    apps = {}
    for name, (extra, root) in wanted.items():
        port = free_port()
        log = out / ("app.log" if len(wanted) == 1 and not args.apart else f"app-{name}.log")
        apps[name] = (f"http://127.0.0.1:{port}", start_app(checkpoint, port, extra.split(), log, root))
    if args.apart:
        words = args.app_args.split()
        rows = dict(zip(words, words[1:])).get("--max-streams")  # the app's rows, if it was given them
        for name, thread in (("B", False), ("C", True)):
            port = free_port()
            log = out / f"app-{name}.log"
            apps[name] = (f"http://127.0.0.1:{port}", start_apart(checkpoint, port, log, thread, rows))
    return apps


if __name__ == "__main__":
    main()
