"""The README's Quick start as a newcomer copies it: on a CPU-only machine the CPU
build of torch goes in before requirements.txt (else pip pulls the 2.7 GB CUDA build), named as the
pin and .ci/run name it; the tests' script is not run in the app's environment, and its test
command is the one CI runs; and the CPU
block's start command, run as written (the port from GRADIO_SERVER_PORT, which it honours), serves
until GET /ready answers 200. Installing is not repeated here: this environment is what .ci/run
installed, from the same files. And "Use it"'s gradio_client block, run as written against the
app served here (only its address changed)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
from packaging.requirements import Requirement

from ..support.app_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]


def quick_start_blocks() -> list[list[str]]:
    """The bash blocks of the Quick start section, each as its command lines (comments cut)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
    return [[line.split("  #")[0].strip() for line in block.splitlines() if line.strip()] for block in blocks]


def torch_pin() -> Requirement:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return next(Requirement(line.split("#")[0]) for line in lines if line.startswith("torch"))


def test_the_cpu_block_installs_the_cpu_torch_first_and_the_pinned_one():
    gpu, cpu = quick_start_blocks()[:2]
    assert any("pip install -r requirements.txt" in line for line in gpu) and not any("torch" in line for line in gpu)
    torch_line = next(i for i, line in enumerate(cpu) if line.startswith("pip install torch=="))
    rest_line = next(i for i, line in enumerate(cpu) if "pip install -r requirements.txt" in line)
    assert torch_line < rest_line
    version = re.search(r"torch==(\S+)", cpu[torch_line]).group(1)
    assert "download.pytorch.org/whl/cpu" in cpu[torch_line]
    assert torch_pin().specifier.contains(version)
    assert f'"torch=={version}+cpu"' in (ROOT / ".ci" / "run").read_text()  # what the tests run


def test_the_tests_script_runs_only_in_an_environment_of_its_own():
    for block in quick_start_blocks():
        for line in block:
            if ".ci/run" in line:
                assert ". .venv-test/bin/activate" in line and "venv .venv-test" in line, line
    assert not any(".ci/run" in line for block in quick_start_blocks()[:2] for line in block)


def test_the_test_command_is_the_one_ci_runs():
    lines = [line for block in quick_start_blocks() for line in block]
    assert any(".ci/run" in line for line in lines)
    command = next(line for line in lines if line.startswith("bash tests/run"))
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any(line == command or line.startswith(command + " ||") for line in ci_lines), command


def test_the_cpu_blocks_start_command_serves_as_written(tmp_path):
    command = quick_start_blocks()[1][-1]
    argv = shlex.split(command)
    assert argv[:2] == ["python", "app.py"]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GRADIO_SERVER_NAME", "SPACE_ID", "VOXCPM_TOKEN")}
    env.update(GRADIO_SERVER_PORT=str(port), TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, *argv[1:]], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline, ready = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert ready is not None and ready.status_code == 200, "the README's start command did not get ready"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "VoxCPM2 demo ready at" in out


def use_it_block(language: str, holding: str) -> str:
    """The code block of "Use it" in `language` that holds `holding`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Use it", 1)[1].split("\n## ", 1)[0]
    return next(b for b in re.findall(rf"^```{language}\n(.*?)^```", section, re.S | re.M) if holding in b)


def test_the_gradio_client_block_runs_as_written(serve_app, tmp_path):
    app = serve_app()
    code = use_it_block("python", "gradio_client").replace("http://127.0.0.1:7860", app.url)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # what gradio_client downloads goes there
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line.split() for line in done.stdout.splitlines() if not line.startswith("Loaded as API")]
    wav, seed = printed[0][:2]
    assert wav.endswith(".wav") and Path(wav).is_file() and seed == "7"
    assert [line[0] for line in printed[1:]] == [*map(str, range(len(printed) - 2)), "None"]  # patches, then the end


def anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").rglob("README.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif fragment:
                headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.M)
                if fragment not in {anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {target}")
    assert broken == []
