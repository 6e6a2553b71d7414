// The listening-QA workbench: every take kept (IndexedDB, static/workbench/takes.js) with its
// samples, settings and figures; one take at a time on screen (static/workbench/waveview.js) with its
// boundary scores, A/B against another take or its offline render, blind ABX, its scores, its
// words and subtitles, notes and exports.

import { FLAG_THRESHOLD } from './analysis.js';
import { BoundaryList } from './boundarylist.js';
import { Compare } from './compare.js';
import { TakeFields, moveInList, summary, takeRow, wireListing } from './listing.js';
import { listed, narrowed } from './sorting.js';
import { Markers, RegionFields } from './markers.js';
import { wireKeys } from './keys.js';
import { wireDrops } from './drops.js';
import { measure } from './measures.js';
import { Evaluation } from './evaluate.js';
import { Words } from './words.js';
import { keepClip, putClipBack } from './clip.js';
import { Segments } from './segments.js';
import { ViewMemory } from './memory.js';
import { Landmarks } from './landmarks.js';
import { bundle, curlCommand, fileName, report, wavWithInfo } from './export.js';
import { TakeStore, audioSettings, formOfTake, settingsDiff, takeOf, totalBytes } from './takes.js';
import { WaveView } from './waveview.js';
import { drawn, fieldValue, fillForm, showTab } from '../page/gradio.js';
import { counted, pauseLabel, pauseSpans } from '../player/panel.js';
import { liveText } from '../player/live.js';
import { route, spec } from '../player/server.js';
import { isLive } from './livetake.js';

export class Workbench {
  constructor() {
    this.root = null;
    this.store = new TakeStore();
    this.takes = [];
    this.selected = null;
    this.ready = null;
  }

  start() {
    this.ready = this.load();
  }

  // What the tests and the console read: the ABX player and the last A−B difference.
  get abx() {
    return this.compare?.abx;
  }

  get lastDifference() {
    return this.compare?.last;
  }

  el(name) {
    return this.root && this.root.querySelector(`[data-wb="${name}"]`);
  }

  // The markup is drawn when Gradio draws the page: then wire it and list the takes.
  async load() {
    this.root = await drawn('#vox-workbench');
    // The patch's length, the rate and what the browser may keep, as the server states them.
    this.served = await spec().catch(() => null);
    const served = this.served;
    this.store.limits = served && served.workbench;
    this.view = new WaveView(this.root, served && { patchSeconds: served.patch_samples / served.sample_rate,
      rate: served.sample_rate });
    this.compare = new Compare(this);
    this.segments = new Segments(this.el('segments'), this.view);
    this.markers = new Markers(this);
    this.region = new RegionFields(this);
    this.fields = new TakeFields(this);
    this.boundaryList = new BoundaryList(this);
    this.evaluation = new Evaluation(this);
    this.words = new Words(this);
    this.memory = new ViewMemory(this);
    this.landmarks = new Landmarks(this);
    this.view.onNoB.push(() => this.say('Pick B first (its offline render, another take or a recording): there is no B to switch to.'));
    this.wire();
    this.takes = await this.store.list();
    await this.compare.restore();
    this.render();
    if (this.takes.length) await this.select(this.takes[this.takes.length - 1].id);
  }

