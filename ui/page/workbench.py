"""Markup of the listening-QA workbench below the player: the take list, one take's waveform,
timeline and spectrogram, A/B and ABX, boundary check, notes and exports; and the list of HTTP
routes beside Gradio's "Use via API" page (which documents only Gradio's endpoints, ui/page/api.py).
static/workbench/workbench.js fills it in; nothing here runs."""
from __future__ import annotations

import html

# (method, path, what it does): the page's own HTTP API, for the "Use via HTTP" list. Extend here.
HTTP_ROUTES = [
    ("POST", "/voxcpm/stream", "JSON {text, mode, control, voice or reference_id, prompt_text, the spec's settings, "
                               "normalize, trim_silence, timestamps} → speech as it is "
                               "generated: bare int16 PCM at 48 kHz, or typed frames with ?format=frames (docs/api.md); "
                               "with timestamps \"word\", a words frame per segment"),
    ("POST", "/voxcpm/upload", "a reference clip (WAV, FLAC, OGG or MP3) → an id for reference_id"),
    ("POST", "/voxcpm/transcribe", "JSON {reference_id} or {voice, save}, or a multipart file → the clip's automatic "
                                   "transcript {text, automatic, model} (ultimate cloning)"),
    ("POST", "/voxcpm/evaluate", "multipart file (a take) + text or segments [+ reference_id, voice or reference] → "
                                 "WER/CER with misread, missing and inserted words, and speaker similarity (JSON)"),
    ("POST", "/voxcpm/align", "multipart file (a take) + text or segments [+ language] → its words timed "
                              "{words: [{word, start_s, end_s, segment}], seconds, elapsed_s}, or with ?format=srt or "
                              "?format=vtt its subtitles"),
    ("GET", "/voxcpm/jobs/{id}", "a request's state, outcome and server figures"),
    ("GET", "/voxcpm/jobs/{id}/words", "the words of a request that asked for timestamps \"word\", timed on its audio"),
    ("GET", "/voxcpm/jobs/{id}/subtitles.srt", "those words as SubRip subtitles; subtitles.vtt as WebVTT"),
    ("GET", "/voxcpm/jobs/{id}/offline.wav", "the offline render of a finished request (whole-sequence VAE decode)"),
    ("POST", "/voxcpm/jobs/{id}/cancel", "stop a request"),
    ("GET", "/voxcpm/spec", "the modes and every request setting with its range, default and help"),
    ("GET", "/voxcpm/health", "200 when serving, 503 while loading"),
    ("GET", "/ready", "200 only when every engine is warm and serving, else 503"),
    ("GET", "/metrics", "Prometheus metrics: requests, TTFP and RTF, rows per GPU, refusals, underruns"),
    ("POST", "/v1/audio/speech", "OpenAI's speech API (model tts-1 or voxcpm2, voice alloy… or a saved voice)"),
    ("WS", "/v1/audio/speech/stream", "text in pieces as an LLM writes it → each clause's PCM as it is made "
                                      "(vLLM-Omni's messages; docs/api.md, Live text)"),
]


def workbench_html() -> str:
    return f"""
<section id="vox-workbench" aria-labelledby="vox-wb-title">
  <h2 id="vox-wb-title">Listening QA</h2>
  <p class="vox-wb-intro">Every take is kept in this browser (it survives a reload) with its settings and figures.
  Chunk boundaries are marked where the stream's frames put them; red ones jump more than their neighbourhood,
  amber marks are gaps the player heard, violet ones where a long text's next segment starts. Drag on the
  waveform (or type the times) to select a region, tick Loop to repeat it; press ? for the keyboard shortcuts.</p>
  <div class="vox-wb-toolbar"><span data-wb="storage">No takes yet.</span>
    <button type="button" class="vox-wb-button" data-wb="clear">Clear all takes</button>
    <button type="button" class="vox-wb-button" data-wb="undo" hidden>Undo</button>
    <button type="button" class="vox-wb-button" data-wb="csv">Export all figures (CSV)</button>
    <button type="button" class="vox-wb-button" data-wb="notes-csv">Export markers and notes (CSV)</button>
    <label class="vox-wb-button">Import bundle… <input type="file" data-wb="import" accept=".zip,application/zip" class="vox-wb-file"></label>
    <span data-wb="message" role="status" aria-live="polite"></span></div>
  {_find()}
  <ol class="vox-wb-takes" data-wb="list" aria-label="Takes, as filtered and sorted above"></ol>
  {_take_view()}
</section>"""


