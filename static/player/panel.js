// The live metrics panel: every figure is written here, on every chunk and every worklet report.
// The markup (with what each figure includes) is in ui/page/panel.py; this file only fills it in,
// finding it by its id each time (it is drawn when Gradio draws the page).

import { WordsLine } from './words.js';

// "1 underrun", "2 underruns": every count the page shows agrees with its number.
export const counted = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

// The underruns and their gaps' length. A gap still going has no length yet: "0 ms of gap" was
// shown for one, and the player may yet find it was the stream's end (then it is no underrun).
function underrunsLine(run) {
  const n = run.underruns;
  if (!n) return '0';
  const open = run.underrunTimes.at(-1)?.gapMs === null;
  const ms = Math.round(run.gapMs());
  if (!open) return `${n} (${ms} ms of ${n === 1 ? 'gap' : 'gaps'})`;
  const before = n > 1 ? `${ms} ms of gaps before; ` : '';
  const live = ['sending', 'streaming', 'received'].includes(run.state);
  return `${n} (${before}${live ? 'waiting for audio now' : 'the last one not measured'})`;
}

// Where a stream's pauses fell: the chunks whose metadata frame says `pause` hold the exact silence
// a pause tag asked for ([pause 500ms], <break time="500ms"/>: inference/text/pauses.py). Runs of
// them, in samples of the audio received, as the panel and the workbench show them.
export function pauseSpans(boundaries, rate) {
  const spans = [];
  for (const b of boundaries) {
    if (!b.pause) continue;
    const last = spans[spans.length - 1];
    if (last && last.start + last.samples === b.offset) last.samples += b.samples;
    else spans.push({ start: b.offset, samples: b.samples });
  }
  return spans.map((s) => ({ ...s, ms: Math.round((s.samples / rate) * 1000) }));
}

export const pauseLabel = (span) => `pause ${span.ms} ms`;

// The model's patches among the chunks: a pause's silence is not one.
export const patchCount = (boundaries) => boundaries.filter((b) => !b.pause).length;

// The pace bar's words for an RTF: how many times real time. Below 1, two significant digits: one
// decimal read a take slower than a tenth of real time as "0.0×" (issue 58), as if nothing came.
export function timesRealTime(rtf) {
  const times = 1 / rtf;
  return `${times >= 1 ? times.toFixed(1) : String(Number(times.toPrecision(2)))}× real time`;
}

const dash = '–';
const ms = (v) => (v == null ? dash : `${Math.round(v)} ms`);
const ratio = (v) => (v == null || !isFinite(v) ? dash : v.toFixed(3));
const secs = (samples, rate) => `${(samples / rate).toFixed(2)} s`;

export class Panel {
  constructor(id) {
    this.id = id;
    this.words = new WordsLine(this);
  }

  field(name) {
    const root = document.getElementById(this.id);
    return root ? root.querySelector(`[data-field="${name}"]`) : null;
  }

  set(name, text) {
    const el = this.field(name);
    if (el && el.textContent !== text) el.textContent = text;
  }

  status(text, kind = 'info') {
    this.set('status', text);
    const el = this.field('status');
    if (el) el.dataset.kind = kind;
  }

  clear() {
    for (const name of ['ttfb', 'ttfa', 'server_ttfp', 'server_rtf', 'client_rtf', 'chunks', 'audio',
      'buffer', 'underruns', 'seed', 'retries', 'segment_label', 'now_speaking', 'spoken_text']) this.set(name, dash);
    this.pace('server', null);
    this.pace('client', null);
    this.words.clear();
    this.hideResult();
  }

