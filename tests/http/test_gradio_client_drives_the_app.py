"""Issue 48: Gradio's own API (ui/page/api.py), driven by the real gradio_client against the app
served on loopback with the tiny random model: view_api lists the four named endpoints with their
parameters and nothing else; every mode generates through predict, a clip sent as a file or named
as a saved voice, and gives the very audio POST /voxcpm/stream gives for the same seed; the
streaming endpoint hands its patches to the client before the take ends, and they join to that
same audio; a bad value is refused naming its field, the next call works, and both are counted
where the route's are; a full line is refused at once, saying when to try again; a cancelled call
stops its take; /transcribe and /voices answer; with a token, a client without it is refused and
one that sends it works."""
from __future__ import annotations

import base64
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client, handle_file
from gradio.utils import get_upload_folder
from gradio_client.exceptions import AppError, AuthenticationError

from inference import SynthesisRequest
from inference.request import modes
from ui.page.examples import transcript_of

from ..fixtures import analysis_stand_ins
from ..support.app_helpers import assert_same_audio, pcm_of, wait_until

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "assets" / "voices" / "guide_en.wav"
GUIDE_TEXT = transcript_of("voices/guide_en.wav")
TEXT = "Hello there."
HEARD = "hello from the script"  # what the stand-in recognizer hears in any clip
TOKEN = "gradio-token-0123456789"
ENDPOINTS = {"/generate", "/generate_stream", "/transcribe", "/voices"}


