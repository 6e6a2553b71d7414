"""deploy/haproxy.cfg as shipped, in front of two real replicas (app.py --random-weights, each its own
process) on loopback: a page session's upload, stream, job status and offline render reach one
replica through the cookie; a replica killed mid-stream takes no new requests and the other serves
them; each replica's /metrics counts only what it served. The log of who served what is printed and
kept in tests/artifacts/replicas-haproxy.log."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ..support.app_helpers import free_port, wait_healthy, wait_until
from ..unit.test_deploy_files_agree_and_lint import healthcheck_command

ROOT = Path(__file__).resolve().parents[2]
HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
TOKEN = "replica-test-token-1"  # one token opens every replica (docs/deploy.md)
VOICE = ROOT / "assets" / "voices" / "guide_en.wav"
DESIGN = {"text": "Hello there.", "seed": 3, "min_len": 3, "max_len": 3}
CLONING = {**DESIGN, "mode": "cloning"}

pytestmark = pytest.mark.skipif(HAPROXY is None, reason="Debian's haproxy is not installed "
                                "(apt-get install haproxy; .ci/run installs it)")


def haproxy_config(port: int, servers: dict[str, int], socket_path: Path) -> str:
    """deploy/haproxy.cfg with the listening port, the server addresses and the runtime socket
    replaced by loopback ones; everything else (timeouts, cookie, checks, redispatch) as shipped."""
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    text, binds = re.subn(r"(?m)^(\s*bind )\S+", lambda m: f"{m[1]}127.0.0.1:{port}", text)
    text, sockets = re.subn(r"(?m)^(\s*stats socket )\S+", lambda m: f"{m[1]}{socket_path}", text)
    lines = [line for line in text.splitlines() if not re.match(r"\s*server ", line)]
    assert binds == 1 and sockets == 1 and len(lines) == len(text.splitlines()) - 2, "deploy/haproxy.cfg changed shape"
    lines += [f"    server {name} 127.0.0.1:{p} cookie {name}" for name, p in servers.items()]
    return "\n".join(lines) + "\n"


def runtime(socket_path: Path, command: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(socket_path))
        s.sendall(command.encode() + b"\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out.decode()


def server_stats(socket_path: Path) -> dict[str, dict]:
    """HAProxy's view of each replica (status UP/DOWN, the last check's status and HTTP code), from
    its runtime API's `show stat`."""
    rows = runtime(socket_path, "show stat").splitlines()
    header = rows[0].lstrip("# ").split(",")
    stats = {}
    for row in rows[1:]:
        cells = dict(zip(header, row.split(",")))
        if cells.get("pxname") == "voxcpm" and cells.get("svname") not in ("BACKEND", "FRONTEND", None):
            stats[cells["svname"]] = cells
    return stats


def server_states(socket_path: Path) -> dict[str, str]:
    return {name: cells["status"] for name, cells in server_stats(socket_path).items()}


def start_replica(port: int, tmp: Path, name: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("GRADIO_SERVER_NAME", "SPACE_ID", "VOXCPM_TOKEN")}
    env["TMPDIR"] = str(tmp)
    with open(tmp / f"{name}.log", "a") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "app.py", "--random-weights", "--device", "cpu", "--port",
                                 str(port), "--token", TOKEN, "--data-dir", str(tmp / name), "--asr-model", "none"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def requests_counted(base: str) -> int:
    """voxcpm_requests_total summed over modes and outcomes, as that replica's /metrics says."""
    text = httpx.get(f"{base}/metrics", headers={"X-VoxCPM-Token": TOKEN}, timeout=10).text
    return round(sum(float(m[1]) for m in re.finditer(r"(?m)^voxcpm_requests_total\{[^}]*\} (\S+)$", text)))


def owner(replicas: dict[str, str], job_id: str) -> str:
    """The one replica that knows this job: jobs live in the process that ran them."""
    found = [name for name, base in replicas.items()
             if httpx.get(f"{base}/voxcpm/jobs/{job_id}", headers={"X-VoxCPM-Token": TOKEN}, timeout=10).status_code == 200]
    assert len(found) == 1, f"job {job_id} known to {found}"
    return found[0]


