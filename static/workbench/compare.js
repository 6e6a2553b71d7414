// B and what is measured against it: the offline render of A (the whole-sequence decode of the same
// latents, fetched from the server on demand) or another take, their difference, and blind ABX.

import { Abx, describeScore } from './abx.js';
import { describeDifference, difference } from './analysis.js';
import { DiffView } from './diffview.js';
import { route } from '../player/http.js';
import { readWav } from '../player/pcm.js';

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
    this.showAbx(`This session: ${describeScore(done).replace('ABX: ', '')}.`);
  }

  showAbx(message = '') {
    this.el('abx-score').textContent = `${message} ${describeScore(this.wb.selected?.abx || [])}`.trim();
  }
}
