"""Session set-up shared by every test module, and the tiers' markers (see tests/README.md)."""
import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "artifacts" / "robust-figures.txt"
TIERS = ("unit", "http", "browser", "gpu")
TURNS = "VOXCPM_TEST_TURNS"  # the folder of the run's lock files (pytest_runtest_protocol)
# Left out of the fast tier: tests over about 5 s on two quiet cores, by --durations (a file, all
# its tests, or one test by name, relative to tests/); and the http files that start app.py as a
# user does or loop hundreds of requests, by what they do (not yet timed on a quiet machine).
SLOW = {
    "unit/test_audio_input.py::test_file_matches_librosa",
    "unit/test_batching.py::test_every_golden_mode_equals_itself_alone_when_batched",
    "unit/test_batching.py::test_per_row_seed_cfg_timesteps_and_lengths",
    "unit/test_bf16_within_official_precision_gap.py",
    "unit/test_clips_encoded_together.py::test_joiners_clips_take_one_encoder_call_and_give_the_solo_audio",
    "unit/test_continuation.py::test_a_retry_rewinds_the_decoder_to_the_segment_start",
    "unit/test_continuation.py::test_each_segment_equals_the_official_prompt_cache_continuation",
    "unit/test_continuation.py::test_segments_decode_as_one_continuous_stream",
    "unit/test_deadline_admission.py::test_a_burst_joining_thirty_running_streams_never_starves_them",
    "unit/test_deadline_admission.py::test_a_burst_on_an_idle_engine_is_prefilled_in_groups_as_it_starts",
    "unit/test_deadline_admission.py::test_a_lone_joiner_gets_its_first_chunk_within_two_steps",
    "unit/test_lora.py::test_merged_lora_equals_the_official_package_with_it",
    "unit/test_pause_stream.py",
    "unit/test_segment_hold.py::test_fast_generation_still_holds_and_retries_runaways",
    "unit/test_segment_hold.py::test_generation_near_real_time_never_holds_audio_past_the_listeners_slack",
    "unit/test_split_products.py::test_the_split_decode_equals_the_reference_layers",
    "unit/test_vad.py::test_a_trimmed_request_encodes_the_trimmed_clip_and_remembers_it_apart",
    "unit/test_vae_kernels.py",  # Triton's interpreter on the CPU: 2 minutes together
    "unit/test_continuation.py::test_twenty_thousand_characters_stream_to_the_end_with_flat_memory",
    "unit/test_pool.py::test_warm_ups_take_turns_each_on_its_own_worker_thread",
    "unit/test_prefill_padding.py::test_the_compiled_prefill_equals_the_plain_one_and_one_graph_serves_every_batch_and_length",
    "http/test_replicas_behind_haproxy.py",
    "http/test_prepare_off_thread.py::test_the_worker_thread_never_normalizes_segments_tokenizes_or_loads_clips",
    # A normalizer process spawned (test_text_normalize.py checks one in the fast tier); a take cut and rendered.
    "http/test_prepare_off_thread.py::test_a_served_text_is_normalized_in_a_process_of_its_own_and_sounds_the_same",
    "http/test_a_cut_take_keeps_its_audio.py::test_a_cut_take_ends_cut_with_its_audio_and_its_offline_render",
    "unit/test_split_products.py::test_split_blocks_choose_which_layers_split",
    "http/test_shared_voice_library.py",  # two replicas, and a database stopped and started
    "http/test_evaluate.py",  # two tiny models loaded twice (the app's and the oracle's)
    "http/test_analysis_beside_the_stream.py",  # streams alone and beside the analysis, 3 rounds each
    "unit/test_real_whisper_hears_and_times_speech.py",  # real Whisper tiny.en and base on the CPU: about 45 s
    "http/test_front_doors_stay_light.py::test_a_request_reaches_the_engine_in_at_most_8_hops_checked_in_at_most_3",
    "http/test_front_doors_stay_light.py::test_one_stream_is_held_by_at_most_4_objects",
    "http/test_vllm_omni_protocol.py::test_an_utterance_slower_to_make_than_the_idle_timeout_is_spoken_whole",
    "http/test_vllm_omni_protocol.py::test_a_session_that_waits_for_a_row_is_not_idle_and_is_spoken_when_one_frees",
    "http/test_vllm_omni_protocol.py::test_an_interrupt_while_waiting_for_a_row_ends_the_utterance_as_interrupted",
    "http/test_live_text_socket.py::test_a_client_that_stops_reading_is_closed_its_audio_dropped_and_its_row_freed",
    "http/test_word_timestamps.py::test_words_waiting_in_numbers_leave_room_for_a_persons_transcript",
    "http/test_word_timestamps.py::test_an_aligner_that_cannot_load_is_a_503_saying_why_on_every_call_never_a_500",
    "http/test_word_timestamps.py::test_a_jobs_words_and_subtitles_say_why_when_the_aligner_could_not_make_them",
    "unit/test_live_text.py::test_a_stream_that_waits_for_text_keeps_its_voice_and_goes_on_as_if_it_had_not_waited",
    "http/test_openai_api.py::test_every_format_whole_and_streamed_equals_synthesize",
    "http/test_openai_api.py::test_normalize_extension_reads_numbers_as_words",
    "http/test_offline_render.py::test_a_long_render_streams_in_bounded_memory_and_equals_the_whole_decode",
    "http/test_access_token.py",
    "browser/test_workbench_trust.py::test_a_take_at_speed_records_reuses_and_exports_its_settings_and_matches_its_offline_render",
    "browser/test_workbench_trust.py::test_the_waveform_loops_zooms_selects_and_takes_shortcuts_as_used",
    "browser/test_workbench_trust.py::test_on_a_phone_a_touch_drag_selects_and_the_status_sits_by_the_buttons",
    "http/test_app_cli.py",
    "http/test_engine_apart.py",  # the engine loaded in a child process, and again in the test for its reference
    "http/test_fuzzed_requests.py",
    "http/test_gradio_queue_cannot_reach_server_files.py::test_an_example_clip_works_after_another_app_deleted_its_copy",
    "http/test_long_sessions_leak_nothing.py",
    "http/test_lora_refusals.py",
    "http/test_readme.py",
    "http/test_startup_failures.py",

    # The fast tier's slowest calls on 2026-11-27 (1.4-5.3 s each, by --durations on two cores),
    # so that it keeps its 3 minutes on a slower day; CI runs them all.
    "http/test_gradio_queue_cannot_reach_server_files.py::test_every_handler_refuses_server_paths_alike",
    "http/test_idle_connections_cannot_pin_memory.py::test_unread_audio_is_bounded_across_connections",
    "http/test_metrics_ready.py::test_metrics_need_the_token_and_ready_does_not",
    "http/test_metrics_ready.py::test_ready_answers_503_until_the_engine_has_warmed_up",
    "http/test_offline_render.py::test_pieces_equal_the_whole_decode_and_decode_a_few_patches_at_a_time",
    "http/test_offline_render.py::test_renders_do_not_hold_up_a_live_stream",
    "http/test_one_client_cannot_evict_others_clips.py::test_a_flood_of_uploads_evicts_nobody_else",
    "http/test_openai_api.py::test_sse_deltas_carry_the_audio_and_end_with_usage",
    "http/test_pcm_route.py::test_an_uploaded_clip_expires_after_its_time",
    "http/test_prepare_off_thread.py::test_an_input_error_refuses_the_job_with_its_reason_and_holds_nothing",
    "http/test_request_bodies_are_bounded.py::test_a_body_that_never_finishes_is_cut",
    "http/test_voices.py::test_names_are_found_as_they_were_saved",
    "http/test_voices.py::test_only_token_holders_change_the_library",
    "http/test_voices.py::test_refusals_name_the_problem",
    "http/test_voices.py::test_voices_are_found_after_a_restart_and_still_skip_the_encoder",
    "unit/test_audio_input.py::test_bytes_match_librosa",
    "unit/test_continuation.py::test_a_runaway_segment_is_retried_then_cut_and_nothing_held_is_lost",
    "unit/test_unread_audio_by_the_listeners_clock.py::test_a_reader_with_pauses_and_speed_finishes_while_non_readers_fill_the_budget",
    "unit/test_vad.py::test_trimming_keeps_the_process_thread_count",
    "unit/test_voice_store.py::test_a_save_killed_midway_leaves_no_half_voice",
    # The tier's slowest on 2026-11-29 (2.5-8.6 s each with their module's start-up): it had grown to
    # 4 min 15 s with the suite.
    "http/test_transcribe.py::test_no_model_gets_a_503_saying_how_to_fix_it_and_the_rest_serves",
    "http/test_idle_connections_cannot_pin_memory.py::test_a_connection_without_a_request_is_closed",
    "http/test_word_timestamps.py::test_when_the_aligner_is_full_the_stream_plays_whole_and_says_why_words_are_missing",
    "http/test_openai_dropin.py::test_speed_stretches_every_format_to_its_duration",
    "http/test_transcribe.py::test_an_uploaded_clip_gets_the_models_text_made_in_the_analysis_process",
    "http/test_live_text_socket.py::test_bad_input_is_an_error_event_naming_what_is_accepted_and_the_session_goes_on",
    "http/test_failed_request_fails_alone.py::test_out_of_memory_fails_only_its_request",
    "http/test_live_text_socket.py::test_pieces_of_any_size_are_spoken_as_the_whole_text_clause_by_clause",
    "http/test_openai_api.py::test_every_format_and_stream_format_lasts_the_models_audio",
    "unit/test_deploy_files_agree_and_lint.py::test_entrypoint_with_a_real_token_serves_and_asks_for_it",
    "http/test_recognizer_states.py::test_a_load_that_fails_after_it_started_is_answered_with_its_reason_at_once_from_then_on",
    "http/test_vllm_omni_protocol.py::test_sixteen_sessions_at_once_are_all_spoken_none_lost",
    "http/test_openai_dropin.py::test_each_openai_voice_is_its_fixed_design",
    "http/test_idle_connections_cannot_pin_memory.py::test_a_client_that_stops_reading_is_cut_and_its_audio_dropped",
    "http/test_request_bodies_are_bounded.py::test_six_files_under_the_file_limit_are_refused_together",
    "unit/test_golden_parity.py::test_engine_matches_official",
    "http/test_recognizer_states.py::test_switched_off_every_door_says_how_to_switch_it_on_and_a_missing_clip_is_named_first",
    "http/test_server_rtf_is_over_the_audio_heard.py::test_the_server_rtf_of_a_take_is_its_generation_time_over_the_audio_heard",
    "http/test_live_text_socket.py::test_with_a_token_a_socket_needs_it_as_a_header_or_in_the_url",
    "http/test_recognizer_states.py::test_a_model_being_loaded_says_so_with_a_short_retry_after_then_transcribes",
    "http/test_live_text_socket.py::test_an_interrupt_stops_the_audio_within_a_patch_and_the_next_text_starts_afresh",
    "http/test_openai_dropin.py::test_openai_model_names_are_the_one_model",
    "http/test_vllm_omni_protocol.py::test_a_config_sent_while_an_utterance_plays_applies_to_the_next_one_only",
    # The fast tier took 3 min 13 s to 3 min 38 s on 2026-11-29 evening (the code before this
    # evening's changes as long): the files with the most of its time, module start-up included.
    "http/test_gradio_client_drives_the_app.py",  # 12.8 s
    "http/test_transcribe.py",  # 9.9 s
    "http/test_word_timestamps.py",  # 8.5 s
    "http/test_speed.py",  # 5.8 s
}
# Run alone: while one of these runs, pytest-xdist's other worker waits (tests/README.md). They time
# what a listener hears (a page's playback, a stream's gaps beside other work) or how a long run
# grows, and another worker's load on the same two cores fails them where the code is right.
ALONE = {
    "browser/test_page_plays_every_mode.py",
    "browser/test_page_segment_gaps.py",
    "browser/test_page_long_text.py",
    "browser/test_page_live_text.py",
    "browser/test_page_speed.py",
    "http/test_long_sessions_leak_nothing.py",
    "http/test_analysis_beside_the_stream.py",
    # the analysis process's models loading beside another worker outlast the page's wait for them
    "browser/test_take_evaluation.py",
    # counts a played stream's underruns, which a stream made slower than real time has
    "browser/test_workbench_selections_and_gaps.py::test_running_dry_at_the_end_of_a_late_ending_stream_is_no_underrun",
}
# The longest files, longest first (by their tests' time on two workers, 2026-12-02): pytest-xdist
# hands each worker the next file as it ends one, in collection order, so these go first and the
# run ends on short files (it had ended with one worker idle for 47 s of 11 minutes).
FIRST = (
    "unit/test_real_whisper_hears_and_times_speech.py",
    "http/test_replicas_behind_haproxy.py",
    "browser/test_page_transcript.py",
    "unit/test_vae_kernels.py",
    "browser/test_page_words.py",
    "browser/test_workbench_trust.py",
    "browser/test_workbench_findings.py",
    "browser/test_workbench_qa_workflows.py",
    "http/test_live_text_socket.py",
    "http/test_vllm_omni_protocol.py",
    "browser/test_workbench_qa_pass_58.py",
    "http/test_startup_failures.py",
    "http/test_word_timestamps.py",
    "browser/test_page_saved_voice_transcript.py",
    "http/test_fuzzed_requests.py",
    "browser/test_workbench_qa_tools.py",
)
# Tests that need CUDA outside tests/gpu/: each sits beside the CPU test of the same code.
GPU = {
    "unit/test_split_products.py::test_on_cuda_split_products_beat_plain_tf32",
    "unit/test_vae_stream.py::test_compiled_on_cuda_equals_the_reference_layers",
}


