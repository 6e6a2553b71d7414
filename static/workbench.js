// The listening-QA workbench: every take kept (IndexedDB, static/takes.js) with its samples,
// settings and figures; one take at a time on screen (static/waveview.js) with its boundary
// scores, A/B against another take or its offline render, blind ABX, notes and exports.

import { FLAG_THRESHOLD, boundaryScores, describeDifference, difference } from './analysis.js';
import { bundle, curlCommand, fileName, report, wavWithInfo } from './export.js';
import { readWav } from './pcm.js';
import { MAX_BYTES, TakeStore, totalBytes } from './takes.js';
import { WaveView } from './waveview.js';

const API = new URL('../', import.meta.url);
const SNR_BOUND_DB = 50; // stream == offline up to float rounding (float32 VAE: 56.7 dB on an H200, >100 dB on CPU; bench/RESULTS.md)

// A finished, stopped or failed run as a take: its samples, what was asked, what was measured.
export function takeOf(run, n) {
  const pcm = new Int16Array(run.samples);
  let at = 0;
  for (const c of run.chunks) { pcm.set(c, at); at += c.length; }
  const offsets = run.boundaries.map((b) => b.offset);
  const scores = boundaryScores(pcm, offsets);
  const final = run.final || {};
  const b = run.body;
  const rate = run.sampleRate;
  return {
    id: run.id, n, created: new Date().toISOString(), sampleRate: rate, pcm: pcm.buffer, body: b, outcome: run.state,
    status: run.error || '', notes: '', abx: [], boundaries: run.boundaries, scores,
    settings: { mode: b.mode, text: b.text, text_as_spoken: final.spoken_text ?? b.text, control: b.control ?? null,
      prompt_text: b.prompt_text ?? null, clip_name: run.clip ?? null, reference_id: b.reference_id ?? null,
      seed: run.seed, cfg_value: b.cfg_value, inference_timesteps: b.inference_timesteps, max_len: b.max_len,
      model: final.model ?? null, revision: final.revision ?? null, app_version: final.app_version ?? null },
    figures: { first_byte_ms: run.firstByteAt == null ? null : run.firstByteAt - run.t0,
      first_sound_ms: run.audibleAt == null ? null : run.audibleAt - run.t0 + run.outputLatencyMs,
      server_first_patch_ms: final.ttfp_s == null ? null : final.ttfp_s * 1000, server_rtf: run.serverRtf(),
      client_rtf: run.clientRtf(), patches: run.boundaries.length, samples: run.samples, seconds: run.samples / rate,
      underruns: run.underruns, gap_ms: run.gapMs(),
      underrun_times: run.underrunTimes.map((u) => ({ at_samples: u.at, at_ms: (u.at / rate) * 1000, gap_ms: u.gapMs })),
      flagged_boundaries: scores.filter((s) => s.flagged).length, flag_threshold: FLAG_THRESHOLD },
  };
}

export class Workbench {
  constructor(app) {
    this.app = app;
    this.store = new TakeStore();
    this.takes = [];
    this.selected = null;
    this.offline = new Map(); // take id -> {pcm, wav} of its offline render, fetched on demand
    this.ready = document.readyState === 'loading'
      ? new Promise((r) => document.addEventListener('DOMContentLoaded', r)).then(() => this.load()) : this.load();
  }

  el(name) {
    return this.root && this.root.querySelector(`[data-wb="${name}"]`);
  }

  // Gradio renders the markup after this module runs: wait for it, then wire it and list the takes.
  async load() {
    for (let i = 0; i < 600 && !document.getElementById('vox-workbench'); i++) await new Promise((r) => setTimeout(r, 100));
    this.root = document.getElementById('vox-workbench');
    if (!this.root) return;
    this.view = new WaveView(this.root);
    this.wire();
    this.takes = await this.store.list();
    this.render();
    if (this.takes.length) await this.select(this.takes[this.takes.length - 1].id);
  }

