// B and what is measured against it: the offline render of A (the whole-sequence decode of the same
// latents, fetched from the server on demand), another take or a recording loaded from a file (a
// reference, or an earlier build's WAV), their difference, and blind ABX over a region at matched
// loudness.

import { describeDifference, difference } from './analysis.js';
import { route } from '../player/server.js';
import { readWav, wavBlob } from '../player/pcm.js';
import WaveSurfer from '../vendor/wavesurfer/wavesurfer.esm.js';
import { addSpectrogram, nyquist } from './waveview.js';
import { describeClips, matchedClips } from './matched.js';
import { decodeRecording } from './recording.js';

const SNR_BOUND_DB = 50; // stream == offline up to float rounding (float32 VAE: 56.7 dB on an H200, >100 dB on CPU; docs/benchmarks.md)

export class Compare {
  constructor(wb) {
    this.wb = wb;
    this.el = (name) => wb.el(name);
    this.offline = new Map(); // take id -> {pcm, wav} of its offline render, fetched on demand
    this.abx = new Abx();
    this.last = null; // the difference of the B now shown; null while B changes or is none
    this.turn = 0; // which show() is the latest: an older one, still fetching, must not draw over it
    this.diffView = new DiffView(wb.root, wb.view);
    this.recording = null; // {name, file, rate, pcm}: the one loaded from a file, kept until the next
  }

  // The recording last loaded as B, from the browser's store (decoded once it is shown).
  async restore() {
    const kept = await this.wb.store.state('recording').catch(() => null);
    if (kept) this.recording = { name: kept.name, file: new File([kept.bytes], kept.name, { type: kept.type }), rate: null };
  }

  // The select's option for a loaded recording (the workbench lists B's sources).
  options() {
    return this.recording ? [new Option(`loaded: ${this.recording.name}`, 'file')] : [];
  }

  // A recording chosen as B: decoded here, at A's rate, then shown as B.
  async load(file) {
    const rate = this.wb.selected?.sampleRate;
    if (!file || !rate) return;
    const diff = this.el('diff');
    const before = this.el('b-source').value && diff.dataset.line; // what B is now, said again after a refusal
    diff.textContent = `Decoding ${file.name}…`;
    try {
      this.recording = { name: file.name, file, rate, ...(await decodeRecording(file, rate, this.wb.served.workbench)) };
    } catch (err) {
      // Said beside the button, and in the toolbar's message line; B stays what it was.
      diff.textContent = before ? `${err.message} B is unchanged: ${before}` : err.message;
      this.wb.say(err.message);
      return;
    }
    // Kept for the next visit too: a reload lost it (the workbench's storage line does not count it).
    file.arrayBuffer().then((bytes) => this.wb.store.keep({ key: 'recording', name: file.name, type: file.type, bytes }))
      .catch(() => {});
    this.wb.render();
    await this.pick('file');
  }

  wire(on) {
    this.el('b-source').addEventListener('change', () => this.show().catch((e) => this.wb.say(String(e.message || e))));
    const file = this.el('b-file');
    file.addEventListener('change', () => {
      const chosen = file.files[0];
      file.value = ''; // the same file chosen again (after another B) is a change again
      this.load(chosen).catch((e) => this.wb.say(String(e.message || e)));
    });
    on('abx-start', async () => this.abxStart());
    this.el('play').addEventListener('click', () => this.abx.stop());
    for (const w of ['a', 'b', 'x']) on(`abx-play-${w}`, async () => this.abxPlay(w.toUpperCase()));
    for (const w of ['a', 'b']) on(`abx-answer-${w}`, async () => this.abxAnswer(w.toUpperCase()));
  }

  // B as the select names it: '' (nothing), 'offline' or a take's id.
  async pick(source) {
    this.el('b-source').value = source;
    await this.show();
  }