  wire() {
    const on = (name, fn) => this.el(name).addEventListener('click', () => fn().catch((e) => this.say(String(e.message || e))));
    on('clear', async () => {
      const n = this.takes.length;
      if (n && window.confirm(`Delete all ${counted(n, 'take')} kept in this browser? (Undo brings them back.)`)) {
        await this.drop(this.takes.map((t) => t.id), `Cleared ${counted(n, 'take')}`);
      }
    });
    on('undo', () => this.undo());
    on('copy', () => this.copy());
    on('wav', async () => this.download(wavWithInfo(new Int16Array(this.selected.pcm), this.selected.sampleRate,
      this.selected), fileName(this.selected, '.wav')));
    on('bundle', async () => this.download(await bundle(this.selected, location.origin, (await this.compare.offlineOf(this.selected, true))?.wav),
      fileName(this.selected, '.zip')));
    this.el('notes').addEventListener('change', () => this.save(this.selected, { notes: this.el('notes').value }));
    this.compare.wire(on);
    wireListing(this, on);
    wireKeys(this);
    wireDrops(this);
    this.el('list').addEventListener('keydown', moveInList);
    this.el('head').addEventListener('click', (e) => { // a gap's position, in the facts
      const at = e.target.closest('button[data-at]');
      if (at) this.view.seek(Number(at.dataset.at));
    });
    this.el('list').addEventListener('click', (e) => {
      const button = e.target.closest('button[data-act]');
      if (button) this.act(button.dataset.act, button.closest('[data-take]').dataset.take).catch((err) => this.say(String(err.message || err)));
    });
  }

  // busy(): whether a newer take is on its way or playing.
  async add(run, busy) {
    await this.ready;
    if (!run.samples || !this.root) return;
    // A stopped stream ends with no status frame; a stopped live run's request is the one its socket named.
    const server = run.final || (await this.jobStatus(run.liveLog?.requestId ?? run.id));
    const take = takeOf(run, (this.takes.at(-1)?.n ?? 0) + 1, server, this.served?.settings);
    take.clip = await keepClip(run, this.takes);
    const evicted = await this.store.put(take);
    this.takes = this.takes.filter((t) => !evicted.includes(t.id)).concat(take);
    this.render();
    await this.reseeded(take);
    // Drawing a take costs the main thread time that a newer stream's player needs: only when idle.
    if (!busy()) await this.select(take.id);
  }

  async jobStatus(id) {
    const response = await fetch(route(`jobs/${id}`), { cache: 'no-store' }).catch(() => null);
    return response && response.ok ? response.json() : null;
  }

  async act(what, id) {
    const take = this.takes.find((t) => t.id === id);
    if (what === 'select') return this.select(id);
    if (what === 'as-b') return this.compare.pick(id);
    if (what === 'reuse') return this.reuse(take);
    if (what === 'delete') return this.drop([id], `Deleted take ${take.n}`);
  }

  // A take from elsewhere (an imported bundle), numbered after the last one here.
  async adopt(take) {
    const here = this.takes.find((t) => t.id === take.id);
    if (here) return this.say(`Not imported: this bundle's take is already here, as take ${here.n}${here.name ? ` “${here.name}”` : ''}.`);
    take.n = (this.takes.at(-1)?.n ?? 0) + 1;
    await this.store.put(take);
    this.takes = await this.store.list();
    this.say(`Imported the bundle as take ${take.n}.`);
    await this.select(take.id);
  }

  // The next (+1) or previous (-1) take in the list as it is filtered and sorted, shown.
  async step(by) {
    const shown = this.listed();
    const i = shown.indexOf(this.selected) + by;
    if (i >= 0 && i < shown.length) await this.select(shown[i].id);
  }

  // What the filter and sort controls ask for (static/workbench/sorting.js).
  criteria() {
    const value = (name) => this.el(name).value;
    return { query: value('filter'), outcome: value('find-outcome'), rating: value('find-rating'), error: value('find-error'),
      gaps: this.el('find-gaps').checked, flagged: this.el('find-flagged').checked, sort: value('sort') };
  }

  // The takes the list shows, in its order.
  listed() {
    return listed(this.takes, this.criteria());
  }

  // Delete and Clear all: undoable until the next thing undoable, the takes kept here until then.
  async drop(ids, what) {
    const gone = this.takes.filter((t) => ids.includes(t.id));
    for (const t of gone) await this.store.remove(t.id);
    this.takes = this.takes.filter((t) => !ids.includes(t.id));
    if (ids.includes(this.selected?.id)) this.selected = null;
    this.undoable = { what: `Restore ${counted(gone.length, 'take')}`, undo: () => this.restore(gone) };
    this.render();
    this.say(`${what}.`);
  }