  wire() {
    const on = (name, fn) => this.el(name).addEventListener('click', () => fn().catch((e) => this.say(String(e.message || e))));
    on('clear', async () => { await this.store.clear(); this.takes = []; this.selected = null; this.render(); });
    on('copy', () => this.copy());
    on('wav', async () => this.download(wavWithInfo(new Int16Array(this.selected.pcm), this.selected.sampleRate,
      this.selected), fileName(this.selected, '.wav')));
    on('bundle', async () => this.download(await bundle(this.selected, location.origin, (await this.offlineOf(this.selected, true))?.wav),
      fileName(this.selected, '.zip')));
    this.el('b-source').addEventListener('change', () => this.compare().catch((e) => this.say(String(e.message || e))));
    this.el('notes').addEventListener('change', () => this.save(this.selected, { notes: this.el('notes').value }));
    on('abx-start', async () => this.abxStart());
    for (const w of ['a', 'b', 'x']) on(`abx-play-${w}`, async () => this.abxPlay(w.toUpperCase()));
    for (const w of ['a', 'b']) on(`abx-answer-${w}`, async () => this.abxAnswer(w.toUpperCase()));
    this.el('list').addEventListener('click', (e) => {
      const button = e.target.closest('button[data-act]');
      if (button) this.act(button.dataset.act, button.closest('[data-take]').dataset.take).catch((err) => this.say(String(err.message || err)));
    });
  }

  async add(run) {
    await this.ready;
    if (!run.samples || !this.root) return;
    const take = takeOf(run, (this.takes.at(-1)?.n ?? 0) + 1);
    const evicted = await this.store.put(take);
    this.takes = this.takes.filter((t) => !evicted.includes(t.id)).concat(take);
    this.render();
    // Drawing a take costs the main thread time that a newer stream's player needs: only when idle.
    if (!this.app.live()) await this.select(take.id);
  }

  async act(what, id) {
    const take = this.takes.find((t) => t.id === id);
    if (what === 'select') return this.select(id);
    if (what === 'as-b') { this.el('b-source').value = id; return this.compare(); }
    if (what === 'reuse') return reuse(take);
    if (what === 'delete') {
      await this.store.remove(id);
      this.takes = this.takes.filter((t) => t.id !== id);
      if (this.selected?.id === id) this.selected = null;
      this.render();
    }
  }

  async select(id) {
    this.selected = this.takes.find((t) => t.id === id) || null;
    this.render();
    if (!this.selected) return;
    const t = this.selected;
    const marks = t.scores.map((s, i) => ({ id: `b-${i}`, sample: s.offset, color: s.flagged ? '#c62828' : null,
      label: s.flagged ? `⚠ ${s.score.toFixed(1)}×` : null }));
    t.figures.underrun_times.forEach((u, i) => marks.push({ id: `u-${i}`, sample: u.at_samples, color: '#b26a00',
      label: `gap ${u.gap_ms == null ? '?' : Math.round(u.gap_ms)} ms` }));
    await this.view.show(t, marks);
    this.el('notes').value = t.notes || '';
    this.showBoundaries(t);
    this.showAbx();
    this.el('b-source').value = '';
    await this.compare();
  }