@pytest.fixture
def cluster(tmp_path):
    ports = {"r1": free_port(), "r2": free_port()}
    procs = {name: start_replica(port, tmp_path, name) for name, port in ports.items()}
    balancer = None
    try:
        for name, proc in procs.items():
            try:
                wait_healthy(f"http://127.0.0.1:{ports[name]}", proc, timeout=300)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}\n{(tmp_path / f'{name}.log').read_text()}") from None
        lb_port, sock = free_port(), tmp_path / "haproxy.sock"
        config = tmp_path / "haproxy.cfg"
        config.write_text(haproxy_config(lb_port, ports, sock))
        check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        with open(tmp_path / "haproxy.log", "w") as balancer_log:  # HAProxy logs each request to stdout
            balancer = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=balancer_log,
                                        stderr=subprocess.STDOUT)
        wait_until(lambda: sock.exists() and server_states(sock) == {"r1": "UP", "r2": "UP"}, timeout=30, interval=0.2)
        yield dict(lb=f"http://127.0.0.1:{lb_port}", socket=sock, procs=procs, log_dir=tmp_path,
                   replicas={name: f"http://127.0.0.1:{port}" for name, port in ports.items()})
    finally:
        for proc in [*procs.values(), balancer]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def page_session(lb: str) -> httpx.Client:
    """A client that keeps cookies, as a browser does: the balancer's VOXCPM_REPLICA among them."""
    return httpx.Client(base_url=lb, timeout=120, headers={"X-VoxCPM-Token": TOKEN})