@pytest.fixture(scope="module")
def app(serve_app, tmp_path_factory):
    return serve_app(recognizer=HEARD, recognizer_loader=analysis_stand_ins.LOADER, speaker=None,
                     data_dir=str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def gradio(app) -> Client:
    return Client(app.url, verbose=False)


@pytest.fixture(scope="module")
def http(app):
    with httpx.Client(base_url=app.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def saved_voice(http) -> str:
    """The guide's clip saved as a voice with its transcript, through the HTTP routes."""
    clip_id = http.post("/voxcpm/upload", content=GUIDE.read_bytes()).json()["id"]
    saved = http.post("/voxcpm/voices", json={"name": "Guide", "clip_id": clip_id, "transcript": GUIDE_TEXT})
    assert saved.status_code == 201, saved.text
    return "Guide"


def streamed(http, **body) -> np.ndarray:
    response = http.post("/voxcpm/stream", json=body)
    assert response.status_code == 200, response.text
    return pcm_of(response.content)


def wav_samples(path: str) -> np.ndarray:
    audio, rate = sf.read(path, dtype="int16")
    assert rate == 48000
    return audio


def joined(items: list[dict]) -> np.ndarray:
    return pcm_of(b"".join(base64.b64decode(item["pcm"]) for item in items))


def test_view_api_lists_the_named_endpoints_with_their_parameters(gradio):
    info = gradio.view_api(print_info=False, return_format="dict")
    assert set(info["named_endpoints"]) == ENDPOINTS and info["unnamed_endpoints"] == {}
    take = ["text", "mode", "control", "reference", "prompt_text", "seed", "voice", "normalize", "trim_silence",
            "timestamps", *modes.TUNING]
    for name in ("/generate", "/generate_stream"):
        params = {p["parameter_name"]: p for p in info["named_endpoints"][name]["parameters"]}
        assert list(params) == take
        assert not params["text"]["parameter_has_default"]
        assert params["mode"]["parameter_default"] == modes.DEFAULT_MODE
        assert all(params[s]["parameter_default"] == modes.default(s) for s in modes.TUNING)
        assert params["reference"]["python_type"]["type"].count("filepath") == 1
    assert [p["parameter_name"] for p in info["named_endpoints"]["/transcribe"]["parameters"]] == ["reference", "voice"]
    with pytest.raises(ValueError, match="load_example"):  # the page's examples are its own
        gradio.predict(api_name="/load_example")


CLIP = {"reference": "a file"}
MODES = [
    ({"mode": "design", "control": "A calm, warm voice"}, {"mode": "design", "control": "A calm, warm voice"}),
    ({"mode": "cloning", "control": "Whispering", **CLIP}, {"mode": "cloning", "control": "Whispering", **CLIP}),
    ({"mode": "ultimate", "prompt_text": GUIDE_TEXT, **CLIP}, {"mode": "ultimate", "prompt_text": GUIDE_TEXT, **CLIP}),
    ({"mode": "ultimate", "voice": "Guide"}, {"mode": "ultimate", "voice": "Guide"}),
]


@pytest.mark.parametrize("asked, body", MODES, ids=["design", "cloning-file", "ultimate-file", "ultimate-voice"])
def test_each_mode_generates_what_the_stream_route_gives(gradio, http, saved_voice, asked, body):
    if "reference" in asked:  # a file through gradio_client; the same clip uploaded for the route
        asked = asked | {"reference": handle_file(str(GUIDE))}
        body = {k: v for k, v in body.items() if k != "reference"}
        body["reference_id"] = http.post("/voxcpm/upload", content=GUIDE.read_bytes()).json()["id"]
    path, figures = gradio.predict(TEXT, seed=5, max_len=3, **asked, api_name="/generate")
    assert figures["outcome"] == "ok" and figures["seed"] == 5 and figures["patches"] == 3
    assert figures["ttfp_s"] > 0 and figures["rtf"] > 0 and figures["audio_s"] == pytest.approx(0.48)
    assert_same_audio(wav_samples(path), streamed(http, text=TEXT, seed=5, max_len=3, **body))


@pytest.mark.parametrize("speed", [1.0, 1.25])
def test_the_stream_yields_patches_before_the_take_ends_and_joins_to_the_routes_audio(app, gradio, http, speed):
    patches = 24 if speed == 1.0 else 4  # a take long enough to be seen still running
    job = gradio.submit(TEXT, seed=9, min_len=patches, max_len=patches, speed=speed, api_name="/generate_stream")
    items, arrived = [], []
    for item in job:
        items.append(item)
        arrived.append(time.perf_counter())  # the app runs in this process: the worker's clock too
    *chunks, last = items
    assert [c["index"] for c in chunks] == list(range(patches)) and last["status"]["outcome"] == "ok"
    assert all(c["offset"] + c["samples"] == n["offset"] for c, n in zip(items, items[1:]))
    ended = app.worker.get(chunks[0]["job"]).finished_at
    if speed == 1.0:
        assert sum(t < ended for t in arrived) > 1, "the patches reached the client only once the take had ended"
    audio = joined(items)
    assert last["status"]["output_samples"] == len(audio)
    assert_same_audio(audio, streamed(http, text=TEXT, seed=9, min_len=patches, max_len=patches, speed=speed))


BAD = [  # (what is asked, the parameter the refusal's title names, words of its message)
    ({"cfg_value": 50.0}, "cfg_value", "cfg_value"),
    ({"text": " "}, "text", "text is empty"),
    ({"seed": -1}, "seed", "seed"),
    ({"mode": "cloning"}, "reference", "send reference (a file: gradio_client's handle_file(path)) or voice"),
    ({"mode": "design", "reference": "a file"}, "reference", "not used in voice design"),
    ({"mode": "cloning", "reference": "not audio"}, "reference", "reference: the uploaded file could not be read"),
    ({"mode": "ultimate", "reference": "a file"}, "prompt_text", "needs the exact transcript"),
]


def counted(app, name: str, **labels) -> float:
    return app.app.state.ctx.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("asked, field, words", BAD, ids=[f"{f}-{i}" for i, (_, f, _) in enumerate(BAD)])
def test_bad_input_is_refused_naming_its_field_and_the_next_call_works(app, gradio, tmp_path, asked, field, words):
    (tmp_path / "notes.wav").write_text("these are not samples")
    files = {"a file": str(GUIDE), "not audio": str(tmp_path / "notes.wav")}
    if "reference" in asked:
        asked = asked | {"reference": handle_file(files[asked["reference"]])}
    before = counted(app, "voxcpm_refusals_total", outcome="input_error", status="400")
    with pytest.raises(AppError) as refused:
        gradio.predict(**({"text": TEXT, "max_len": 2} | asked), api_name="/generate")
    assert words in str(refused.value) and refused.value.title == f"400 Bad Request: {field}"
    # Counted, as the route's refusals are (ui/http/common.admit).
    assert counted(app, "voxcpm_refusals_total", outcome="input_error", status="400") == before + 1
    _, figures = gradio.predict(TEXT, seed=1, max_len=2, api_name="/generate")
    assert figures["outcome"] == "ok"


def test_a_full_line_is_refused_at_once_saying_when_to_try_again(app, gradio):
    # Gradio's queue holds nothing back: the worker's rows and line are the one limit, as for the routes.
    fill = app.worker.rows + app.worker.max_queue
    held = [app.worker.submit(SynthesisRequest(TEXT, seed=s, min_len=300, max_len=300)) for s in range(fill)]
    try:
        with pytest.raises(AppError, match="busy") as busy:
            gradio.predict(TEXT, max_len=2, api_name="/generate")
        retry = app.app.state.ctx.settings.http.busy_retry_s
        assert busy.value.title == f"503 Service Unavailable: try again in {retry} s"
    finally:
        for job in held:
            job.cancel()
    wait_until(lambda: not app.worker.busy, timeout=30)


def test_a_take_counts_where_the_routes_do(app, gradio):
    before = counted(app, "voxcpm_requests_total", mode="design", outcome="ok")
    gradio.predict(TEXT, seed=2, max_len=2, api_name="/generate")
    gradio.submit(TEXT, seed=2, max_len=2, api_name="/generate_stream").result()
    assert counted(app, "voxcpm_requests_total", mode="design", outcome="ok") == before + 2


def takes_in_gradios_cache() -> set[Path]:
    return set(Path(get_upload_folder()).glob("*/voxcpm-*.wav"))


def test_a_client_that_cancels_stops_its_take_and_leaves_no_file(app, gradio):
    long = dict(seed=4, min_len=300, max_len=300)
    stream = gradio.submit(TEXT, **long, api_name="/generate_stream")
    first = next(iter(stream))
    stream.cancel()
    job = app.worker.get(first["job"])
    wait_until(lambda: job.state == "cancelled" and not app.worker.busy, timeout=30)
    assert job.patches < 300
    files = takes_in_gradios_cache()
    whole = gradio.submit(TEXT, **long, api_name="/generate")
    wait_until(lambda: takes_in_gradios_cache() - files, timeout=30)  # its WAV is being written
    whole.cancel()
    wait_until(lambda: not app.worker.busy, timeout=30)
    assert takes_in_gradios_cache() == files  # the half-written WAV went with its take


def test_transcribe_hears_a_file_or_a_saved_voice(gradio, saved_voice):
    assert gradio.predict(reference=handle_file(str(GUIDE)), api_name="/transcribe") == HEARD
    assert gradio.predict(voice=saved_voice, api_name="/transcribe") == HEARD
    with pytest.raises(AppError, match=r"give one clip: reference .* or voice"):
        gradio.predict(api_name="/transcribe")
    with pytest.raises(AppError, match="Nobody") as unknown:
        gradio.predict(voice="Nobody", api_name="/transcribe")
    assert unknown.value.title.startswith("404")


def test_voices_lists_the_saved_and_the_builtin_ones(gradio, saved_voice):
    listed = gradio.predict(api_name="/voices")
    assert [v["name"] for v in listed["saved"]] == [saved_voice] and listed["saved"][0]["transcript"] == GUIDE_TEXT
    assert {"alloy", "verse"} <= {v["name"] for v in listed["builtin"]}
    assert all(v["description"] and isinstance(v["seed"], int) for v in listed["builtin"])


@pytest.fixture(scope="module")
def guarded(serve_app):
    return serve_app(token=TOKEN)


def test_with_a_token_only_a_client_that_sends_it_gets_in(guarded):
    with pytest.raises(AuthenticationError):
        Client(guarded.url, verbose=False)
    for header in ({"Authorization": f"Bearer {TOKEN}"}, {"X-VoxCPM-Token": TOKEN}):
        client = Client(guarded.url, verbose=False, headers=header)
        path, figures = client.predict(TEXT, seed=3, max_len=2, api_name="/generate")
        assert figures["outcome"] == "ok" and len(wav_samples(path)) == figures["output_samples"]
    join = httpx.post(f"{guarded.url}/gradio_api/queue/join", json={"data": [TEXT], "fn_index": 0,
                                                                     "session_hash": "x" * 10})
    assert join.status_code == 401


def test_a_take_that_asks_for_timestamps_gets_its_words_in_its_figures_and_its_stream(gradio):
    """Issue 47: the Gradio API takes `timestamps` as the routes do; the stand-in recognizer spreads
    each segment's words over its audio."""
    _, take = gradio.predict("Hello there. [pause 300ms] How are you?", seed=5, max_len=4, timestamps="word",
                             api_name="/generate")
    assert take["timestamps"] == "word"
    assert [w["word"] for w in take["words"]] == ["Hello", "there.", "How", "are", "you?"]
    items = list(gradio.submit("Hello there.", seed=5, max_len=4, timestamps="word", api_name="/generate_stream"))
    sent = [w for item in items for segment in item["words"] for w in segment["words"]]
    assert [w["word"] for w in sent] == ["Hello", "there."] and items[-1]["status"]["words"] == sent
    assert "words" not in gradio.predict("Hi.", seed=5, max_len=4, api_name="/generate")[1]
