"""`python app.py --lora DIR`: the LoRA is merged, and the page, GET /v1/models, the job status and
the stream's final frame say which LoRA is served; without --lora they say none."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from ui import Settings

from ..support.app_helpers import BROWSER_FLAGS, CHROMIUM, free_port, load_engine, serve, set_max_len, wait_healthy
from ..support.page_handles import click_generate, take_handles
from ..http.test_lora_refusals import pair, write_lora
from ..http.test_startup_failures import ROOT

LINE = "with the LoRA"


def test_the_served_lora_is_named_by_the_page_and_the_api(tmp_path):
    # The random model is the tiny golden architecture: a LoRA made for it fits.
    folder = write_lora(tmp_path / "finetune_lora" / "step_0000500",
                        {**pair(), **pair("feat_decoder.estimator.decoder.layers.1.self_attn.o_proj", out=32, inp=32)})
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GRADIO_SERVER_NAME", "SPACE_ID", "VOXCPM_TOKEN")}
    proc = subprocess.Popen([sys.executable, "app.py", "--random-weights", "--lora", str(folder), "--port", str(port),
                             "--device", "cpu"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base, name = f"http://127.0.0.1:{port}", "finetune_lora/step_0000500"
    try:
        wait_healthy(base, proc)
        with httpx.Client(base_url=base, timeout=60) as client:
            models = client.get("/v1/models").json()["data"]
            assert [m["lora"] for m in models] == [name] * 4 and models[0]["id"] == "voxcpm2"
            page = client.get("/config").text
            assert LINE in page and f"<code>{name}</code>" in page and str(tmp_path) not in page
            response = client.post("/voxcpm/stream", json={"text": "Hello world.", "seed": 1, "max_len": 3})
            assert response.status_code == 200 and response.content
            status = client.get(f"/voxcpm/jobs/{response.headers['x-request-id']}").json()
            assert status["lora"] == name and status["model"] == "tiny random model"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"LoRA {folder} merged into 2 linear layers (base_lm 1, feat_decoder 1): r=4, alpha=8, scale 2" in out
    assert "trained on openbmb/VoxCPM2" in out


def test_without_a_lora_nothing_is_claimed(tmp_path):
    app = serve(Settings.of(model_id="openbmb/VoxCPM2"))
    try:
        models = httpx.get(app.url + "/v1/models").json()["data"]
        assert all(m["lora"] is None for m in models)
        assert LINE not in httpx.get(app.url + "/config").text
        with httpx.stream("POST", app.url + "/voxcpm/stream?format=frames", json={"text": "Hi.", "max_len": 2},
                          timeout=60) as response:
            body = response.read()
        final = json.loads(body[body.rindex(b"S\0\0\0") + 8:])  # the last frame: JSON after an 8-byte header
        assert final["lora"] is None and final["model"] == "openbmb/VoxCPM2"
    finally:
        app.stop()


def test_the_page_shows_the_lora_and_each_take_records_it():
    from .test_page_plays_every_mode import sync_playwright  # skips without Playwright or Chromium, as the browser tests do

    app = serve(Settings.of(model_id="openbmb/VoxCPM2", lora="finetune_lora/step_0000500"),
                engine=load_engine(max_streams=1))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(app.url + "/")
            take_handles(page)
            line = page.locator("#vox-served-box")
            assert line.is_visible() and line.inner_text().strip() == (
                "Model: openbmb/VoxCPM2, with the LoRA finetune_lora/step_0000500 merged into its weights")
            set_max_len(page, 2)
            page.fill("#vox-text textarea", "Hello there.")
            click_generate(page)
            page.wait_for_function("window.workbench.selected && window.player.run && "
                                   "window.workbench.selected.id === window.player.run.id", timeout=60_000)
            assert page.evaluate("window.workbench.selected.settings.lora") == "finetune_lora/step_0000500"
            head = page.locator("#vox-workbench [data-wb=head]").inner_text()
            assert "Model: openbmb/VoxCPM2 @ –, LoRA finetune_lora/step_0000500, app " in head, head
            browser.close()
    finally:
        app.stop()