  async offlineOf(take, quiet = false) {
    if (!this.offline.has(take.id)) {
      // Made as the take was heard (its pace, its pauses): inference/request/listener.py.
      const response = await fetch(route(`jobs/${take.id}/offline.wav`), { cache: 'no-store' });
      if (!response.ok) {
        if (quiet) return null;
        const why = await response.json().catch(() => ({}));
        throw new Error(why.error || `the server answered ${response.status}`);
      }
      const wav = await response.arrayBuffer();
      this.offline.set(take.id, { wav, pcm: readWav(wav).pcm });
    }
    return this.offline.get(take.id);
  }

  // B: the offline render of A (the whole-sequence decode of the same latents), another take or
  // the loaded recording.
  async show() {
    const a = this.wb.selected;
    const source = this.el('b-source').value;
    const turn = ++this.turn;
    const stale = () => turn !== this.turn;
    this.last = null;
    this.abx.load(null); // nothing compares against the B being replaced
    this.wb.showSettingsDiff(); // whatever set B (the picker, Compare as B, a file, another take shown)
    if (a && (a.b || '') !== source) this.wb.save(a, { b: source }); // shown with it again (ViewMemory)
    this.el('diff').dataset.ok = '';
    this.el('diff').dataset.line = '';
    if (!source) {
      this.showClips();
      await this.wb.view.showB(null);
      if (stale()) return;
      await this.diffView.show(null);
      if (stale()) return;
      this.el('diff').textContent = 'Pick B: the offline render (decoded on the server on demand) or another take.';
      return;
    }
    this.el('diff').textContent = 'Fetching B…';
    const other = this.wb.takes.find((t) => t.id === source);
    const loaded = source === 'file' ? this.recording : null;
    let pcm = null;
    try {
      if (loaded && loaded.rate !== a.sampleRate) {
        Object.assign(loaded, await decodeRecording(loaded.file, a.sampleRate, this.wb.served.workbench), { rate: a.sampleRate });
      }
      pcm = loaded ? loaded.pcm : other ? new Int16Array(other.pcm) : (await this.offlineOf(a)).pcm;
    } catch (err) {
      if (stale()) return;
      await this.wb.view.showB(null);
      await this.diffView.show(null);
      if (stale()) return;
      this.el('diff').textContent = `No offline render: ${err.message}`;
      return;
    }
    if (stale()) return;
    await this.wb.view.showB(pcm);
    if (stale()) return;
    await this.diffView.show(new Int16Array(a.pcm), pcm, a.sampleRate);
    if (stale()) return;
    this.abx.load(new Int16Array(a.pcm), pcm, a.sampleRate);
    this.showClips(); // a new B: what played before is gone
    const d = difference(new Int16Array(a.pcm), pcm);
    this.last = d;
    const verdict = other || loaded ? '' : d.snrDb >= SNR_BOUND_DB && d.lengthA === d.lengthB
      ? ` ✓ stream = offline within the bound (SNR ≥ ${SNR_BOUND_DB} dB)` : ` ✗ beyond the bound (SNR ≥ ${SNR_BOUND_DB} dB)`;
    const b = other ? `take ${other.n}` : loaded ? `${loaded.name}, ${loaded.describe}` : 'offline render';
    this.el('diff').textContent = `A (take ${a.n}) vs B (${b}): ${describeDifference(d)}.${verdict}`;
    this.el('diff').dataset.line = this.el('diff').textContent;
    this.el('diff').dataset.ok = other || loaded ? '' : String(verdict.includes('✓'));
  }

  abxStart() {
    if (!this.abx.ready()) return this.showAbx('Pick B first: ABX compares this take (A) with B.');
    const trials = Math.max(1, Math.min(100, Math.round(Number(this.el('abx-trials').value) || 10)));
    this.wb.view.stop();
    this.abx.start(trials, this.region());
    this.showClips();
    this.showAbx(`Trial 1 of ${trials}: listen to A, B and X, then say which X is.`);
  }

  abxPlay(which) {
    this.wb.view.stop(); // X plays through the ABX player: no cursor, readout or button says which side it is
    if (!this.abx.session && which === 'X') return this.showAbx('Start a session first.');
    if (!this.abx.play(which, this.region())) return this.showAbx('Pick B first: ABX compares this take (A) with B.');
    this.showClips();
  }