  async restore(back) {
    if (back.length) await this.store.put(back);
    this.takes = await this.store.list();
    this.render();
    if (!this.selected && back.length) await this.select(back.at(-1).id);
    return `Restored ${counted(back.length, 'take')}.`;
  }

  // The last thing undoable (`undoable`: {what, undo() -> what was done}): deleted takes, a removed marker.
  async undo() {
    const last = this.undoable;
    this.undoable = null;
    this.render();
    this.say(last ? await last.undo() : 'Nothing to undo.');
  }

  // The take's settings back in the form (those applied to the audio included), its seed fixed for
  // the next take; and in a cloning tab its saved voice (or none) in the picker and its clip, where
  // the take kept it, back in the clip box. Where Random seed was on, it comes back on once that
  // take has arrived (add()): later takes do not share a seed. The picker is set first: picking
  // changes the transcript box (static/voices/transcript.js), and the take's own transcript goes
  // in after that. A live take is re-used live (replayLive).
  async reuse(take) {
    await this.reuseSettings(take);
    if (isLive(take)) await this.replayLive(take);
  }

  // A live take's pieces go through the live socket again, at the pace they were sent (issue 58:
  // Re-use made a live take a whole stream, which the A/B table then compared as if the model and
  // app had changed). Not awaited: the replay lasts as long as the typing did.
  async replayLive(take) {
    const said = this.el('message').textContent;
    if (!take.live) {
      return this.say(`${said} It was live text kept before live takes recorded their pieces: "Replay the text" under ` +
        'Live text sends it again at a rate of tokens.');
    }
    const last = take.live.pieces.at(-1);
    this.say(`${said} Its text goes through the live socket again, in ${counted(take.live.pieces.length, 'piece')} ` +
      `at the pace they were sent (${((last?.at_ms ?? 0) / 1000).toFixed(1)} s).`);
    liveText.again(take).catch((err) => this.say(`The live replay failed: ${err.message || err}`));
  }

  async reuseSettings(take) {
    const mode = (await spec()).modes[take.settings.mode];
    const s = take.settings;
    const voice = mode.clip ? await this.pickVoice(take) : '';
    const before = await fillForm(formOfTake(take, mode, this.served?.settings));
    this.reseed = before?.random_seed ? s.seed : null;
    const audio = audioSettings(s, this.served?.settings, mode.clip);
    const said = `Take ${take.n}'s settings are in the form: seed ${s.seed} fixed for the next take` +
      (this.reseed != null ? ' (Random seed comes back on after it)' : '') +
      `, ${audio.join(', ')}${audio.some((x) => x.endsWith('not recorded')) ? ' (left as they were)' : ''}.`;
    if (!mode.clip || voice) return this.say(said);
    if (voice === null) return this.say(`${said} The saved voice “${s.voice}” is no longer in the library.`);
    if (!take.clip) {
      return this.say(`${said} Its clip ${s.clip_name ? `“${s.clip_name}” ` : ''}was not kept in this browser: the server's ` +
        'copy is used while the server keeps it; the clip box is left as it was.');
    }
    this.say(said);
    await putClipBack(take);
    this.say(`${said} Its clip “${take.clip.name}” is back in the clip box.`);
  }

  // The take's saved voice (or none: '') in its tab's picker; null where the library has lost it.
  async pickVoice(take) {
    await showTab(take.settings.mode);
    const select = await drawn(`.vox-voice-pick[data-mode="${take.settings.mode}"] select`);
    const voice = take.settings.voice || '';
    if (![...select.options].some((o) => o.value === voice)) return null;
    select.value = voice;
    select.dispatchEvent(new Event('change', { bubbles: true })); // the voice library keeps the pick from its change event
    return voice;
  }

  // After the take a Re-use made with a fixed seed: Random seed back on, as it was before.
  async reseeded(take) {
    if (this.reseed == null || take.settings.random_seed || take.settings.seed !== this.reseed) return;
    this.reseed = null;
    await fillForm({ mode: fieldValue('mode') || take.settings.mode, random_seed: true });
  }