def _find() -> str:
    """Which takes the list shows (static/workbench/sorting.js): words, and behind one tab stop (a
    closed <details>, so Tab still reaches the take soon) outcome, rating, error rate, gaps and
    flagged boundaries, and the order."""
    return """<div class="vox-wb-find"><label>Filter <input type="search" data-wb="filter" placeholder="text, name, tag, mode…"
      aria-label="Filter the takes by their words"></label>
    <details data-wb="find-more"><summary data-wb="find-summary">Outcome, rating, error rate, gaps; sort</summary>
    <div class="vox-wb-find-more" role="group" aria-label="Filter the takes by outcome, rating and figures, and sort them">
    <label>Outcome <select data-wb="find-outcome"><option value="">any</option><option value="finished">finished</option>
      <option value="stopped">stopped</option><option value="cut">cut (at the most audio a request may have)</option>
      <option value="failed">failed</option></select></label>
    <label>Rating <select data-wb="find-rating"><option value="">any</option><option value="5" aria-label="5 of 5">★★★★★</option>
      <option value="4" aria-label="4 or more">★★★★ or more</option><option value="3" aria-label="3 or more">★★★ or more</option>
      <option value="2" aria-label="2 or more">★★ or more</option><option value="1" aria-label="1 or more">★ or more</option>
      <option value="none">not rated</option></select></label>
    <label>Error rate at least <input type="number" data-wb="find-error" min="0" max="100" step="1" placeholder="any"> %</label>
    <label><input type="checkbox" data-wb="find-gaps"> with gaps</label>
    <label><input type="checkbox" data-wb="find-flagged"> with flagged boundaries</label>
    <label>Sort <select data-wb="sort"><option value="newest">newest first</option><option value="oldest">oldest first</option>
      <option value="rating-best">rating, best first</option><option value="rating-worst">rating, worst first</option>
      <option value="error-worst">error rate, worst first</option><option value="similarity-lowest">speaker similarity, lowest first</option>
      <option value="underruns-most">gaps, most first</option><option value="flagged-most">flagged boundaries, most first</option>
      </select></label></div></details></div>"""


def _take_view() -> str:
    """One take on screen: its facts, waveform, timeline, spectrogram, B, ABX, boundaries, notes, exports."""
    return f"""<div class="vox-wb-view" data-wb="view" hidden>
    <p class="vox-wb-filtered" data-wb="filtered" role="status" hidden><span data-wb="filtered-text"></span>
      <button type="button" class="vox-wb-button" data-wb="filter-clear">Clear the filter</button></p>{_about_and_controls()}{_waveform_a()}{_b_and_abx()}
    <div class="vox-wb-boundaries" data-wb="boundaries"></div>{_boundary_list()}{_evaluation()}
    <label class="vox-wb-notes">Notes for this take (kept with it, and in the bundle)
      <textarea data-wb="notes" rows="2"></textarea></label>
    <div class="vox-wb-export">
      <button type="button" class="vox-wb-button" data-wb="copy">Copy take (JSON + curl)</button>
      <button type="button" class="vox-wb-button" data-wb="wav">Download WAV (with settings)</button>
      <button type="button" class="vox-wb-button" data-wb="bundle">Download bundle (zip)</button></div>
  </div>"""


def _evaluation() -> str:
    """The take's scores (static/workbench/evaluate.js): WER/CER and speaker similarity, the text with
    its misread, missing and inserted words marked, and a long text's segments."""
    return """
    <div class="vox-wb-evaluate" role="group" aria-label="This take's word error rate and speaker similarity">
      <button type="button" class="vox-wb-button" data-wb="eval-run">Score this take (WER, speaker similarity)</button>
      <span data-wb="eval-status" role="status" aria-live="polite"></span>
      <div data-wb="eval-summary" class="vox-eval-summary"></div>
      <div data-wb="eval-text" aria-label="The text as spoken: misread (amber), missing (red) and inserted (blue) words; a click jumps there"></div>
      <table data-wb="eval-segments" class="vox-eval-segments" aria-label="Scores per segment; a row jumps to its start" hidden></table></div>"""


