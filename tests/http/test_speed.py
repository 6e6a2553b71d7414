"""`speed` (issue 23 item 2): the stream's speech time-stretched as it is made, pitch kept, by its
listener's output (inference/request/listener.py), and its pauses as long as written (issue 44,
item 2). The output alone (patch by patch equals all at once; no gap or click at any speed of the
range; durations exact; the pitch unchanged), and the page's route with it, bare and framed."""
from __future__ import annotations

import httpx
import numpy as np
import pytest
from scipy.signal import lfilter

from inference.request import modes
from inference.request.listener import Output, hops

from ..support.app_helpers import SAMPLE_RATE
from ..fixtures.frames import read_frames
from ui.http.frames import AUDIO, META, STATUS

PATCH = 7680
TEXT = "Hello world, this is a test."
WINDOW = 480  # 10 ms


def voiced(seconds: float = 3.0, glide: float = 50.0) -> np.ndarray:
    """Speech-like test audio: a glottal pulse train (F0 140 Hz, gliding by +-glide) through three formants,
    its loudness swelling and falling, and faded in and out as an utterance is."""
    t = np.arange(int(SAMPLE_RATE * seconds)) / SAMPLE_RATE
    phase = np.cumsum((140 + glide * np.sin(2 * np.pi * 0.7 * t)) / SAMPLE_RATE)
    y = (np.diff(np.floor(phase), prepend=0) > 0).astype(float)
    for centre, width in ((700, 80), (1200, 90), (2600, 120)):
        r, theta = np.exp(-np.pi * width / SAMPLE_RATE), 2 * np.pi * centre / SAMPLE_RATE
        y = lfilter([1], [1, -2 * r * np.cos(theta), r * r], y)
    fade = np.minimum(1, np.minimum(t, t[-1] - t) / 0.05)
    return (0.3 * y / np.abs(y).max() * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t) ** 2) * fade).astype(np.float32)


def Stretcher(speed: float) -> Output:  # noqa: N802 - the listener's output at the model's rate
    return Output(speed, SAMPLE_RATE, SAMPLE_RATE)


def stretched(audio: np.ndarray, speed: float, cut: int = PATCH) -> np.ndarray:
    stretch = Stretcher(speed)
    return np.concatenate([stretch.feed(audio[i:i + cut]) for i in range(0, audio.size, cut)] + [stretch.finish()])


