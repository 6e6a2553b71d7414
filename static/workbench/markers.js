// Markers: a point of a take worth coming back to, with a note, kept with the take (in the browser's
// store and in its report and bundle). Drawn on the waveform as M1, M2...; listed under it, where a
// marker's time seeks there and its note is edited.

import { fileName, wavWithInfo } from './export.js';

const COLOR = '#0f766e';

export class Markers {
  constructor(wb) {
    this.wb = wb;
    this.list = wb.el('markers');
    wb.el('marker-add').addEventListener('click', () => this.add());
    this.list.addEventListener('click', (e) => this.onClick(e));
    this.list.addEventListener('change', (e) => this.onNote(e));
  }

  take() {
    return this.wb.selected;
  }

  // A marker at the cursor, its note field in focus.
  async add() {
    const t = this.take();
    if (!t) return;
    const ms = Math.round(this.wb.view.a.getCurrentTime() * 10000) / 10;
    const markers = [...(t.markers || []), { ms, note: '' }].sort((a, b) => a.ms - b.ms);
    const saved = this.wb.save(t, { markers }); // the take holds them at once: drawn and in focus before the store answers
    this.show();
    this.list.querySelector(`li[data-ms="${ms}"] input`)?.focus();
    await saved;
  }

  show() {
    const t = this.take();
    const view = this.wb.view;
    view.unmark('m-');
    const markers = t?.markers || [];
    markers.forEach((m, i) => view.mark({ id: `m-${i}`, sample: (m.ms / 1000) * t.sampleRate, color: COLOR, label: `M${i + 1}` }));
    this.list.hidden = !markers.length;
    this.list.replaceChildren(...markers.map((m, i) => {
      const li = document.createElement('li');
      li.dataset.ms = m.ms;
      li.dataset.index = i;
      const seek = Object.assign(document.createElement('button'), { type: 'button', className: 'vox-wb-button',
        textContent: `M${i + 1} at ${m.ms.toFixed(1)} ms` });
      seek.dataset.act = 'seek';
      const note = Object.assign(document.createElement('input'), { type: 'text', value: m.note, placeholder: 'note' });
      note.setAttribute('aria-label', `Note of marker ${i + 1}`);
      const drop = Object.assign(document.createElement('button'), { type: 'button', className: 'vox-wb-button', textContent: 'Remove' });
      drop.dataset.act = 'remove';
      drop.setAttribute('aria-label', `Remove marker ${i + 1}`);
      li.append(seek, note, drop);
      return li;
    }));
  }

  async onClick(e) {
    const button = e.target.closest('button[data-act]');
    if (!button) return;
    const i = Number(button.closest('li').dataset.index);
    const t = this.take();
    if (button.dataset.act === 'seek') return this.wb.view.seek(t.markers[i].ms / 1000);
    await this.wb.save(t, { markers: t.markers.filter((_, j) => j !== i) });
    this.show();
  }

  async onNote(e) {
    const li = e.target.closest('li[data-index]');
    if (!li) return;
    const t = this.take();
    const markers = t.markers.map((m, j) => (j === Number(li.dataset.index) ? { ...m, note: e.target.value } : m));
    await this.wb.save(t, { markers });
  }
}

// The selection as numbers: typed in ms it selects on the waveform, dragged on the waveform it
// fills the fields; and exported as a WAV of exactly those samples (with the take's settings).
export class RegionFields {
  constructor(wb) {
    this.wb = wb;
    const el = (name) => wb.el(name);
    this.from = el('region-from');
    this.to = el('region-to');
    wb.view.onSelect.push((selection) => this.fill(selection));
    el('region-set').addEventListener('click', () => this.apply());
    for (const box of [this.from, this.to]) box.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.apply(); });
    el('region-wav').addEventListener('click', () => this.download());
  }

  // The fields show the selection, whatever made it; none (a new take on screen) empties them.
  fill(selection) {
    this.from.value = selection ? (selection.start * 1000).toFixed(1) : '';
    this.to.value = selection ? (selection.end * 1000).toFixed(1) : '';
  }

  apply() {
    const from = Number(this.from.value);
    const to = Number(this.to.value);
    const end = this.wb.view.a.getDuration() * 1000;
    if (!(from >= 0 && to > from && to <= end + 0.5)) return this.wb.say(`A selection runs from 0 to ${end.toFixed(1)} ms, start before end.`);
    this.wb.view.select(from / 1000, Math.min(to, end) / 1000);
  }

  // The samples [round(from * rate), round(to * rate)) of the take.
  samples() {
    const take = this.wb.selected;
    const s = this.wb.view.selection;
    if (!s) return null;
    const rate = take.sampleRate;
    return { from: Math.round(s.start * rate), to: Math.round(s.end * rate), rate };
  }

  download() {
    const take = this.wb.selected;
    const cut = this.samples();
    if (!cut) return this.wb.say('Select a region first: drag on the waveform, or type it in ms.');
    const pcm = new Int16Array(take.pcm).slice(cut.from, cut.to);
    const ms = (n) => Math.round((n / cut.rate) * 1000);
    this.wb.download(wavWithInfo(pcm, cut.rate, take), fileName(take, `-${ms(cut.from)}-${ms(cut.to)}ms.wav`));
  }
}
