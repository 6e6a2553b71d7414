// The selection as numbers: typed in ms it selects on the waveform, dragged on the waveform it
// fills the fields; and exported as a WAV of exactly those samples (with the take's settings).

import { fileName, wavWithInfo } from './export.js';

export class RegionFields {
  constructor(wb) {
    this.wb = wb;
    const el = (name) => wb.el(name);
    this.from = el('region-from');
    this.to = el('region-to');
    const view = wb.view;
    for (const event of ['region-created', 'region-updated']) {
      view.regions.on(event, (r) => { if (r === view.selection || r.id === 'selection') this.fill(r); });
    }
    el('region-set').addEventListener('click', () => this.apply());
    for (const box of [this.from, this.to]) box.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.apply(); });
    el('region-wav').addEventListener('click', () => this.download());
  }

  fill(region) {
    this.from.value = (region.start * 1000).toFixed(1);
    this.to.value = (region.end * 1000).toFixed(1);
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