  // What differs between A and B's settings, under the A/B line: nothing for the offline render
  // (the same request decoded whole), only the settings that differ for another take.
  showSettingsDiff() {
    const box = this.el('settings-diff');
    const a = this.selected;
    const b = this.takes.find((t) => t.id === this.el('b-source').value);
    box.hidden = !a || !b;
    if (box.hidden) return box.replaceChildren();
    const rows = settingsDiff(a, b, this.served?.settings);
    const shown = (v) => (v == null ? '–' : typeof v === 'boolean' ? (v ? 'on' : 'off') : String(v));
    const caption = Object.assign(document.createElement('caption'), { textContent: rows.length
      ? `Settings that differ between A (take ${a.n}) and B (take ${b.n})` : `A (take ${a.n}) and B (take ${b.n}) have the same settings` });
    const head = document.createElement('tr');
    if (rows.length) head.append(...['setting', 'A', 'B'].map((x) => Object.assign(document.createElement('th'), { textContent: x, scope: 'col' })));
    box.replaceChildren(caption, head, ...rows.map(([label, x, y]) => {
      const tr = document.createElement('tr');
      tr.append(Object.assign(document.createElement('th'), { textContent: label, scope: 'row' }),
        ...[x, y].map((v) => { // a long text cut to a few lines; the whole of it in the tooltip
          const text = shown(v);
          return Object.assign(document.createElement('td'), { textContent: text.length > 200 ? `${text.slice(0, 199)}…` : text, title: text });
        }));
      return tr;
    }));
  }

  // The take on screen, as the voice library saves "the last take" (after a reload, no run has arrived).
  shown() {
    const t = this.selected;
    return t && { chunks: [new Int16Array(t.pcm)], sampleRate: t.sampleRate, body: { text: t.settings.text } };
  }

  // The take on screen once it is drawn: `selected` changes only then, so whoever waits for it finds
  // its marks on the waveform.
  async select(id) {
    const t = this.takes.find((x) => x.id === id) || null;
    if (!t) {
      this.selected = null;
      return this.render();
    }
    const measured = !t.measures;
    if (measured) t.measures = measure(new Int16Array(t.pcm), t.sampleRate); // once per take, then kept
    const marks = t.scores.map((s, i) => ({ id: `b-${i}`, sample: s.offset, color: s.flagged ? '#c62828' : null,
      label: s.flagged ? `⚠ ${s.score.toFixed(1)}×` : null }));
    t.figures.underrun_times.forEach((u, i) => marks.push({ id: `u-${i}`, sample: u.at_samples, color: '#b26a00',
      label: `gap ${u.gap_ms == null ? '?' : Math.round(u.gap_ms)} ms` }));
    (t.segments?.ends || []).slice(0, -1).forEach((end, i) => marks.push({ id: `s-${i}`, sample: end,
      color: '#7c3aed', label: `§${i + 2}` }));
    pauseSpans(t.boundaries, t.sampleRate).forEach((p, i) => marks.push({ id: `p-${i}`, sample: p.start, color: '#475569',
      label: pauseLabel(p) }));
    await this.view.show(t, marks);
    this.selected = t;
    this.render();
    this.segments.show(t);
    this.markers.show();
    this.fields.show(t);
    this.evaluation.show(t);
    this.words.show(t);
    this.el('notes').value = t.notes || '';
    this.showBoundaries(t);
    this.boundaryList.show(t);
    this.compare.showAbx();
    this.memory.restore(t);
    await this.compare.pick(this.memory.b(t));
    if (measured) await this.store.update(t);
  }