def alone_files() -> list[str]:
    """The files that hold tests marked `alone` (tests/run's second part collects only these)."""
    return ["tests/gpu"] + sorted({f"tests/{entry.partition('::')[0]}" for entry in ALONE | GPU})


def pytest_sessionstart(session):
    # pytest-xdist's workers (CI's -n 2) start a session each, inheriting the first one's variables.
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    # The robustness tests append what they measured; each run starts a fresh list.
    if worker is None:
        FIGURES.unlink(missing_ok=True)
    # Apps started by the tests (in process or as app.py subprocesses) keep their voice library in
    # a throwaway folder, never in the user's real one; Gradio's upload cache too: the tests that
    # look for server files copied into it would see the copies another run on the same machine
    # made (another checkout's paths hash elsewhere). A worker gets a folder of its own in each, so
    # that one worker's voices and uploads are not another's.
    for variable, prefix in (("VOXCPM_DATA_DIR", "voxcpm-test-data-"), ("GRADIO_TEMP_DIR", "voxcpm-test-gradio-")):
        if variable not in os.environ:
            os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
        if worker is not None:
            os.environ[variable] = os.path.join(os.environ[variable], worker)
            os.makedirs(os.environ[variable], exist_ok=True)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config, items):
    modules = {}
    for item in items:
        where = item.path.relative_to(HERE).as_posix()
        modules[where] = item.module
        if where.split("/")[0] in TIERS:
            item.add_marker(where.split("/")[0])
        named = f"{where}::{item.originalname}"
        if where in SLOW or named in SLOW:
            item.add_marker("slow")
        if named in GPU:
            item.add_marker("gpu")
        if where in ALONE or named in ALONE or item.get_closest_marker("gpu"):  # one GPU, timed kernels
            item.add_marker("alone")
    rank = {where: i for i, where in enumerate(FIRST)}  # the sort is stable: each file keeps its own order
    items.sort(key=lambda item: rank.get(item.path.relative_to(HERE).as_posix(), len(FIRST)))
    # A renamed or moved test would silently lose its marker: refuse names that no longer exist.
    for entry in SLOW | GPU | ALONE | set(FIRST):
        where, _, name = entry.partition("::")
        if not (HERE / where).is_file() or where in modules and name and not hasattr(modules[where], name):
            raise pytest.UsageError(f"tests/conftest.py names {entry}, which no longer exists")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist, each test (its set-up and tear-down with it, so a module's app starting
    counts) takes turns through two lock files of the run: any number at once, or one marked
    `alone` by itself. A test to run alone holds the gate while it waits for the others to end,
    so that none starts in the meantime."""
    turns = os.environ.get(TURNS) if hasattr(item.config, "workerinput") else None
    if turns is None:  # one process: nothing runs beside
        yield
        return
    with _turn(Path(turns), item.get_closest_marker("alone") is not None):
        yield


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        # One thread for torch's operators in each of the two workers on two cores: two threads each
        # would make four that wait on each other's cores (the tiny model's operators are small).
        import torch

        torch.set_num_threads(1)
    # The run's lock files, in a folder that pytest-xdist's workers inherit (they start after this).
    elif TURNS not in os.environ:
        os.environ[TURNS] = tempfile.mkdtemp(prefix="voxcpm-test-turns-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(TURNS), ignore_errors=True))


@contextlib.contextmanager
def _turn(base: Path, alone: bool):
    with open(base / "gate", "a") as gate, open(base / "room", "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throwaway PostgreSQL server of the session's own (tests/support/postgres.py), for the
    tests that stop it; skips with the reason where none can be made."""
    from .support import postgres

    why = postgres.missing(need_throwaway=True)
    if why:
        pytest.skip(why)
    cluster = postgres.Cluster()
    cluster.start()
    yield cluster
    cluster.remove()


