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
import startup
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


def test_the_limits_given_on_the_command_line_are_the_apps_limits():
    args = demo_app.parse_args(["--max-streams", "7", "--max-queue", "3", "--prepare-threads", "2",
                                "--normalize-processes", "0", "--max-text-chars", "900", "--max-audio-seconds", "12",
                                "--max-output-seconds", "45"])
    limits = demo_app.app_settings(args, "127.0.0.1").limits
    assert (limits.max_streams, limits.max_queue, limits.prepare_threads, limits.normalize_processes,
            limits.max_text_chars, limits.max_audio_seconds, limits.max_output_seconds) == (7, 3, 2, 0, 900, 12.0, 45.0)


def test_token_comes_from_flag_or_env_and_must_be_url_safe(monkeypatch):
    monkeypatch.delenv("VOXCPM_TOKEN", raising=False)
    assert demo_app.resolve_token(demo_app.parse_args([])) is None
    assert demo_app.resolve_token(demo_app.parse_args(["--token", "flag-token-1"])) == "flag-token-1"
    monkeypatch.setenv("VOXCPM_TOKEN", "env-token-12")
    assert demo_app.resolve_token(demo_app.parse_args([])) == "env-token-12"
    for bad in ("short", "has space in it", "semi;colon-token"):
        with pytest.raises(StartupError):
            demo_app.resolve_token(demo_app.parse_args(["--token", bad]))


def test_an_empty_or_blank_token_is_no_token(monkeypatch):
    # Issue 45: from the environment it is unset (as tools often leave it); typed as --token, a mistake.
    for blank in ("", "  "):
        monkeypatch.setenv("VOXCPM_TOKEN", blank)
        assert demo_app.resolve_token(demo_app.parse_args([])) is None
        with pytest.raises(StartupError, match="--token is empty") as refused:
            demo_app.resolve_token(demo_app.parse_args(["--token", blank]))
        assert 'To fix: set a token: --token "$(openssl rand -hex 16)"' in str(refused.value)


@pytest.mark.parametrize("host, argv, env, refused", [
    ("127.0.0.1", [], {}, False),  # loopback needs no token
    ("0.0.0.0", [], {}, True),
    ("10.0.0.5", [], {}, True),
    ("0.0.0.0", ["--open"], {}, False),
    ("0.0.0.0", [], {"VOXCPM_OPEN": "1"}, False),
    ("0.0.0.0", [], {"VOXCPM_OPEN": "0"}, True),
    ("0.0.0.0", [], {"SPACE_ID": "someone/voxcpm2-demo"}, False),  # a Space's visibility is its owner's choice
])
def test_listening_beyond_loopback_needs_a_token_or_opening_on_purpose(monkeypatch, host, argv, env, refused):
    for name in ("VOXCPM_OPEN", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = demo_app.parse_args(argv)
    demo_app.check_exposure(host, "a-real-token-1", args)  # a token always may
    if not refused:
        demo_app.check_exposure(host, None, args)
        return
    with pytest.raises(StartupError, match=f"listen on {host} with no token") as no_token:
        demo_app.check_exposure(host, None, args)
    assert "VOXCPM_TOKEN" in str(no_token.value) and "--open (VOXCPM_OPEN=1)" in str(no_token.value)


@pytest.mark.parametrize("argv, env, says", [
    (["--host", "0.0.0.0", "--token", ""], {}, "--token is empty"),
    (["--host", "0.0.0.0"], {"VOXCPM_TOKEN": "  "}, "listen on 0.0.0.0 with no token"),
    (["--host", "0.0.0.0"], {"VOXCPM_TOKEN": ""}, "listen on 0.0.0.0 with no token"),
    (["--host", "0.0.0.0"], {"VOXCPM_OPEN": "true"}, "VOXCPM_OPEN is 'true'"),
    (["--token", ""], {}, "--token is empty"),  # on loopback too: an empty token is a mistake, not a choice
])
def test_app_py_refuses_an_empty_token_before_it_listens(argv, env, says):
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k not in ("GRADIO_SERVER_NAME", "SPACE_ID", "VOXCPM_TOKEN",
                                                             "VOXCPM_OPEN")}
    proc = subprocess.run([sys.executable, "app.py", *argv, "--port", str(port), "--random-weights", "--device", "cpu"],
                          cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Loading VoxCPM2" not in proc.stdout, proc.stdout + proc.stderr
    said = proc.stderr.strip().splitlines()
    assert len(said) == 2 and said[0].startswith("app.py: error: ") and says in said[0], said
    assert said[1].startswith("To fix: ") and '--token "$(openssl rand -hex 16)"' in said[1], said


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


@pytest.mark.parametrize("flag,name", [("--loop", "uvloop"), ("--http", "httptools")])
def test_an_event_loop_or_parser_named_but_not_installed_is_refused_before_the_port_is_taken(monkeypatch, flag, name):
    monkeypatch.setitem(sys.modules, name, None)  # as on a machine without it: importlib finds no spec
    args = demo_app.parse_args([flag, name])
    with pytest.raises(StartupError) as refused:
        startup.check_server(args)
    assert f"{flag} {name}: {name} is not installed" in str(refused.value)
    assert f"pip install {name}" in str(refused.value)
    startup.check_server(demo_app.parse_args([]))  # auto: taken when there, never refused


def test_an_unknown_event_loop_or_parser_is_refused_with_the_choices(capsys):
    for argv, choices in ((["--loop", "trio"], ("auto", "uvloop", "asyncio")), (["--http", "h2"], ("auto", "httptools", "h11"))):
        with pytest.raises(SystemExit):
            demo_app.parse_args(argv)
        said = capsys.readouterr().err
        assert f"argument {argv[0]}: invalid choice: '{argv[1]}'" in said and all(c in said for c in choices), said