def window_rms(audio: np.ndarray) -> np.ndarray:
    usable = audio[: audio.size // WINDOW * WINDOW]
    return np.sqrt(np.mean(usable.reshape(-1, WINDOW) ** 2, axis=1))


def pitch_hz(audio: np.ndarray) -> float:
    """The strongest periodicity between 80 and 400 Hz (autocorrelation of 1/8 s mid-way)."""
    half, lags = SAMPLE_RATE // 8, np.arange(SAMPLE_RATE // 400, SAMPLE_RATE // 80)
    mid = audio[audio.size // 2 - half: audio.size // 2 + half].astype(np.float64)
    corr = [np.dot(mid[:half], mid[lag:lag + half]) for lag in lags]
    return SAMPLE_RATE / lags[int(np.argmax(corr))]


@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 4.0])
def test_the_stretch_is_the_same_whatever_the_chunks(speed):
    # Chunk joins add nothing: patch by patch equals the whole signal stretched at once.
    rng = np.random.default_rng(0)
    t = np.arange(int(SAMPLE_RATE * 1.7)) / SAMPLE_RATE
    audio = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
             + 0.01 * rng.standard_normal(t.size)).astype(np.float32)
    streamed, whole = Stretcher(speed), Stretcher(speed)
    chunks = [streamed.feed(audio[i:i + 7680]) for i in range(0, audio.size, 7680)] + [streamed.finish()]
    at_once = np.concatenate([whole.feed(audio), whole.finish()])
    out = np.concatenate(chunks)
    assert out.size == round(audio.size / speed) and np.array_equal(out, at_once)
    assert np.abs(out).max() < 1.0 and np.sqrt(np.mean(out[:out.size // 2] ** 2)) > 0.1  # audio, not silence


def test_speed_one_is_untouched():
    audio = np.linspace(-1, 1, 1000, dtype=np.float32)
    stretch = Stretcher(1.0)
    assert stretch.feed(audio) is audio and stretch.finish().size == 0 and not stretch.works(audio.size)


def test_a_stretch_and_a_long_pause_are_handed_to_a_thread_a_patchs_resample_runs_where_it_is_asked():
    # A patch's resample costs soxr tens of microseconds, less than a thread's hand-off costs the
    # loop; a pause's 10 s of silence costs it milliseconds.
    patch, pause = 7680, 10 * SAMPLE_RATE
    assert not Output(1.0, SAMPLE_RATE, 24000).works(patch) and not Output(1.0, SAMPLE_RATE, 8000).works(patch)
    assert not Output(1.0, SAMPLE_RATE, 24000).works() and not Output(1.0, SAMPLE_RATE, SAMPLE_RATE).works(pause)
    assert Output(1.0, SAMPLE_RATE, 44100).works(pause)
    assert Output(0.8, SAMPLE_RATE, SAMPLE_RATE).works(patch) and Output(1.5, SAMPLE_RATE, 24000).works()


@pytest.mark.parametrize("speed", [0.25, 0.5, 0.8, 1.5, 2.5, 3.0, 4.0])
def test_no_gap_no_click_and_the_pitch_kept_at_every_speed(speed):
    audio = voiced()
    out = stretched(audio, speed)
    assert out.size == round(audio.size / speed)
    # No gap: every 10 ms away from the fades keeps at least half the input's quietest level
    # (audiotsm's default hops left silent holes, and clicks, above speed 2).
    inner = slice(int(0.1 * SAMPLE_RATE / speed) // WINDOW, -int(0.1 * SAMPLE_RATE / speed) // WINDOW)
    floor = window_rms(audio)[int(0.1 * SAMPLE_RATE) // WINDOW: -int(0.1 * SAMPLE_RATE) // WINDOW].min()
    assert window_rms(out)[inner].min() > 0.5 * floor
    assert 0.8 < np.mean(out ** 2) / np.mean(audio ** 2) < 1.25  # the loudness kept
    # No click: no sample step beyond the signal's own largest, anywhere, joins included.
    assert np.abs(np.diff(out)).max() <= 1.1 * np.abs(np.diff(audio)).max()
    # The pitch kept (within 5%; a plain resampling to this pace would move it by 25% or more).
    steady = voiced(glide=0.0)
    assert pitch_hz(stretched(steady, speed)) == pytest.approx(pitch_hz(steady), rel=0.05)


@pytest.mark.parametrize("speed", [0.3, 0.77, 1.1, 1.3, 2.7, 3.9])
def test_the_hops_give_the_speed_asked_for(speed):
    synthesis, analysis = hops(speed)
    assert analysis <= 1024 and abs(analysis / synthesis - speed) < 2e-3 * speed


def test_speed_on_the_page_route_bare_and_framed(app):
    body = {"text": TEXT, "control": "A calm voice", "seed": 3, "max_len": 8}
    with httpx.Client(base_url=app.url, timeout=120) as http:
        plain = http.post("/voxcpm/stream", json=body).content
        slow = http.post("/voxcpm/stream", json={**body, "speed": 0.5}).content
        framed = read_frames(http.post("/voxcpm/stream?format=frames", json={**body, "speed": 0.5}).content)
        too_fast = http.post("/voxcpm/stream", json={**body, "speed": 4.5})
    assert len(slow) == 2 * len(plain)  # exactly twice as long: the stretch is cut to length
    audio = np.concatenate([p for kind, p in framed if kind == AUDIO])
    assert np.array_equal(audio, np.frombuffer(slow, "<i2"))  # the frames carry the same stretched audio
    metas, status = [p for kind, p in framed if kind == META], framed[-1]
    assert status[0] == STATUS and status[1]["speed"] == 0.5 and status[1]["output_samples"] == audio.size
    assert status[1]["samples"] == len(plain) // 2  # the model's own figures stand
    # Each metadata frame places its patch in the audio sent: contiguous, from 0.
    assert [m["offset"] for m in metas] == list(np.cumsum([0] + [m["samples"] for m in metas])[:-1])
    assert too_fast.status_code == 400 and "speed 4.5 is out of range" in too_fast.json()["error"]


def test_the_job_status_of_a_stretched_stream_tells_the_audio_sent(app):
    """Issue 37, item 5: a stopped take has no status frame, so the page marks its segments from
    /voxcpm/jobs/ID: its speed, the samples sent and the segment ends in them, as the frame has them.
    The speech is twice as long at speed 0.5; the pause lasts its 300 ms."""
    body = {"text": "One. [pause 300ms] Two.", "control": "A calm voice", "seed": 3, "max_len": 4, "speed": 0.5}
    with httpx.Client(base_url=app.url, timeout=120) as http:
        response = http.post("/voxcpm/stream?format=frames", json=body)
        job = http.get(f"/voxcpm/jobs/{response.headers['x-request-id']}").json()
    framed = read_frames(response.content)
    sent, final = sum(p.size for kind, p in framed if kind == AUDIO), framed[-1][1]
    pause = round(0.3 * SAMPLE_RATE)
    assert job["speed"] == 0.5 and job["output_samples"] == sent == 2 * (job["samples"] - pause) + pause
    assert job["segment_ends"] == final["segment_ends"] and job["segment_ends"][-1] == sent
    assert len(job["segment_ends"]) == 2


@pytest.mark.parametrize("speed", [0.5, 1.5])
def test_the_joins_of_a_stretched_stream_are_no_rougher_than_the_rest(app, speed):
    body = {"text": TEXT, "control": "A calm voice", "seed": 5, "max_len": 10, "speed": speed}
    framed = read_frames(httpx.post(app.url + "/voxcpm/stream?format=frames", json=body, timeout=120).content)
    audio = np.concatenate([p for kind, p in framed if kind == AUDIO]).astype(np.float64)
    joins = [m["offset"] for kind, m in framed if kind == META][1:]
    assert audio.size / SAMPLE_RATE == pytest.approx(framed[-1][1]["audio_s"] / speed, rel=0.02)

    def score(at: int) -> float:  # the jump across `at` over the mean step within 10 ms each side
        steps = np.abs(np.diff(audio[max(at - WINDOW, 0): at + WINDOW]))
        return abs(audio[at] - audio[at - 1]) / max(steps.mean(), 1e-9)
    own = [score(at) for at in range(WINDOW, audio.size - WINDOW, 97)]
    assert joins and max(score(at) for at in joins) <= max(own)


def test_the_spec_states_speed_for_the_page():
    setting = modes.spec_json()["settings"]["speed"]
    assert (setting["low"], setting["high"], setting["default"]) == (0.25, 4.0, 1.0)


@pytest.mark.parametrize("speed", [0.5, 1.5, 4.0])
def test_a_pause_tag_lasts_what_it_says_at_any_speed(app, speed):
    """The page promises "50 ms to 10 s of silence": at speed 1.5 a [pause 500ms] gave 331 ms when
    the whole stream was stretched. Now the speech around it is stretched and the pause is not."""
    body = {"text": "One. [pause 500ms] Two.", "control": "A calm voice", "seed": 3, "max_len": 4, "speed": speed}
    audio = np.frombuffer(httpx.post(app.url + "/voxcpm/stream", json=body, timeout=120).content, "<i2")
    silent = np.flatnonzero(np.diff(np.concatenate([[0], (audio == 0).astype(np.int8), [0]])))
    longest = max(end - start for start, end in zip(silent[::2], silent[1::2]))
    assert round(0.5 * SAMPLE_RATE) <= longest <= round(0.5 * SAMPLE_RATE) + 1024, \
        f"the pause lasted {longest / SAMPLE_RATE * 1000:.0f} ms at speed {speed}"