  async offlineOf(take, quiet = false) {
    if (!this.offline.has(take.id)) {
      const response = await fetch(new URL(`jobs/${take.id}/offline.wav`, API), { cache: 'no-store' });
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
  async compare() {
    const a = this.selected;
    const source = this.el('b-source').value;
    this.el('diff').dataset.ok = '';
    if (!source) {
      await this.view.showB(null);
      this.el('diff').textContent = 'Pick B: the offline render (decoded on the server on demand) or another take.';
      return;
    }
    this.el('diff').textContent = 'Fetching B…';
    const other = this.takes.find((t) => t.id === source);
    let pcm = null;
    try {
      pcm = other ? new Int16Array(other.pcm) : (await this.offlineOf(a)).pcm;
    } catch (err) {
      await this.view.showB(null);
      this.lastDifference = null;
      this.el('diff').textContent = `No offline render: ${err.message}`;
      return;
    }
    await this.view.showB(pcm);
    const d = difference(new Int16Array(a.pcm), pcm);
    this.lastDifference = d;
    const verdict = other ? '' : d.snrDb >= SNR_BOUND_DB && d.lengthA === d.lengthB
      ? ` ✓ stream = offline within the bound (SNR ≥ ${SNR_BOUND_DB} dB)` : ` ✗ beyond the bound (SNR ≥ ${SNR_BOUND_DB} dB)`;
    this.el('diff').textContent = `A (take ${a.n}) vs B (${other ? `take ${other.n}` : 'offline render'}): ${describeDifference(d)}.${verdict}`;
    this.el('diff').dataset.ok = other ? '' : String(verdict.includes('✓'));
  }

  abxStart() {
    this.abx = { x: Math.random() < 0.5 ? 'A' : 'B' };
    this.showAbx('Trial running: listen to A, B and X, then answer.');
  }

  abxPlay(which) {
    const side = which === 'X' ? this.abx?.x : which;
    if (!side) return this.showAbx('Start a trial first.');
    this.view.switchTo(side, false); // X plays its side without saying which
    this.root.dataset.active = which;
    this.el('switch').textContent = which === 'X' ? 'Listening to X' : this.el('switch').textContent;
    this.view.current().play();
  }

  async abxAnswer(answer) {
    if (!this.abx) return this.showAbx('Start a trial first.');
    const trial = { x: this.abx.x, answer, correct: answer === this.abx.x, b: this.el('b-source').value,
      at: new Date().toISOString() };
    this.abx = null;
    await this.save(this.selected, { abx: [...this.selected.abx, trial] });
    this.showAbx(`X was ${trial.x}: ${trial.correct ? 'correct' : 'wrong'}.`);
  }

  showAbx(message = '') {
    const trials = this.selected?.abx || [];
    const right = trials.filter((t) => t.correct).length;
    this.el('abx-score').textContent = `${message} ABX: ${right} of ${trials.length} correct`.trim();
  }

  showBoundaries(take) {
    const flagged = take.scores.filter((s) => s.flagged);
    const worst = take.scores.reduce((m, s) => Math.max(m, s.score), 0);
    this.el('boundaries').textContent = `${take.scores.length} chunk boundaries; ${flagged.length} flagged above ` +
      `${FLAG_THRESHOLD}× the neighbouring sample steps (worst ${worst.toFixed(1)}×)` +
      (flagged.length ? `: at ${flagged.map((s) => `${(s.offset / take.sampleRate * 1000).toFixed(0)} ms`).join(', ')}` : '');
  }

  async save(take, changes) {
    if (!take) return;
    Object.assign(take, changes);
    await this.store.put(take);
  }

  async copy() {
    const take = this.selected;
    const text = `${JSON.stringify(report(take, location.origin), null, 2)}\n\n${curlCommand(take, location.origin)}\n`;
    this.copied = text;
    try { await navigator.clipboard.writeText(text); this.say('Copied the take (JSON and curl) to the clipboard.'); } catch (err) {
      this.say('The browser refused the clipboard: the text is selected below the take list instead.');
    }
  }

  download(blob, name) {
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = name;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
  }

  say(text) {
    this.el('message').textContent = text;
  }

  render() {
    if (!this.root) return;
    const list = this.el('list');
    list.replaceChildren(...this.takes.slice().reverse().map((t) => takeRow(t, t.id === this.selected?.id)));
    const mb = (totalBytes(this.takes) / 2 ** 20).toFixed(1);
    this.el('storage').textContent = `${this.takes.length} takes, ${mb} MB of ${MAX_BYTES / 2 ** 20} MB kept in this browser`;
    this.el('view').hidden = !this.selected;
    const select = this.el('b-source');
    const keep = select.value;
    select.replaceChildren(new Option('nothing yet', ''), new Option('its offline render', 'offline'),
      ...this.takes.filter((t) => t !== this.selected).map((t) => new Option(`take ${t.n}`, t.id)));
    select.value = [...select.options].some((o) => o.value === keep) ? keep : '';
    if (this.selected) this.el('head').replaceChildren(...summary(this.selected));
  }
}

function takeRow(t, selected) {
  const li = document.createElement('li');
  li.dataset.take = t.id;
  li.className = selected ? 'vox-take selected' : 'vox-take';
  const f = t.figures;
  const state = t.outcome === 'failed' ? 'failed' : f.underruns ? `${f.underruns} gaps` : t.outcome;
  const label = document.createElement('span');
  label.textContent = `#${t.n} ${t.settings.mode} · seed ${t.settings.seed} · cfg ${t.settings.cfg_value} · ` +
    `${t.settings.inference_timesteps} steps · ${f.seconds.toFixed(2)} s · ${state}` +
    (f.flagged_boundaries ? ` · ${f.flagged_boundaries} flagged` : '');
  const buttons = [['select', 'Show'], ['as-b', 'Compare as B'], ['reuse', 'Re-use settings'], ['delete', 'Delete']]
    .map(([act, text]) => {
      const b = Object.assign(document.createElement('button'), { textContent: text, type: 'button', className: 'vox-wb-button' });
      b.setAttribute('aria-label', `${text}: take ${t.n}`);
      b.dataset.act = act;
      return b;
    });
  li.append(label, ...buttons);
  return li;
}

function summary(t) {
  const s = t.settings;
  const f = t.figures;
  const fmt = (v, d = 0, unit = '') => (v == null || !isFinite(v) ? '–' : `${v.toFixed(d)}${unit}`);
  const rows = [
    ['Take', `#${t.n}, ${t.created}, ${t.outcome}${t.status ? `: ${t.status}` : ''}`],
    ['Settings', `${s.mode}, seed ${s.seed}, cfg ${s.cfg_value}, ${s.inference_timesteps} timesteps, max ${s.max_len} patches`],
    ['Text as spoken', s.text_as_spoken],
    [s.mode === 'design' ? 'Description' : 'Style / transcript', s.control || s.prompt_text || '–'],
    ['Clip', s.clip_name ? `${s.clip_name} (id ${s.reference_id})` : '–'],
    ['Model', `${s.model ?? '–'} @ ${s.revision ?? '–'}, app ${s.app_version ?? '–'}`],
    ['Figures', `first byte ${fmt(f.first_byte_ms, 0, ' ms')}, first sound ${fmt(f.first_sound_ms, 0, ' ms')}, ` +
      `server first patch ${fmt(f.server_first_patch_ms, 0, ' ms')}, server RTF ${fmt(f.server_rtf, 3)}, client RTF ${fmt(f.client_rtf, 3)}`],
    ['Gaps', f.underruns ? `${f.underruns} underruns, ${Math.round(f.gap_ms)} ms: ` +
      f.underrun_times.map((u) => `${Math.round(u.at_ms)} ms`).join(', ') : 'none'],
  ];
  return rows.map(([k, v]) => {
    const row = document.createElement('div');
    row.className = 'vox-wb-fact';
    row.append(Object.assign(document.createElement('b'), { textContent: `${k}: ` }), document.createTextNode(v));
    return row;
  });
}

// Fills the form with a take's settings (the clip by its server id, while the server keeps it).
function reuse(take) {
  const s = take.settings;
  const tab = { design: 'Voice design', cloning: 'Controllable cloning', ultimate: 'Ultimate cloning' }[s.mode];
  [...document.querySelectorAll('#vox-modes button[role="tab"]')].find((b) => b.textContent.trim() === tab)?.click();
  const put = (selector, value) => {
    const el = document.querySelector(selector);
    if (!el || value == null) return;
    if (el.type === 'checkbox') el.checked = value; else el.value = String(value);
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
  };
  put('#vox-text textarea', s.text);
  put('#vox-description textarea', s.mode === 'design' ? s.control ?? '' : null);
  put('#vox-clone-style textarea', s.mode === 'cloning' ? s.control ?? '' : null);
  put('#vox-ultimate-transcript textarea', s.mode === 'ultimate' ? s.prompt_text : null);
  put(s.mode === 'cloning' ? '#vox-clone-ref textarea' : '#vox-ultimate-ref textarea', s.reference_id);
  put('#vox-cfg input[type=number]', s.cfg_value);
  put('#vox-steps input[type=number]', s.inference_timesteps);
  put('#vox-max-len input[type=number]', s.max_len);
  put('#vox-random-seed input[type=checkbox]', false);
  put('#vox-seed input', s.seed);
  return Promise.resolve();
}