  // Everything the run knows so far; cheap enough to call on every chunk.
  update(run) {
    const rate = run.sampleRate;
    const from = run.t0 + (run.firstFromMs ?? 0); // live text: the first clause's commit
    this.set('ttfb', ms(run.firstByteAt == null ? null : run.firstByteAt - from));
    this.set('ttfa', ms(run.audibleAt == null ? null : run.audibleAt - from + run.outputLatencyMs));
    const final = run.final || {};
    const first = run.boundaries[0];
    this.set('server_ttfp', ms(final.ttfp_s != null ? final.ttfp_s * 1000 : first ? first.server_ms : null));
    this.set('server_rtf', ratio(run.serverRtf()));
    this.set('client_rtf', ratio(run.clientRtf()));
    const patches = patchCount(run.boundaries);
    const pauses = patches < run.boundaries.length ? `, ${counted(run.boundaries.length, 'chunk')} with pauses` : '';
    this.set('chunks', `${counted(patches, 'patch', 'patches')}${pauses} (${counted(run.reads, 'network read')})`);
    this.set('audio', `${secs(run.samples, rate)} received, ${secs(run.played, rate)} played ` +
      `(${run.samples} / ${run.played} samples)`);
    this.set('buffer', run.state === 'stopped' ? 'empty (stopped)' : `${Math.round((run.buffered / rate) * 1000)} ms`);
    this.set('underruns', underrunsLine(run));
    this.set('seed', run.seed ?? dash);
    this.spoken(run.final || run.server || {}, run);
    this.words.update(run);
    this.pace('server', run.serverRtf());
    this.pace('client', run.clientRtf());
  }

  // The text as the model reads it (normalized, in segments, its pause tags where they fall) and the
  // segment the listener hears: the first whose audio ends after the samples played so far, or the
  // pause being heard.
  spoken(server, run) {
    if (!server.segments) return;
    const played = run.played;
    this.set('spoken_text', server.spoken_text);
    const ends = server.segment_ends || [];
    let now = ends.findIndex((end) => end > played);
    if (now < 0) now = Math.max(0, ends.length - 1);
    this.set('segment_label', `segment ${now + 1} of ${server.segment_count}`);
    const pause = server.pauses?.length ? pauseSpans(run.boundaries, run.sampleRate)
      .find((p) => p.start <= played && played < p.start + p.samples) : null;
    this.set('now_speaking', pause ? `(${pauseLabel(pause)})` : (server.segments[now] ?? '').trim() || dash);
    this.set('retries', String((server.retries || []).length));
  }

  // Times real time (1 / RTF) on a log scale from 0.1x to 100x; the mark sits at 1x.
  pace(source, rtf) {
    const bar = this.field(`pace_${source}`);
    if (!bar) return;
    const fill = bar.firstElementChild;
    if (rtf == null || !isFinite(rtf) || rtf <= 0) {
      fill.style.width = '0%';
      bar.setAttribute('aria-valuenow', '-1');
      bar.setAttribute('aria-valuetext', 'not measured yet');
      this.set(`pacelabel_${source}`, dash);
      return;
    }
    const times = 1 / rtf;
    const pos = Math.min(1, Math.max(0, (Math.log10(times) + 1) / 3));
    fill.style.width = `${(pos * 100).toFixed(1)}%`;
    fill.dataset.slow = times < 1 ? 'true' : 'false';
    const text = timesRealTime(rtf);
    bar.setAttribute('aria-valuenow', Math.log10(times).toFixed(2));
    bar.setAttribute('aria-valuetext', text);
    this.set(`pacelabel_${source}`, text);
  }

  showResult(url, filename, note) {
    const box = this.field('result');
    if (!box) return;
    const audio = box.querySelector('audio');
    audio.autoplay = false; // the utterance has just played live: replay only on request
    audio.src = url;
    // The browser's own control rounds to whole seconds (0:00 for a sub-second take): say it exactly.
    const show = () => this.set('replay_time', `${audio.currentTime.toFixed(2)} s of ${(audio.duration || 0).toFixed(2)} s`);
    audio.ontimeupdate = audio.onloadedmetadata = show;
    this.words.replayWith(audio);
    const link = box.querySelector('a');
    link.href = url;
    link.download = filename;
    this.set('result_note', note);
    box.hidden = false;
  }

  hideResult() {
    const box = this.field('result');
    if (!box) return;
    const audio = box.querySelector('audio');
    audio.pause();
    audio.removeAttribute('src');
    audio.load();
    box.hidden = true;
  }
}
