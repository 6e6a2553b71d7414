// What a take keeps across a reload besides its samples and figures: the B it was last compared
// with and the selection on its waveform (both saved with the take, so showing it again brings
// them back); the recording loaded as B is kept by Compare (static/workbench/compare.js).

const QUIET_MS = 300; // a selection grown key by key (Shift+arrows) is written once, when it rests

export class ViewMemory {
  constructor(wb) {
    this.wb = wb;
    this.timer = null;
    this.pending = null; // {take, kept}: the selection the timer will write, and whose it is
    wb.view.onSelect.push((selection) => this.selected(selection));
  }

  // The selection changed on the take on screen; a take being drawn empties it first, which is no
  // change of the take's (`shown` is null while it is drawn).
  selected(selection) {
    const take = this.wb.selected;
    if (!take || this.wb.view.shown !== take.id) return;
    if (this.pending?.take !== take) this.flush(); // another take's, made just before the switch: written, not dropped
    clearTimeout(this.timer);
    this.pending = { take, kept: selection && { start: selection.start, end: selection.end } };
    this.timer = setTimeout(() => this.flush(), QUIET_MS);
  }

  flush() {
    clearTimeout(this.timer);
    const pending = this.pending;
    this.pending = null;
    if (pending) this.wb.save(pending.take, { selection: pending.kept });
  }

  // The take's selection back on its waveform, once it is drawn.
  restore(take) {
    const s = take.selection;
    if (s && s.end <= this.wb.view.a.getDuration() + 1e-6) this.wb.view.select(s.start, s.end);
  }

  // The take's B, where it is still there to show: the offline render, another kept take, or the
  // recording loaded as B; else nothing.
  b(take) {
    const b = take.b || '';
    const there = b === 'offline' || (b === 'file' && this.wb.compare.recording)
      || this.wb.takes.some((t) => t.id === b && t !== take);
    return there ? b : '';
  }
}
