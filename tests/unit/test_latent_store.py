"""The store of finished jobs' latents: what expires and when (inference/serving/latent_store.py)."""
import numpy as np

from inference.serving.latent_store import LatentStore


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def patches(n: int = 2) -> list[np.ndarray]:
    return [np.zeros((4, 2), np.float32)] * n


def test_latents_expire_after_their_ttl_oldest_first_and_a_job_kept_again_lives_a_full_ttl_from_then():
    clock = Clock()
    store = LatentStore(max_bytes=2**20, ttl_s=10.0, clock=clock)
    for t, job in ((0.0, "a"), (1.0, "b"), (2.0, "c")):
        clock.now = t
        assert store.keep(job, patches(), None)
    clock.now = 3.0
    assert store.keep("a", patches(3), None)  # kept again: expires 10 s from now, not from its first keep
    clock.now = 11.5  # b's time is up (11.0); c's (12.0) and a's new one (13.0) are not
    assert store.get("b") is None
    assert store.get("c") is not None and store.get("a") is not None
    assert len(store) == 2 and store.nbytes == 5 * 4 * 2 * 4
    clock.now = 12.0
    assert store.get("c") is None and store.get("a").latents.shape == (3, 4, 2)
    clock.now = 13.0
    assert store.get("a") is None and len(store) == 0 and store.nbytes == 0


def test_a_render_goes_with_its_latents_when_they_expire():
    clock = Clock()
    store = LatentStore(max_bytes=2**20, ttl_s=5.0, clock=clock)
    store.keep("a", patches(), None)
    assert store.keep_render("a", store.get("a"), b"RIFF....")
    clock.now = 4.9
    assert store.render("a") == b"RIFF...."
    clock.now = 5.0
    assert store.render("a") is None and store.render_bytes == 0