def _about_and_controls() -> str:
    """Name, rating and tags; the facts; play, A/B, zoom, loop, readout and the shortcuts' help."""
    return """
    <div class="vox-wb-about" role="group" aria-label="This take's name, rating and tags">
      <label>Name <input type="text" data-wb="name" placeholder="#n"></label>
      <label>Rating <select data-wb="rating" aria-label="Rating: not rated"><option value="" aria-label="not rated">–</option>
        <option value="1" aria-label="1 of 5">★</option><option value="2" aria-label="2 of 5">★★</option>
        <option value="3" aria-label="3 of 5">★★★</option><option value="4" aria-label="4 of 5">★★★★</option>
        <option value="5" aria-label="5 of 5">★★★★★</option></select></label>
      <label>Tags <input type="text" data-wb="tags" placeholder="comma, separated"></label></div>
    <div class="vox-wb-head" data-wb="head"></div>
    <div class="vox-wb-controls">
      <button type="button" class="vox-wb-button" data-wb="play">Play</button>
      <button type="button" class="vox-wb-button" data-wb="switch" aria-pressed="false">Listening to A: switch to B</button>
      <label>Zoom <input type="range" data-wb="zoom" min="20" max="3000" value="100" aria-label="Zoom, pixels per second"></label>
      <label><input type="checkbox" data-wb="loop"> Loop selection</label>
      <span class="vox-wb-readout" data-wb="readout">A at 0.0 ms (sample 0)</span>
      <button type="button" class="vox-wb-button" data-wb="help-open" aria-keyshortcuts="?">Keyboard shortcuts (?)</button>
    </div>
    <dialog class="vox-wb-help" data-wb="help" aria-label="Keyboard shortcuts">
      <form method="dialog"><table><caption>Keyboard shortcuts of the listening-QA workbench</caption><tbody></tbody></table>
      <button class="vox-wb-button">Close (Esc)</button></form></dialog>"""


def _waveform_a() -> str:
    """A's waveform (focusable), its words track, timeline, spectrogram, words and subtitles (static/workbench/words.js),
    segments, the selection in ms and the markers."""
    return """
    <div class="vox-wb-label vox-wb-a-label">A: this take
      <span class="vox-wb-said" data-wb="wave-said" role="status" aria-live="polite"></span></div>
    <div data-wb="wave-a" tabindex="0" role="slider" aria-label="Waveform of take A: arrow keys seek, Shift+arrows select"
      aria-valuemin="0" aria-valuenow="0" aria-valuetext="0.0 ms"></div>
    <div class="vox-wb-words" data-wb="words" role="group" hidden
      aria-label="The take's words at their times (misread ones marked): a click plays from there, arrow keys move"></div>
    <div data-wb="timeline"></div>
    <div data-wb="spectrogram" aria-label="Spectrogram of take A"></div>
    <div class="vox-wb-words-bar" role="group" aria-label="The take's word timestamps and subtitles">
      <button type="button" class="vox-wb-button" data-wb="words-run">Words (align the text to the audio)</button>
      <button type="button" class="vox-wb-button" data-wb="words-srt">Download SRT</button>
      <button type="button" class="vox-wb-button" data-wb="words-vtt">Download WebVTT</button>
      <span data-wb="words-status" role="status" aria-live="polite"></span></div>
    <ol class="vox-wb-segments" data-wb="segments" aria-label="Segments of the text, as spoken: the arrow keys move between them, Enter plays from one" hidden></ol>
    <div class="vox-wb-region" role="group" aria-label="Selection in milliseconds">
      <label>Selection from <input type="number" data-wb="region-from" min="0" step="0.1"> ms</label>
      <label>to <input type="number" data-wb="region-to" min="0" step="0.1"> ms</label>
      <button type="button" class="vox-wb-button" data-wb="region-set">Select</button>
      <button type="button" class="vox-wb-button" data-wb="region-wav">Download selection (WAV)</button>
      <button type="button" class="vox-wb-button" data-wb="marker-add" aria-keyshortcuts="m">Marker at cursor (m)</button>
      <label>of the kind <select data-wb="marker-kind"></select></label></div>
    <ol class="vox-wb-markers" data-wb="markers" aria-label="Markers, with their kinds and notes" hidden></ol>"""


