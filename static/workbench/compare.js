// B and what is measured against it: the offline render of A (the whole-sequence decode of the same
// latents, fetched from the server on demand), another take or a recording loaded from a file (a
// reference, or an earlier build's WAV), their difference, and blind ABX over a region at matched
// loudness.

import { describeDifference, difference } from './analysis.js';
import { route } from '../player/server.js';
import { readWav } from '../player/pcm.js';
import { describeClips } from './matched.js';
import { decodeRecording } from './recording.js';
import { DiffView } from './diffview.js';
import { Abx, describeScore } from './abx.js';

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
    this.result = null; // the last session's score and what it compared: {take, b, region, text}
    wb.view.onSelect.push(() => { if (this.result && !this.abx.session) this.showAbx(); }); // another region: stale
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
    this.showAbx(); // a result for the B before says it is not this one's
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
    await this.wb.view.showB(pcm, this.bName(a));
    if (stale()) return;
    await this.diffView.show(new Int16Array(a.pcm), pcm, a.sampleRate);
    if (stale()) return;
    this.abx.load(new Int16Array(a.pcm), pcm, a.sampleRate);
    this.showClips(); // a new B: what played before is gone
    const d = difference(new Int16Array(a.pcm), pcm);
    this.last = d;
    const verdict = other || loaded ? '' : d.snrDb >= SNR_BOUND_DB && d.lengthA === d.lengthB
      ? ` ✓ stream = offline within the bound (SNR ≥ ${SNR_BOUND_DB} dB)` : ` ✗ beyond the bound (SNR ≥ ${SNR_BOUND_DB} dB)`;
    this.el('diff').textContent = `A (take ${a.n}) vs B (${this.bName(a, true)}): ${describeDifference(d)}.${verdict}`;
    this.el('diff').dataset.line = this.el('diff').textContent;
    this.el('diff').dataset.ok = other || loaded ? '' : String(verdict.includes('✓'));
  }

  // What B is, as its label and the ABX result name it ("take 3", "reference.wav"); `full`: with a
  // recording's length and rate, as the difference line gives them.
  bName(a, full = false) {
    const source = this.el('b-source').value;
    const other = this.wb.takes.find((t) => t.id === source);
    if (other) return `take ${other.n}`;
    if (source === 'file' && this.recording) return full ? `${this.recording.name}, ${this.recording.describe}` : this.recording.name;
    return source === 'offline' ? `offline render of take ${a.n}` : '';
  }

  abxStart() {
    if (!this.abx.ready()) return this.showAbx('Pick B first: ABX compares this take (A) with B.');
    const trials = Math.max(1, Math.min(100, Math.round(Number(this.el('abx-trials').value) || 10)));
    this.wb.view.stop();
    this.result = null;
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
    const take = this.wb.selected;
    await this.wb.save(take, { abx: [...take.abx, ...done] });
    // The score once: the session's, naming its B and region, and every session's only where there were others.
    const about = `B: ${this.bName(take)}; ${done[0].from_ms.toFixed(1)}–${done[0].to_ms.toFixed(1)} ms`;
    this.result = { take: take.id, b: this.el('b-source').value, region: session.region.join(':'), about,
      text: `ABX, this session (${about}): ${describeScore(done).replace('ABX: ', '')}.` +
        (take.abx.length > done.length ? ` All sessions of this take: ${describeScore(take.abx).replace('ABX: ', '')}.` : '') };
    this.showAbx();
  }

  // The session's line; between sessions the last session's result while its B and region are the
  // ones on screen, marked stale once either changes, else the take's score.
  showAbx(message = '') {
    const line = this.el('abx-score');
    const r = this.result?.take === this.wb.selected?.id ? this.result : null;
    const changed = r && (r.b !== this.el('b-source').value ? 'B' : r.region !== this.region().join(':') ? 'the region' : '');
    line.dataset.stale = String(Boolean(changed && !message));
    if (r && !message && !this.abx.session) {
      line.textContent = changed ? `Stale: ${changed} has changed since the last session, whose result (${r.about}) was: ` +
        `${r.text.replace(/^ABX, this session \([^)]*\): /, '')} Start a session to test this B and region.` : r.text;
      return;
    }
    const score = this.abx.session ? '' : describeScore(this.wb.selected?.abx || []);
    line.textContent = `${message} ${score}`.trim();
  }
}