@pytest.fixture(scope="session")
def postgres_server(request):
    """A PostgreSQL server URL for the voice library's tests: $VOXCPM_TEST_POSTGRES (.ci/run), else
    the session's throwaway one."""
    from .support import postgres

    why = postgres.missing()
    if why:
        pytest.skip(why)
    return os.environ.get(postgres.URL_VAR) or request.getfixturevalue("postgres_cluster").url


@pytest.fixture(scope="module")
def postgres_database(postgres_server):
    """An empty database of the module's own on that server, as a URL."""
    from .support.postgres import fresh_database

    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(scope="module")
def serve_app():
    """The one way a module serves the app: serve_app(engine=None, **settings) runs the tiny random
    model (or `engine`) with Settings.of(**settings) on 127.0.0.1 and returns the running app; all
    it started stop when the module ends."""
    from ui import Settings

    from .support.app_helpers import serve

    started = []

    def start(engine=None, **settings):
        started.append(serve(Settings.of(**settings), engine=engine))  # each field in its section
        return started[-1]
    yield start
    for running in reversed(started):
        running.stop()


@pytest.fixture(scope="module")
def app(serve_app):
    """The app with its default settings, for the module; a module that needs other settings
    overrides `app` with serve_app(its settings)."""
    return serve_app()


@pytest.fixture()
def client(app):
    """An HTTP client of the module's served app (each module's `app` fixture)."""
    with httpx.Client(base_url=app.url, timeout=120) as c:
        yield c