def _b_and_abx() -> str:
    """B's source and waveform, the difference A−B, and blind ABX."""
    return """
    <div class="vox-wb-ab"><label>B: <select data-wb="b-source" aria-label="What B is"></select></label>
      <label class="vox-wb-button">Load a recording as B… <input type="file" data-wb="b-file" class="vox-wb-file"
        accept="audio/*,.wav,.flac,.ogg,.mp3" aria-label="Load a recording (a reference, or an earlier build's WAV) as B"></label>
      <span data-wb="diff" role="status"></span></div>
    <table class="vox-wb-settings-diff" data-wb="settings-diff" hidden></table>
    <div class="vox-wb-label" data-wb="b-label" hidden>B</div>
    <div data-wb="wave-b" aria-label="Waveform of B" hidden></div>
    <div data-wb="timeline-b" hidden></div>
    <div data-wb="diff-view" hidden><div class="vox-wb-label" data-wb="diff-label">A−B: the difference and its spectrogram</div>
      <div class="vox-wb-scaled"><div data-wb="wave-d" aria-label="Waveform of A minus B"></div>
        <div class="vox-wb-yaxis" data-wb="diff-scale" aria-hidden="true"><span></span><span></span><span></span></div></div>
      <div data-wb="spectrogram-d" aria-label="Spectrogram of A minus B"></div></div>
    <div class="vox-wb-abx" role="group" aria-label="Blind ABX test">
      <label>Trials <input type="number" data-wb="abx-trials" min="1" max="100" value="10"></label>
      <button type="button" class="vox-wb-button" data-wb="abx-start">Start ABX session</button>
      <button type="button" class="vox-wb-button" data-wb="abx-play-a">Play A</button>
      <button type="button" class="vox-wb-button" data-wb="abx-play-b">Play B</button>
      <button type="button" class="vox-wb-button" data-wb="abx-play-x">Play X</button>
      <button type="button" class="vox-wb-button" data-wb="abx-answer-a">X is A</button>
      <button type="button" class="vox-wb-button" data-wb="abx-answer-b">X is B</button>
      <span data-wb="abx-score" role="status"></span>
      <span class="vox-wb-abx-clip" data-wb="abx-clip"></span></div>"""


def _boundary_list() -> str:
    """Every scored chunk boundary: time, score, jump; sortable; jump or loop ±50 ms; a threshold."""
    return """
    <div class="vox-wb-blist" data-wb="blist" role="group" aria-label="Chunk boundaries, one by one" hidden>
      <div class="vox-wb-blist-bar"><label>Bad above <input type="number" data-wb="blist-threshold" min="0.1" max="1000"
        step="0.5" aria-label="Threshold: a boundary is bad above this many times the neighbouring sample steps"> ×
        the neighbouring steps</label> <span data-wb="blist-count" role="status"></span></div>
      <div class="vox-wb-blist-box"><table><thead><tr><th scope="col">#</th>
        <th scope="col" data-sort-key="ms" aria-sort="ascending"><button type="button" data-sort="ms">Time</button></th>
        <th scope="col" data-sort-key="score" aria-sort="none"><button type="button" data-sort="score">Score</button></th>
        <th scope="col">Jump (steps)</th><th scope="col">Listen</th></tr></thead>
        <tbody data-wb="blist-rows"></tbody></table></div></div>"""


def http_routes_html() -> str:
    rows = "\n".join(f"<li><code>{m} {html.escape(p)}</code>: {html.escape(what)}</li>" for m, p, what in HTTP_ROUTES)
    return f"""<details id="vox-http-api"><summary>Use via HTTP</summary>
<ul>{rows}</ul>
<p>From Python, <code>gradio_client</code> calls /generate, /generate_stream, /transcribe and /voices: see
"Use via API" at the foot of the page (docs/api.md).</p></details>"""