def alive(proc: subprocess.Popen, log: Path) -> bool:
    """True while the replica runs; its log in the failure once it has exited."""
    if proc.poll() is not None:
        raise AssertionError(f"the replica exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
    return True


def container_healthy(base: str) -> bool:
    """The image's HEALTHCHECK command (python in the image is this one) run against a replica."""
    command = [sys.executable if part == "python" else part for part in healthcheck_command()]
    env = {**os.environ, "PORT": base.rsplit(":", 1)[1]}
    return subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0


def page_round(session: httpx.Client, replicas: dict[str, str]) -> tuple[str, str]:
    """What the page does in one session: open, upload a clip, stream with it, poll the job, fetch
    the offline render. (The replica its cookie names, a line for the log.)"""
    assert session.get("/").status_code == 200  # the page: the balancer's cookie is set here
    replica = session.cookies.get("VOXCPM_REPLICA")
    assert replica in replicas, f"no replica cookie: {dict(session.cookies)}"
    clip = session.post("/voxcpm/upload", content=VOICE.read_bytes())
    assert clip.status_code == 200, clip.text
    clip_id = clip.json()["id"]
    stream = session.post("/voxcpm/stream", json={**CLONING, "reference_id": clip_id})
    assert stream.status_code == 200 and len(stream.content) > 0, stream.text
    job_id = stream.headers["x-request-id"]
    status = session.get(f"/voxcpm/jobs/{job_id}")
    assert status.status_code == 200 and status.json()["outcome"] == "ok", status.text
    render = session.get(f"/voxcpm/jobs/{job_id}/offline.wav")
    assert render.status_code == 200 and render.headers["content-type"] == "audio/wav"
    # The clip id, the job and its render exist only where the cookie points.
    assert owner(replicas, job_id) == replica
    other = next(name for name in replicas if name != replica)
    elsewhere = httpx.post(f"{replicas[other]}/voxcpm/stream", headers={"X-VoxCPM-Token": TOKEN},
                           json={**CLONING, "reference_id": clip_id}, timeout=60)
    assert elsewhere.status_code in (400, 404), elsewhere.status_code
    return replica, (f"upload {clip_id[:8]}, stream job {job_id}, job status, offline.wav ({len(render.content)} "
                     f"bytes) all served by {replica}; {other} does not know the clip ({elsewhere.status_code})")


def kill_mid_stream(session: httpx.Client, proc: subprocess.Popen) -> str:
    """A long stream, and its replica SIGKILLed once the first audio arrived: the body must end short."""
    long_take = {"text": "A long sentence to keep streaming for a while. " * 4, "seed": 1, "min_len": 400, "max_len": 400}
    with session.stream("POST", "/voxcpm/stream", json=long_take) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()
        first = next(chunks)
        assert first
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        try:
            for _ in chunks:
                pass
        except httpx.HTTPError as exc:  # the replica that made it is gone
            return f"mid-stream after {len(first)} bytes: the client saw {type(exc).__name__}"
    raise AssertionError("the stream of a killed replica ended as if complete")


def test_sessions_stick_to_one_replica_and_survive_a_killed_one(cluster):
    lb, replicas, sock, log = cluster["lb"], cluster["replicas"], cluster["socket"], []
    served = {"r1": 0, "r2": 0}  # streamed requests each replica ran, as the test sees them

    def say(line: str):
        log.append(line)
        print(line)

    # Sessions open until both replicas hold one; each does the page's whole round on its replica.
    sessions = {}
    for n in range(6):
        session = page_session(lb)
        replica, line = page_round(session, replicas)
        served[replica] += 1
        say(f"session {n + 1} (cookie VOXCPM_REPLICA={replica}): {line}")
        sessions.setdefault(replica, session)
        if len(sessions) == 2:
            break
    assert len(sessions) == 2, "every session went to one replica: leastconn should spread them"

    # Each replica counted its own streams, none of the other's.
    counted = {name: requests_counted(base) for name, base in replicas.items()}
    say(f"/metrics voxcpm_requests_total: {counted} (streams sent: {served})")
    assert counted == served

    victim, survivor = "r1", "r2"
    doomed = sessions[victim]
    say(f"killed {victim} (SIGKILL) " + kill_mid_stream(doomed, cluster["procs"][victim]))

    # The same session's next requests go to r2 (redispatched, the cookie rewritten), before and
    # after HAProxy's checks mark r1 DOWN; new sessions go to r2 only.
    for n in range(3):
        again = doomed.post("/voxcpm/stream", json=DESIGN)
        assert again.status_code == 200, again.text
        assert owner({survivor: replicas[survivor]}, again.headers["x-request-id"]) == survivor
        served[survivor] += 1
    assert doomed.cookies.get("VOXCPM_REPLICA") == survivor
    say(f"the killed replica's session: 3 more streams, all served by {survivor}; its cookie now names {survivor}")
    wait_until(lambda: server_states(sock).get(victim, "").startswith("DOWN"), timeout=30, interval=0.2)
    say(f"HAProxy's checks on /ready: {server_states(sock)}")
    for n in range(3):
        fresh = page_session(lb)
        response = fresh.post("/voxcpm/stream", json=DESIGN)
        assert response.status_code == 200 and fresh.cookies.get("VOXCPM_REPLICA") == survivor
        served[survivor] += 1
    say(f"3 new sessions after the kill: all served by {survivor}")
    counted = requests_counted(replicas[survivor])
    say(f"{survivor}'s /metrics voxcpm_requests_total: {counted} (streams it served: {served[survivor]})")
    assert counted == served[survivor]

    # r1 restarted on its port: while it loads, /ready answers 503. HAProxy keeps it out for new
    # sessions, but a session whose cookie names it is still sent there (`option persist`: drained,
    # not redispatched) and gets the loading answer; once it is ready, new sessions reach it again.
    cluster["procs"][victim] = start_replica(int(replicas[victim].rsplit(":", 1)[1]), cluster["log_dir"], victim)
    restarted, restart_log = cluster["procs"][victim], cluster["log_dir"] / f"{victim}.log"
    wait_until(lambda: alive(restarted, restart_log) and server_stats(sock)[victim]["check_code"] == "503",
               timeout=120, interval=0.2)
    say(f"{victim} restarted and loading: HAProxy's check of /ready got 503 "
        f"({server_stats(sock)[victim]['check_status']}), state {server_states(sock)[victim]}")
    assert not container_healthy(replicas[victim]) and container_healthy(replicas[survivor])
    for n in range(3):
        fresh = page_session(lb)
        assert fresh.get("/").status_code == 200 and fresh.cookies.get("VOXCPM_REPLICA") == survivor
    stale = page_session(lb)
    stale.cookies.set("VOXCPM_REPLICA", victim)
    loading = stale.post("/voxcpm/stream", json=DESIGN)
    assert loading.status_code == 503 and "retry-after" in loading.headers, loading.status_code
    say(f"while {victim} loads: the image's HEALTHCHECK fails on {victim}, passes on {survivor}; 3 new sessions "
        f"served by {survivor}; a session whose cookie names {victim} reaches {victim} and gets its 503 "
        f"(Retry-After {loading.headers['retry-after']})")
    wait_until(lambda: alive(restarted, restart_log) and server_states(sock)[victim] == "UP", timeout=300, interval=0.5)
    landed = []
    for n in range(4):
        fresh = page_session(lb)
        assert fresh.get("/").status_code == 200
        landed.append(fresh.cookies.get("VOXCPM_REPLICA"))
        if landed[-1] == victim:
            break
    assert landed[-1] == victim, landed
    say(f"{victim} ready, HAProxy's checks bring it back UP: new sessions went to {landed}")

    balancer_lines = [line for line in (cluster["log_dir"] / "haproxy.log").read_text().splitlines() if "voxcpm/" in line]
    # The 503 came from the loading replica itself, not from HAProxy finding no server.
    assert any(f"voxcpm/{victim} " in line and " 503 " in line for line in balancer_lines)
    artifacts = ROOT / "tests" / "artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "replicas-haproxy.log").write_text("\n".join(log + ["", "HAProxy's log:"] + balancer_lines) + "\n")