  showBoundaries(take) {
    const flagged = take.scores.filter((s) => s.flagged);
    const worst = take.scores.reduce((m, s) => Math.max(m, s.score), 0);
    this.el('boundaries').textContent = `${take.scores.length} chunk boundaries; ${flagged.length} flagged above ` +
      `${FLAG_THRESHOLD}× the neighbouring sample steps (worst ${worst.toFixed(1)}×)` +
      (flagged.length ? `: at ${flagged.map((s) => `${(s.offset / take.sampleRate * 1000).toFixed(0)} ms`).join(', ')}` : '') +
      (take.boundaries?.some((b) => b.pause) ? '. The edges of pauses are not scored: their silence is exact by design.' : '');
  }

  async save(take, changes) {
    if (!take) return;
    Object.assign(take, changes);
    await this.store.update(take);
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

  // The message line under the toolbar; `near`: the line beside A's label instead, for what a key
  // pressed on the waveform did (]: "Gap at…"): the toolbar is far above a waveform in view.
  // Each empties the other, so neither keeps saying what is no longer so.
  say(text, near = false) {
    const [here, there] = near ? ['wave-said', 'message'] : ['message', 'wave-said'];
    this.el(there).textContent = '';
    this.el(here).textContent = text;
    if (near) this.el(here).scrollIntoView({ block: 'nearest' });
  }

  // A take on screen that the filter takes out of the list stays on screen (a filter is typed a
  // letter at a time: the take would go and come back), and says so above its waveform.
  showFiltered(shown) {
    const t = this.selected;
    const out = Boolean(t) && !shown.includes(t);
    this.el('filtered').hidden = !out;
    if (out) this.el('filtered-text').textContent = `Take ${t.n} is filtered out of the list above (it lists ` +
      `${shown.length ? counted(shown.length, 'other take') : 'none'}): it stays here until you show another.`;
  }

  render() {
    if (!this.root) return;
    const list = this.el('list');
    const shown = this.listed();
    const c = this.criteria();
    this.el('find-summary').textContent = `Outcome, rating, error rate, gaps; sort${narrowed({ ...c, query: '' }) || c.sort !== 'newest' ? ' (in use)' : ''}`;
    const focusable = shown.includes(this.selected) ? this.selected : shown[0];
    list.replaceChildren(...shown.map((t) => takeRow(t, this.served?.settings, t === this.selected, t === focusable)));
    const mb = (totalBytes(this.takes) / 2 ** 20).toFixed(1);
    this.el('storage').textContent = `${narrowed(c) ? `${shown.length} of ` : ''}${this.takes.length} take${this.takes.length === 1 ? '' : 's'}, ${mb} MB of ` +
      `${this.store.limits ? this.store.limits.kept_mb : '?'} MB kept in this browser`;
    this.el('view').hidden = !this.selected;
    this.showFiltered(shown);
    this.el('undo').hidden = !this.undoable;
    this.el('undo').setAttribute('aria-label', this.undoable ? `Undo: ${this.undoable.what}` : 'Undo');
    const select = this.el('b-source');
    const keep = select.value;
    select.replaceChildren(new Option('nothing yet', ''), new Option('its offline render', 'offline'),
      ...this.takes.filter((t) => t !== this.selected).map((t) => new Option(`take ${t.n}`, t.id)), ...this.compare.options());
    select.value = [...select.options].some((o) => o.value === keep) ? keep : '';
    if (this.selected) this.el('head').replaceChildren(...summary(this.selected, this.served?.settings));
  }
}

export const workbench = new Workbench();

// A run that has ended, kept as a take; busy(): whether a newer take is on its way or playing.
export function addTake(run, busy) {
  return workbench.add(run, busy);
}

// The name the player's Download WAV gives a run: the one its take's WAV will have here.
export function runFileName(run) {
  const b = run.body;
  const settings = { mode: b.mode, seed: run.seed, cfg_value: b.cfg_value, inference_timesteps: b.inference_timesteps };
  return fileName({ n: (workbench.takes.at(-1)?.n ?? 0) + 1, settings }, '.wav');
}

// The take the workbench shows, in the shape of a run (chunks, sampleRate, body.text), or null.
export function shownTake() {
  return workbench.shown();
}
