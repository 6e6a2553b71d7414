// Markers: a point of a take worth coming back to, of a kind (a click, a glitch, a mispronounced
// word, or other) and with a note, kept with the take (in the browser's store and in its report
// and bundle). Drawn on the waveform as M1, M2...; listed under it, where a marker's time seeks
// there and its kind and note are edited. A marker made by key leaves the focus on the waveform:
// a QA engineer marks as they listen, several times, and writes the notes afterwards.

import { fileName, wavWithInfo } from './export.js';

export const KINDS = ['other', 'click', 'glitch', 'mispronunciation'];
const COLORS = { other: '#0f766e', click: '#9d174d', glitch: '#b45309', mispronunciation: '#1d4ed8' };

// A marker's name on the waveform and in its row: M2, or M2 glitch.
const title = (m, i) => `M${i + 1}${m.kind && m.kind !== 'other' ? ` ${m.kind}` : ''}`;

export class Markers {
  constructor(wb) {
    this.wb = wb;
    this.list = wb.el('markers');
    this.kind = wb.el('marker-kind');
    this.kind.replaceChildren(...KINDS.map((k) => new Option(k, k)));
    // The button: a pointer user has left the waveform anyway, and goes on to write the note.
    wb.el('marker-add').addEventListener('click', () => this.add(this.kind.value, true));
    this.list.addEventListener('click', (e) => this.onClick(e));
    this.list.addEventListener('change', (e) => this.onChange(e));
    // Enter in a note: back to the waveform (leaving the field keeps the note: its change event).
    this.list.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && e.target.matches('input')) wb.el('wave-a').focus();
    });
  }

  take() {
    return this.wb.selected;
  }

  // A marker at the cursor, of `kind` (the picker's by default); `focusNote`: its note field takes
  // the focus, else the focus stays where it was (the waveform, for the keys).
  async add(kind = this.kind.value, focusNote = false) {
    const t = this.take();
    if (!t) return;
    const ms = Math.round(this.wb.view.current().getCurrentTime() * 10000) / 10;
    const marker = { ms, note: '', kind };
    const markers = [...(t.markers || []), marker].sort((a, b) => a.ms - b.ms);
    this.last = marker;
    const saved = this.wb.save(t, { markers }); // the take holds them at once: drawn before the store answers
    this.show();
    const i = markers.indexOf(marker);
    // By key, said beside the waveform where the marker went; by the button, the note in focus.
    this.wb.say(`${title(marker, i)} at ${ms.toFixed(1)} ms.${focusNote ? '' : ' Press e to write its note.'}`, !focusNote);
    if (focusNote) this.note(i)?.focus();
    await saved;
  }

  // The note field of the marker last made (else the last one), in focus: the e key.
  editLast() {
    const markers = this.take()?.markers || [];
    if (!markers.length) return this.wb.say('No marker yet: m puts one at the cursor.');
    const i = markers.includes(this.last) ? markers.indexOf(this.last) : markers.length - 1;
    this.note(i)?.focus();
  }

  note(i) {
    return this.list.querySelector(`li[data-index="${i}"] input`);
  }

  show() {
    const t = this.take();
    const view = this.wb.view;
    view.unmark('m-');
    const markers = t?.markers || [];
    markers.forEach((m, i) => view.mark({ id: `m-${i}`, sample: (m.ms / 1000) * t.sampleRate,
      color: COLORS[m.kind] || COLORS.other, label: title(m, i) }));
    this.list.hidden = !markers.length;
    this.list.replaceChildren(...markers.map((m, i) => row(m, i)));
  }

  async onClick(e) {
    const button = e.target.closest('button[data-act]');
    if (!button) return;
    const i = Number(button.closest('li').dataset.index);
    const t = this.take();
    if (button.dataset.act === 'seek') return this.wb.view.seek(t.markers[i].ms / 1000);
    const gone = t.markers[i];
    await this.wb.save(t, { markers: t.markers.filter((_, j) => j !== i) });
    this.show();
    this.focusAfterRemoval(i);
    this.wb.undoable = { what: `Put back ${title(gone, i)}`, undo: () => this.putBack(t, gone) };
    this.wb.render();
    const renumbered = i < t.markers.length ? ` The markers after it are numbered one less (M${i + 2} is now M${i + 1}): they count in time order.` : '';
    this.wb.say(`Removed ${title(gone, i)} at ${gone.ms.toFixed(1)} ms. (Undo brings it back.)${renumbered}`);
  }

  // The removed row's button had the focus, and went with its row (the focus fell to the page):
  // the next marker's Remove takes it, else the one before's, else the waveform where the
  // markers are made.
  focusAfterRemoval(i) {
    const remove = (j) => this.list.querySelector(`li[data-index="${j}"] button[data-act=remove]`);
    (remove(i) || remove(i - 1) || this.wb.el('wave-a')).focus();
  }

  async putBack(take, marker) {
    await this.wb.save(take, { markers: [...take.markers, marker].sort((a, b) => a.ms - b.ms) });
    if (take === this.take()) this.show();
    return `Put back the marker at ${marker.ms.toFixed(1)} ms.`;
  }

  // A row's note or kind, edited.
  async onChange(e) {
    const li = e.target.closest('li[data-index]');
    if (!li) return;
    const t = this.take();
    const field = e.target.matches('select') ? 'kind' : 'note';
    const markers = t.markers.map((m, j) => (j === Number(li.dataset.index) ? { ...m, [field]: e.target.value } : m));
    await this.wb.save(t, { markers });
    if (field === 'kind') this.show();
  }
}

// A marker's row: its time (a click seeks there), kind, note and a button that removes it.
function row(m, i) {
  const li = document.createElement('li');
  li.dataset.ms = m.ms;
  li.dataset.index = i;
  const seek = Object.assign(document.createElement('button'), { type: 'button', className: 'vox-wb-button',
    textContent: `M${i + 1} at ${m.ms.toFixed(1)} ms` });
  seek.dataset.act = 'seek';
  const kind = document.createElement('select');
  kind.replaceChildren(...KINDS.map((k) => new Option(k, k)));
  kind.value = m.kind || 'other';
  kind.setAttribute('aria-label', `Kind of marker ${i + 1}`);
  const note = Object.assign(document.createElement('input'), { type: 'text', value: m.note, placeholder: 'note' });
  note.setAttribute('aria-label', `Note of marker ${i + 1}`);
  const drop = Object.assign(document.createElement('button'), { type: 'button', className: 'vox-wb-button', textContent: 'Remove' });
  drop.dataset.act = 'remove';
  drop.setAttribute('aria-label', `Remove marker ${i + 1}`);
  li.append(seek, kind, note, drop);
  return li;
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
