// B and what is measured against it: the offline render of A (the whole-sequence decode of the same
// latents, fetched from the server on demand) or another take, their difference, and blind ABX.

import { describeDifference, difference } from './analysis.js';
import { route } from '../player/server.js';
import { readWav, wavBlob } from '../player/pcm.js';
import WaveSurfer from '../vendor/wavesurfer/wavesurfer.esm.js';
import { addSpectrogram } from './waveview.js';

const SNR_BOUND_DB = 50; // stream == offline up to float rounding (float32 VAE: 56.7 dB on an H200, >100 dB on CPU; docs/benchmarks.md)

export class Compare {
  constructor(wb) {
    this.wb = wb;
    this.el = (name) => wb.el(name);
    this.offline = new Map(); // take id -> {pcm, wav} of its offline render, fetched on demand
    this.abx = new Abx();
    this.last = null; // the last difference measured
    this.diffView = new DiffView(wb.root, wb.view);
  }

  wire(on) {
    this.el('b-source').addEventListener('change', () => this.show().catch((e) => this.wb.say(String(e.message || e))));
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
      const speed = take.settings.speed ?? 1; // stretched as the stream was (ui/services/renders.py)
      const response = await fetch(route(`jobs/${take.id}/offline.wav${speed === 1 ? '' : `?speed=${speed}`}`), { cache: 'no-store' });
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

  // B: the offline render of A (the whole-sequence decode of the same latents) or another take.
  async show() {
    const a = this.wb.selected;
    const source = this.el('b-source').value;
    this.el('diff').dataset.ok = '';
    if (!source) {
      this.abx.load(null);
      await this.wb.view.showB(null);
      await this.diffView.show(null);
      this.el('diff').textContent = 'Pick B: the offline render (decoded on the server on demand) or another take.';
      return;
    }
    this.el('diff').textContent = 'Fetching B…';
    const other = this.wb.takes.find((t) => t.id === source);
    let pcm = null;
    try {
      pcm = other ? new Int16Array(other.pcm) : (await this.offlineOf(a)).pcm;
    } catch (err) {
      this.abx.load(null);
      await this.wb.view.showB(null);
      await this.diffView.show(null);
      this.last = null;
      this.el('diff').textContent = `No offline render: ${err.message}`;
      return;
    }
    await this.wb.view.showB(pcm);
    await this.diffView.show(new Int16Array(a.pcm), pcm, a.sampleRate);
    this.abx.load(new Int16Array(a.pcm), pcm, a.sampleRate);
    const d = difference(new Int16Array(a.pcm), pcm);
    this.last = d;
    const verdict = other ? '' : d.snrDb >= SNR_BOUND_DB && d.lengthA === d.lengthB
      ? ` ✓ stream = offline within the bound (SNR ≥ ${SNR_BOUND_DB} dB)` : ` ✗ beyond the bound (SNR ≥ ${SNR_BOUND_DB} dB)`;
    this.el('diff').textContent = `A (take ${a.n}) vs B (${other ? `take ${other.n}` : 'offline render'}): ${describeDifference(d)}.${verdict}`;
    this.el('diff').dataset.ok = other ? '' : String(verdict.includes('✓'));
  }

  abxStart() {
    if (!this.abx.ready()) return this.showAbx('Pick B first: ABX compares this take (A) with B.');
    const trials = Math.max(1, Math.min(100, Math.round(Number(this.el('abx-trials').value) || 10)));
    this.wb.view.stop();
    this.abx.start(trials);
    this.showAbx(`Trial 1 of ${trials}: listen to A, B and X, then say which X is.`);
  }

  abxPlay(which) {
    this.wb.view.stop(); // X plays through the ABX player: no cursor, readout or button says which side it is
    if (!this.abx.session && which === 'X') return this.showAbx('Start a session first.');
    if (!this.abx.play(which)) this.showAbx('Pick B first: ABX compares this take (A) with B.');
  }

  async abxAnswer(answer) {
    const session = this.abx.session;
    if (!session) return this.showAbx('Start a session first.');
    const done = this.abx.answer(answer, { b: this.el('b-source').value });
    if (!done) return this.showAbx(`Trial ${session.answers.length + 1} of ${session.trials}: answered so far ` +
      `${session.answers.length}; the score comes at the end.`);
    await this.wb.save(this.wb.selected, { abx: [...this.wb.selected.abx, ...done] });
    const all = this.wb.selected.abx; // the score once: the session's, and every session's only where there were others
    this.el('abx-score').textContent = `ABX, this session: ${describeScore(done).replace('ABX: ', '')}.` +
      (all.length > done.length ? ` All sessions of this take: ${describeScore(all).replace('ABX: ', '')}.` : '');
  }

  showAbx(message = '') {
    this.el('abx-score').textContent = `${message} ${describeScore(this.wb.selected?.abx || [])}`.trim();
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
    addSpectrogram(this.ws, { container: el('spectrogram-d'), height: 96 });
    this.loaded = false;
    this.url = null;
    view.onTime.push((t) => { if (this.loaded) this.ws.setTime(Math.min(t, this.ws.getDuration())); });
    this.view = view;
    view.onScale.push((px) => { if (this.loaded) this.ws.zoom(px); });
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
    this.urls = null; // side -> WAV URL, while a B is loaded
    this.session = null; // {trials, x, answers}
    this.side = null;
  }

  // a, b: Int16Array samples (b null: nothing to compare with).
  load(a, b, rate) {
    this.stop();
    this.audio.removeAttribute('src'); this.audio.load(); // let go of the old WAV before its URL is revoked (else it re-requests it)
    if (this.urls) Object.values(this.urls).forEach((u) => URL.revokeObjectURL(u));
    this.urls = b ? { A: URL.createObjectURL(wavBlob([a], rate)), B: URL.createObjectURL(wavBlob([b], rate)) } : null;
    this.session = null;
  }

  ready() {
    return Boolean(this.urls);
  }

  start(trials) {
    this.session = { trials, x: pick(), answers: [] };
  }

  play(which) {
    const side = which === 'X' ? this.session?.x : which;
    if (!side || !this.urls) return false;
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
