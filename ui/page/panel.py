"""Markup of the page's two panels; nothing here runs.

The player panel: status, live metrics (each saying what it includes), real-time meters, and the WAV offered
after the stream; static/player/panel.js fills it in. The voice library: save the current clip or
the last take under a name, and the list of saved voices (play, rename, delete); static/voices/voices.js
fills it in and drives it, and gives the cloning tabs a saved-voice picker (VOICE_PICKER)."""
from __future__ import annotations

import html

VOICE_PICKER = '<div class="vox-voice-pick" data-mode="{mode}"></div>'

# (field, label, what the figure includes)
METRICS = [
    ("ttfb", "TTFP: first byte", "from pressing Generate to the first PCM byte in this browser: queue wait, "
                           "prompt encoding, first patch, network"),
    ("ttfa", "TTFP: first sound", "from pressing Generate to the first sample the player renders, plus the "
                                  "output latency the browser reports (includes the prebuffer wait)"),
    ("server_ttfp", "Server first patch", "server clock: from leaving the queue to the first patch "
                                          "decoded (no queue wait, no network)"),
    ("server_rtf", "Server RTF", "server clock: generation time ÷ audio length; below 1 is faster than "
                                "real time (from the server's clock in each chunk's metadata frame)"),
    ("client_rtf", "Client RTF", "this browser's clock: time since pressing Generate ÷ audio received "
                                "(includes queue wait and network)"),
    ("chunks", "Chunks", "patches received (0.16 s each, counted from the stream's frames; network reads "
                         "in brackets)"),
    ("audio", "Audio", "received and played by the player"),
    ("buffer", "Buffer", "audio waiting in the player's jitter buffer"),
    ("underruns", "Underruns", "times the player ran dry after it had started, with the gaps' total length "
                               "(0 means no gap)"),
    ("seed", "Seed used", "the seed this run used; turn off the random seed and enter it to repeat it"),
    ("retries", "Retries", "segments of a long text generated again because they ran on without stopping "
                           "(the seed each segment kept is in the job status)"),
]


LIVE_TEXT = """
<div id="vox-live" class="vox-live">
  <p class="vox-note">Text spoken while it is still being written, as when a language model streams it
  (<code>WS /v1/audio/speech/stream</code>): each clause is spoken as soon as it is complete, in the voice
  the form above gives (a description, a saved voice, or the tab's clip). Type below after Start, or paste a text and
  replay it at a rate of tokens like a model's.</p>
  <textarea data-live="text" rows="3" aria-label="Live text" placeholder="Type or paste the text to speak"></textarea>
  <div class="vox-live-row">
    <button type="button" data-live="start">Start: speak as I type</button>
    <button type="button" data-live="replay">Replay the text</button>
    <label>at <input type="number" data-live="rate" min="1" max="200" step="1" value="20" aria-label="Tokens per second">
      tokens/s</label>
    <button type="button" data-live="finish">Finish</button>
  </div>
  <div class="vox-live-status" data-live="status" role="status" aria-live="polite">Not started.</div>
</div>"""


def panel_html(sample_rate: int, prebuffer_ms: float) -> str:
    rows = "\n".join(
        f'<div class="vox-metric" title="{html.escape(note)}"><span class="vox-name">{html.escape(label)}</span>'
        f'<span class="vox-value" data-field="{field}">–</span><span class="vox-note">{html.escape(note)}</span></div>'
        for field, label, note in METRICS)
    return f"""
<div id="vox-panel">
  <div class="vox-status" data-field="status" data-kind="info" role="status" aria-live="polite">Ready.</div>
  {_pace_meter("server", "Generation on the server")}
  {_pace_meter("client", "Delivery to this browser")}
  <div class="vox-metrics">{rows}</div>
  <div class="vox-spoken">
    <div><span class="vox-name">Now speaking</span> <span data-field="segment_label"></span></div>
    <div class="vox-now" data-field="now_speaking"></div>
    <details><summary>Text as spoken</summary><div data-field="spoken_text"></div></details>
  </div>
  <div class="vox-words" data-field="words" hidden>
    <div class="vox-name">Words as they play</div>
    <div class="vox-words-text" data-field="words_text"
         aria-label="The take's words, each segment's once the server has aligned it; the word being spoken is highlighted"></div>
    <div class="vox-words-note" data-field="words_note" role="status"></div>
  </div>
  <div class="vox-result" data-field="result" hidden>
    <div class="vox-result-title">Replay or download (does not play by itself)</div>
    <audio controls preload="metadata" aria-label="Replay of the last take"></audio>
    <div class="vox-replay-time" data-field="replay_time" aria-label="Replay position"></div>
    <div><a class="vox-download" download>Download WAV</a> <span data-field="result_note"></span></div>
  </div>
  <div class="vox-footnote">Playback: AudioWorklet at {int(sample_rate)} Hz, prebuffer {float(prebuffer_ms):g} ms.</div>
</div>"""


def _pace_meter(source: str, label: str) -> str:
    # A meter with its own name: screen readers announce "Generation on the server, 12.5x real time".
    return f"""<div class="vox-pace-row"><span class="vox-pace-name">{label}</span>
  <div class="vox-pace" role="meter" aria-label="{label}" aria-valuemin="-1" aria-valuemax="2" aria-valuenow="-1"
       data-field="pace_{source}" title="times real time on a log scale from 0.1x to 100x; the line marks 1x">
    <div class="vox-pace-fill"></div><div class="vox-pace-mark"></div></div>
  <span class="vox-pace-label" data-field="pacelabel_{source}">–</span></div>"""


def voice_panel_html() -> str:
    return """
<div id="vox-voices">
  <div class="vox-voices-save">
    <input type="text" class="vox-voice-name" maxlength="64" placeholder="Name for a new voice, e.g. Anna" aria-label="Voice name">
    <button type="button" class="vox-save-clip" title="The clip of the cloning tab in use, with the transcript typed there (ultimate cloning)">Save the current clip</button>
    <button type="button" class="vox-save-take" title="The take the listening-QA workbench shows (else the last one to arrive), with its text (pause tags left out) as the transcript: keeps a designed voice">Save the take on screen</button>
  </div>
  <div class="vox-voices-status" role="status" aria-live="polite"></div>
  <ul class="vox-voices-list"></ul>
  <div class="vox-voices-api">From scripts and OpenAI clients: <code>POST /v1/audio/speech</code> with
    <code>voice</code> set to a saved voice's name, or <code>"design"</code> with <code>instructions</code>
    (base URL <code>/v1</code>, model <code>voxcpm2</code>; see docs/api.md).</div>
</div>"""
