"""Issue 9, item 1: Gradio's queue API must not reach server files. Every handler (fn_index), the
named endpoints of Gradio's API among them (issue 48), gets FileData naming a secret outside
Gradio's upload folder, a missing file, symlinks, /dev/zero and a 300 MiB file, with and without
the access token: nothing is read or copied, existing and missing files get the same answer (no
existence oracle), and the server answers health checks during and after. A clip really uploaded
through the page's upload route still works. Traffic: 127.0.0.1 only."""
from __future__ import annotations

import io
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from gradio.processing_utils import hash_file
from gradio.utils import get_upload_folder

from ui import Settings
from ui.page.examples import ASSETS

from ..support.app_helpers import serve
from ..support.gradio_queue import call, dependencies, file_data, outputs

TOKEN = "attack-token-0123456789"
MARK = b"voxcpm-secret-marker"


@pytest.fixture(scope="module", params=[None, TOKEN], ids=["no-token", "token"])
def app(serve_app, request):
    running = serve_app(token=request.param)
    running.token = request.param
    yield running
    running.stop()


@pytest.fixture()
def client(app):
    headers = {"X-VoxCPM-Token": app.token} if app.token else {}
    with httpx.Client(base_url=app.url, timeout=20, headers=headers) as c:
        yield c


@pytest.fixture()
def secret(tmp_path) -> Path:
    """A readable WAV outside the upload folder with a name nothing else has, so a copy of it in
    Gradio's cache (which keeps the name) can be found."""
    path = tmp_path / f"secret-{uuid.uuid4().hex}.wav"
    buffer = io.BytesIO()
    sf.write(buffer, 0.3 * np.sin(np.linspace(0, 800, 16000)).astype(np.float32), 16000, format="WAV")
    path.write_bytes(buffer.getvalue() + MARK)
    return path


def copies_of(path: Path) -> list[Path]:
    return list(Path(get_upload_folder()).glob(f"*/{path.name}"))


def audio_handlers(client) -> list[int]:
    deps = dependencies(client)
    types = {c["id"]: c["type"] for c in client.get("/config").json()["components"]}
    return [i for i, d in enumerate(deps) if d.get("backend_fn") and any(types[t] == "audio" for t in d["inputs"])]


def assert_refused(result: dict, dep: dict | None = None):
    """No clip was made of the file. `dep`: the handler's config, where a named endpoint (Gradio's
    API, ui/page/api.py) answers something other than a clip's id: one that takes inputs must fail
    (its file refused before it runs); one that takes none (/voices) answers as ever, which the
    caller checks is the same whatever file was named."""
    values = outputs(result)
    assert not any(isinstance(v, str) and v.startswith("Reference ready") for v in values), values
    if dep is not None and dep.get("api_visibility") == "public":
        assert not (dep["inputs"] and (result["completed"] or {}).get("success")), f"{dep['api_name']}: {values}"
        return
    assert not (values and values[0]), f"a clip id was handed out: {values}"


def test_every_handler_refuses_server_paths_alike(client, secret):
    missing = secret.with_name(f"missing-{uuid.uuid4().hex}.wav")
    deps = dependencies(client)
    assert len(deps) >= 10 and audio_handlers(client)
    for index, dep in enumerate(deps):
        slots = max(1, len(dep["inputs"]))
        answers = []
        for path in (secret, missing, "/etc/passwd"):
            result = call(client, index, [file_data(path)] * slots)
            assert_refused(result, dep)
            answers.append((result["joined"], (result["completed"] or {}).get("success"), outputs(result)))
        assert answers[0] == answers[1] == answers[2], f"fn_index {index} tells files apart: {answers}"
        assert copies_of(secret) == [], f"fn_index {index} copied a server file into Gradio's cache"


