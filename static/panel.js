// The live metrics panel: every figure is written here, on every chunk and every worklet report.
// The markup (with what each figure includes) is in ui/panel.py; this file only fills it in.

const dash = '–';
const ms = (v) => (v == null ? dash : `${Math.round(v)} ms`);
const ratio = (v) => (v == null || !isFinite(v) ? dash : v.toFixed(3));
const secs = (samples, rate) => `${(samples / rate).toFixed(2)} s`;

export class Panel {
  constructor(root) {
    this.root = root;
  }

  field(name) {
    return this.root ? this.root.querySelector(`[data-field="${name}"]`) : null;
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
    this.speed(null);
    this.hideResult();
  }

  // Everything the run knows so far; cheap enough to call on every chunk.
  update(run) {
    const rate = run.sampleRate;
    this.set('ttfb', ms(run.firstByteAt == null ? null : run.firstByteAt - run.t0));
    this.set('ttfa', ms(run.audibleAt == null ? null : run.audibleAt - run.t0 + run.outputLatencyMs));
    const server = run.server || {};
    this.set('server_ttfp', ms(server.ttfp_s == null ? null : server.ttfp_s * 1000));
    this.set('server_rtf', ratio(server.rtf));
    this.set('client_rtf', ratio(run.clientRtf()));
    this.set('chunks', `${run.reads} reads / ${server.patches ?? dash} patches`);
    this.set('audio', `${secs(run.samples, rate)} received, ${secs(run.played, rate)} played ` +
      `(${run.samples} / ${run.played} samples)`);
    this.set('buffer', `${Math.round((run.buffered / rate) * 1000)} ms`);
    this.set('underruns', String(run.underruns));
    this.set('seed', run.seed ?? dash);
    this.spoken(server, run.played);
    this.speed(server.rtf ?? run.clientRtf(), server.rtf != null ? 'server' : 'client');
  }

  // The text as the model reads it (normalized, in segments) and the segment the listener hears:
  // the first whose audio ends after the samples played so far.
  spoken(server, played) {
    if (!server.segments) return;
    this.set('spoken_text', server.spoken_text);
    const ends = server.segment_ends || [];
    let now = ends.findIndex((end) => end > played);
    if (now < 0) now = Math.max(0, ends.length - 1);
    this.set('segment_label', `segment ${now + 1} of ${server.segment_count}`);
    this.set('now_speaking', (server.segments[now] ?? '').trim() || dash);
    this.set('retries', String((server.retries || []).length));
  }

  // Generation speed on a log scale from 0.1x to 100x real time; the mark sits at 1x.
  speed(rtf, source) {
    const fill = this.field('speedbar');
    if (!fill) return;
    if (rtf == null || !isFinite(rtf) || rtf <= 0) {
      fill.style.width = '0%';
      this.set('speedlabel', 'generation speed: –');
      return;
    }
    const speed = 1 / rtf;
    const pos = Math.min(1, Math.max(0, (Math.log10(speed) + 1) / 3));
    fill.style.width = `${(pos * 100).toFixed(1)}%`;
    fill.dataset.slow = speed < 1 ? 'true' : 'false';
    this.set('speedlabel', `generation speed: ${speed.toFixed(1)}× real time (${source} RTF)`);
  }

  showResult(url, filename, note) {
    const box = this.field('result');
    if (!box) return;
    const audio = box.querySelector('audio');
    audio.autoplay = false; // the utterance has just played live: replay only on request
    audio.src = url;
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