  // The selection on A's waveform in samples, or all of it: what A, B and X play.
  region() {
    const s = this.wb.view.selection;
    const rate = this.wb.selected.sampleRate;
    return s ? [s.start * rate, s.end * rate] : [0, Infinity];
  }

  showClips() {
    const c = this.abx.clips;
    this.el('abx-clip').textContent = c ? `${describeClips(c)}.` : '';
  }

  async abxAnswer(answer) {
    const session = this.abx.session;
    if (!session) return this.showAbx('Start a session first.');
    const c = session.clips;
    const ms = (n) => Math.round((n / c.rate) * 10000) / 10;
    const done = this.abx.answer(answer, { b: this.el('b-source').value, from_ms: ms(c.from), to_ms: ms(c.to),
      gain_a_db: Math.round(c.gainA * 100) / 100, gain_b_db: Math.round(c.gainB * 100) / 100 });
    if (!done) return this.showAbx(`Trial ${session.answers.length + 1} of ${session.trials}: answered so far ` +
      `${session.answers.length}; the score comes at the end.`);
    await this.wb.save(this.wb.selected, { abx: [...this.wb.selected.abx, ...done] });
    const all = this.wb.selected.abx; // the score once: the session's, and every session's only where there were others
    this.el('abx-score').textContent = `ABX, this session: ${describeScore(done).replace('ABX: ', '')}.` +
      (all.length > done.length ? ` All sessions of this take: ${describeScore(all).replace('ABX: ', '')}.` : '');
  }

  // The session's line; the take's score only between sessions (a session is scored at its end).
  showAbx(message = '') {
    const score = this.abx.session ? '' : describeScore(this.wb.selected?.abx || []);
    this.el('abx-score').textContent = `${message} ${score}`.trim();
  }
}

// The difference A−B, drawn under B: its waveform (scaled to fit the strip; the line above it says
// how large it is) and its spectrogram, where whatever differs shows at its time and frequency.
class DiffView {
  constructor(root, view) {
    const el = (name) => root.querySelector(`[data-wb="${name}"]`);
    this.box = el('diff-view');
    this.ws = WaveSurfer.create({ container: el('wave-d'), height: 64, waveColor: '#b91c1c', progressColor: '#7f1d1d',
      cursorColor: '#000', normalize: true, interact: false, minPxPerSec: 100, fillParent: false }); // at A's scale
    addSpectrogram(this.ws, { container: el('spectrogram-d'), height: 96, ...nyquist(view.served) });
    this.loaded = false;
    this.url = null;
    view.onTime.push((t) => { if (this.loaded) this.ws.setTime(Math.min(t, this.ws.getDuration())); });
    this.view = view;
    view.onScale.push((px) => { if (this.loaded) this.ws.zoom(px); });
    view.a.on('scroll', (start, end, left) => { if (this.loaded) this.ws.setScroll(left); }); // under A, wherever A is scrolled
  }

  // a, b: Int16Array samples (b null: no B, nothing drawn), over the samples both hold.
  async show(a, b, rate) {
    const old = this.url; // revoked only once its media element has let go of it (else it re-requests it)
    const release = () => old && URL.revokeObjectURL(old);
    this.url = null;
    this.loaded = false;
    this.box.hidden = !b;
    if (!b) {
      const media = this.ws.getMediaElement();
      media.removeAttribute('src');
      media.load();
      return release();
    }
    const n = Math.min(a.length, b.length);
    const peaks = new Float32Array(n); // half scale: a difference of two full-scale signals still fits in [-1, 1]
    const pcm = new Int16Array(n);
    for (let i = 0; i < n; i++) {
      const v = a[i] - b[i];
      peaks[i] = v / 65536;
      pcm[i] = Math.max(-32768, Math.min(32767, v));
    }
    this.url = URL.createObjectURL(wavBlob([pcm], rate));
    await this.ws.load(this.url, [peaks], n / rate);
    release();
    this.ws.zoom(this.view.pxPerSec());
    this.loaded = true;
  }
}