def test_symlinks_to_server_files_are_refused(client, secret, tmp_path):
    inside = Path(get_upload_folder()) / f"link-{uuid.uuid4().hex}"
    inside.mkdir(parents=True)
    name = f"link-{uuid.uuid4().hex}.wav"  # a copy in the cache would carry the link's name
    links = [inside / name, tmp_path / name]
    for link in links:
        link.symlink_to(secret)
    try:
        for index in audio_handlers(client):
            for link in links:
                assert_refused(call(client, index, [file_data(link)]))
        assert copies_of(secret) == [] and [p for p in copies_of(links[1]) if p.parent != inside] == []
    finally:
        for link in links:
            link.unlink()
        inside.rmdir()


def healthy(client, within: float = 3.0) -> bool:
    started = time.monotonic()
    response = client.get("/voxcpm/health", timeout=within)
    return response.json()["ok"] is True and time.monotonic() - started < within


def test_dev_zero_neither_hangs_nor_blocks_other_routes(client):
    index = audio_handlers(client)[0]
    results = []
    attack = threading.Thread(target=lambda: results.append(call(client, index, [file_data("/dev/zero")], 15)),
                              daemon=True)
    attack.start()
    for _ in range(5):  # during the request: the event loop must stay free
        assert healthy(client)
        time.sleep(0.1)
    attack.join(timeout=15)
    assert not attack.is_alive(), "the /dev/zero request is still running"
    assert_refused(results[0])
    assert results[0]["completed"] is not None
    assert healthy(client)


def test_a_large_server_file_is_refused_without_reading_it(client, tmp_path):
    big = tmp_path / f"big-{uuid.uuid4().hex}.wav"
    with open(big, "wb") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MiB to read, nothing on disk
    started = time.monotonic()
    for index in audio_handlers(client):
        assert_refused(call(client, index, [file_data(big)]))
    assert time.monotonic() - started < 10
    assert copies_of(big) == []
    assert healthy(client)


def test_a_clip_uploaded_through_the_page_still_works(client, secret):
    uploaded = client.post("/gradio_api/upload", files={"files": ("mine.wav", secret.read_bytes(), "audio/wav")})
    assert uploaded.status_code == 200, uploaded.text
    path = uploaded.json()[0]
    values = outputs(call(client, audio_handlers(client)[0], [file_data(path, "mine.wav")]))
    assert values and values[0] and values[1].startswith("Reference ready"), values


def test_an_example_clip_works_after_another_app_deleted_its_copy(client):
    # Every Gradio app on the machine shares the upload folder, and one that shuts down deletes the
    # files it cached: the example clips included, which a live page still names (a browser test
    # saw its example refused as a server path, now and then, while other suites were running).
    asset = ASSETS / "voices" / "guide_en.wav"
    copy = Path(get_upload_folder()) / hash_file(asset) / asset.name  # what Gradio hands the page
    other = serve(Settings())
    assert copy.is_file()  # the path is Gradio's: the app just made (or touched) the copy there
    other.stop()  # its shutdown deletes the copy, which the fixture's app still names
    copy.unlink(missing_ok=True)  # the same, should another process's app have made it again meanwhile
    index = audio_handlers(client)[0]
    values = outputs(call(client, index, [file_data(copy, asset.name)]))
    assert values and values[0] and values[1].startswith("Reference ready"), values
    # Only that shape of path: the same name in another folder of the cache is still refused.
    assert_refused(call(client, index, [file_data(copy.parent.with_name("0" * 64) / asset.name)]))


def test_gradio_serves_no_server_file(client, secret):
    for path in (secret, "/etc/passwd", "/dev/zero"):
        assert client.get(f"/gradio_api/file={path}", timeout=5).status_code in (403, 404)


@pytest.mark.parametrize("fn_index", [-1, 99, 2**40, "3", 1.5])
def test_an_unknown_fn_index_is_bad_input_not_a_server_error(client, fn_index):
    result = call(client, fn_index, [file_data("/etc/passwd")])
    assert result["joined"] in (400, 422), result  # Gradio answered KeyError -1/99 with a 500
    assert healthy(client)
