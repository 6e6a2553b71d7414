"""app.py: where it binds, and a real start with --random-weights (banner, phases, player, stream,
and its temporary checkpoint removed at exit)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import app as demo_app
from startup import StartupError

from ..support.app_helpers import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, env, host, port", [
    ([], {}, "127.0.0.1", 7860),
    (["--host", "0.0.0.0", "--port", "9000"], {}, "0.0.0.0", 9000),
    ([], {"GRADIO_SERVER_NAME": "10.0.0.5", "GRADIO_SERVER_PORT": "8080"}, "10.0.0.5", 8080),
    ([], {"SPACE_ID": "someone/voxcpm2-demo"}, "0.0.0.0", 7860),
    (["--host", "127.0.0.1"], {"SPACE_ID": "someone/voxcpm2-demo"}, "127.0.0.1", 7860),
])
def test_binding(monkeypatch, argv, env, host, port):
    for name in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = demo_app.parse_args(argv)
    assert (demo_app.resolve_host(args), demo_app.resolve_port(args)) == (host, port)


def test_token_comes_from_flag_or_env_and_must_be_url_safe(monkeypatch):
    monkeypatch.delenv("VOXCPM_TOKEN", raising=False)
    assert demo_app.resolve_token(demo_app.parse_args([])) is None
    assert demo_app.resolve_token(demo_app.parse_args(["--token", "flag-token-1"])) == "flag-token-1"
    monkeypatch.setenv("VOXCPM_TOKEN", "env-token-12")
    assert demo_app.resolve_token(demo_app.parse_args([])) == "env-token-12"
    for bad in ("short", "has space in it", "semi;colon-token"):
        with pytest.raises(StartupError):
            demo_app.resolve_token(demo_app.parse_args(["--token", bad]))


def test_random_weights_start_requires_its_token_and_serves_page_banner_and_stream(tmp_path):
    port, token = free_port(), "cli-test-token-123"
    env = {k: v for k, v in os.environ.items() if k not in ("GRADIO_SERVER_NAME", "SPACE_ID")}
    env["VOXCPM_TOKEN"] = token
    env["TMPDIR"] = str(tmp_path)  # where the random checkpoint goes, to see that it is removed
    proc = subprocess.Popen([sys.executable, "app.py", "--random-weights", "--port", str(port), "--device", "cpu",
                             "--max-text-chars", "50"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)  # the health probe needs no token
        assert httpx.get(f"{base}/", timeout=30).status_code == 401
        assert httpx.post(f"{base}/voxcpm/stream", json={"text": "Hello."}, timeout=30).status_code == 401
        with httpx.Client(base_url=base, timeout=60, headers={"X-VoxCPM-Token": token}) as client:
            assert "Random weights" in client.get("/config").text
            assert "voxcpm/static/app.js?" in client.get("/").text
            assert "javascript" in client.get("/voxcpm/static/player/pcm-worklet.js").headers["content-type"]
            too_long = client.post("/voxcpm/stream", json={"text": "x" * 51})
            assert too_long.status_code == 400 and "the limit is 50" in too_long.json()["error"]
            response = client.post("/voxcpm/stream", json={"text": "Hello world.", "seed": 1, "max_len": 3})
            assert response.status_code == 200 and len(response.content) > 0
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "mode=design text_chars=12" in out and "outcome=ok" in out  # the per-request log line
    assert token not in out  # neither the banner nor the logs print it
    assert f"Loading VoxCPM2: the page at http://127.0.0.1:{port} shows" in out and "VoxCPM2 demo ready at" in out
    assert "demo at" not in out.split("VoxCPM2 demo ready at")[0]  # no claim before the load succeeded
    assert re.search(r"INFO voxcpm.app: loading /\S+voxcpm2-random-\S+ on cpu in float32", out)
    assert "downloading" not in out and "Hugging Face cache" not in out  # a folder is not downloaded
    assert re.search(r"loading weights: \d+\.\d s", out)
    assert len(re.findall(r"warm-?up.*\d+\.\d s", out)) == 1, out  # one warm-up figure
    assert not list(tmp_path.glob("voxcpm2-random-*"))  # removed at exit
