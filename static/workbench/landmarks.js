// The places of a take worth hearing again: its flagged boundaries (above the boundary list's
// threshold, as the waveform marks them red) and its gaps (where the player ran dry). ] and [ move
// the cursor to the next or previous one, and say which it is beside A's label, where the eyes are.

const EPSILON_S = 0.0005; // the cursor on a place already: the next one is the one after it

export class Landmarks {
  constructor(wb) {
    this.wb = wb;
  }

  // {seconds, says} of each place, in time order.
  of(take) {
    const rate = take.sampleRate;
    const threshold = this.wb.boundaryList.threshold;
    const boundaries = take.scores.filter((s) => s.score > threshold).map((s) => ({ seconds: s.offset / rate,
      says: `Flagged boundary at ${(s.offset / rate * 1000).toFixed(1)} ms (${s.score.toFixed(1)}× the neighbouring steps)` }));
    const gaps = take.figures.underrun_times.map((u) => ({ seconds: u.at_samples / rate,
      says: `Gap at ${(u.at_samples / rate * 1000).toFixed(1)} ms (${u.gap_ms == null ? '?' : Math.round(u.gap_ms)} ms long)` }));
    return [...boundaries, ...gaps].sort((a, b) => a.seconds - b.seconds);
  }

  // dir: +1 the next place after the cursor, -1 the last one before it.
  go(dir) {
    const take = this.wb.selected;
    if (!take) return;
    const now = this.wb.view.current().getCurrentTime();
    const places = this.of(take);
    const place = dir > 0 ? places.find((p) => p.seconds > now + EPSILON_S)
      : places.filter((p) => p.seconds < now - EPSILON_S).at(-1);
    if (!places.length) return this.wb.say('This take has no flagged boundary and no gap.', true);
    if (!place) return this.wb.say(dir > 0 ? 'No flagged boundary or gap after the cursor.' : 'No flagged boundary or gap before the cursor.', true);
    this.wb.view.seek(place.seconds);
    this.wb.say(`${place.says}.`, true);
  }
}