// Blind ABX: X is A or B at random, and A, B and X play through an audio element of their own, so
// neither waveform's cursor nor the readout says which side X is. A session is a set number of
// trials; its answers are kept (with the take) and scored only once it ends, with the chance of
// doing as well by guessing.
// P(at least `right` of `n` correct by guessing): the one-sided binomial tail at p = 1/2.
export function binomialP(right, n) {
  let tail = 0;
  let c = 1; // C(n, k), built up as k goes
  for (let k = 0; k <= n; k++) {
    if (k >= right) tail += c;
    c = (c * (n - k)) / (k + 1);
  }
  return tail / 2 ** n;
}

export function describeScore(trials) {
  if (!trials.length) return 'ABX: no trials yet';
  const right = trials.filter((t) => t.correct).length;
  const p = binomialP(right, trials.length);
  return `ABX: ${right} of ${trials.length} correct, p = ${p < 0.001 ? p.toExponential(1) : p.toFixed(3)}` +
    (p < 0.05 ? ' (A and B told apart)' : ' (no better than guessing at p < 0.05)');
}

class Abx {
  constructor() {
    this.audio = new Audio();
    this.sides = null; // {a, b, rate}: Int16Array samples, while a B is loaded
    this.clips = null; // what plays: matchedClips() of the region last asked for
    this.urls = null; // side -> WAV URL of this.clips
    this.session = null; // {trials, x, answers, clips}
    this.side = null;
  }

  // a, b: Int16Array samples (b null: nothing to compare with).
  load(a, b, rate) {
    this.stop();
    this.sides = b ? { a, b, rate } : null;
    this.cut(null);
    this.session = null;
  }

  ready() {
    return Boolean(this.sides);
  }

  // The clips of samples [from, to): cut, matched and made playable once per region asked for.
  cut(region) {
    const key = region && region.join(':');
    if (region && this.clips?.key === key) return this.clips;
    if (this.urls) {
      // The element lets go of a URL before it is revoked: one still held is fetched again, and fails, for seconds.
      if (Object.values(this.urls).includes(this.audio.src)) { this.audio.removeAttribute('src'); this.audio.load(); }
      Object.values(this.urls).forEach((u) => URL.revokeObjectURL(u));
    }
    this.clips = null;
    this.urls = null;
    if (!region || !this.sides) return null;
    const { a, b, rate } = this.sides;
    this.clips = { ...matchedClips(a, b, rate, region[0], region[1]), key, region };
    this.urls = { A: URL.createObjectURL(wavBlob([this.clips.a], rate)), B: URL.createObjectURL(wavBlob([this.clips.b], rate)) };
    return this.clips;
  }

  // A session keeps the region it started with: every trial plays the same clips.
  start(trials, region) {
    this.session = { trials, x: pick(), answers: [], clips: this.cut(region) };
  }

  play(which, region) {
    const side = which === 'X' ? this.session?.x : which;
    if (!side || !this.sides) return false;
    if (!this.session) this.cut(region);
    else if (this.clips !== this.session.clips) this.session.clips = this.cut(this.session.clips.region);
    this.audio.src = this.urls[side];
    this.side = which;
    this.audio.play().catch(() => {});
    return true;
  }

  // What is playing as the listener knows it ('A', 'B' or 'X'), or null.
  playing() {
    return this.audio.paused ? null : this.side;
  }

  stop() {
    this.audio.pause();
  }

  // The answer to the running trial; returns the session's trials once the last is answered.
  answer(answer, extra) {
    const s = this.session;
    this.stop();
    s.answers.push({ x: s.x, answer, correct: answer === s.x, at: new Date().toISOString(), ...extra });
    s.x = pick();
    if (s.answers.length < s.trials) return null;
    this.session = null;
    return s.answers;
  }
}

function pick() {
  return Math.random() < 0.5 ? 'A' : 'B';
}
