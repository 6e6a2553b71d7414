// One take on screen: waveform, timeline and spectrogram (wavesurfer.js, vendored), chunk
// boundaries where the stream's frames put them (flagged ones in red), underruns where the player
// ran dry, a play cursor, zoom, a dragged region to loop, a readout in ms and samples; and a
// second waveform B (another take, or the offline render) that A/B switching jumps to at the same
// position, drawn on A's time axis: a second is as wide on both, the longer of the two fits the
// width until zoomed in, and they scroll together.

import WaveSurfer from '../vendor/wavesurfer/wavesurfer.esm.js';
import RegionsPlugin from '../vendor/wavesurfer/regions.esm.js';
import TimelinePlugin from '../vendor/wavesurfer/timeline.esm.js';
import { toFloat32, wavBlob } from '../player/pcm.js';
import SpectrogramPlugin from '../vendor/wavesurfer/spectrogram.esm.js';
import { scrollOnVerticalSwipe } from './touch.js';
import { axisLabel, axisTicks } from './axis.js';

const COLORS = { wave: '#4a5fc1', progress: '#1e2a78', boundary: 'rgba(90, 90, 90, 0.55)', flagged: '#c62828',
  underrun: '#b26a00', selection: 'rgba(250, 204, 21, 0.35)' };

// No dragToSeek: a drag on the waveform is the Regions plugin's selection (seeking on a drag took
// it over: the drag only moved the cursor); a click still seeks.
function surface(container, extra = {}) {
  return WaveSurfer.create({ container, height: 96, waveColor: COLORS.wave, progressColor: COLORS.progress,
    cursorColor: '#000', cursorWidth: 2, normalize: true, minPxPerSec: 100, ...extra });
}

// Loads int16 samples without a decode: the samples themselves are the peaks.
async function loadPcm(ws, pcm, rate) {
  const url = URL.createObjectURL(wavBlob([pcm], rate));
  await ws.load(url, [toFloat32(pcm)], pcm.length / rate);
  return url;
}

// A mark's label: on one line beside its zero-width region (as plain text it wrapped a word a line);
// `title`, where given, says more on hover.
function tag(text, title) {
  const span = document.createElement('span');
  span.textContent = text;
  if (title) Object.assign(span, { title }).style.pointerEvents = 'auto'; // its mark is not (mark()): the tooltip needs it
  Object.assign(span.style, { whiteSpace: 'nowrap', fontSize: '11px', background: 'rgba(255, 255, 255, 0.8)',
    padding: '0 2px', borderRadius: '3px', display: 'inline-block' });
  return span;
}

// A time axis in its own box. Its secondary labels at the plugin's 0.25 opacity read at 1.7:1: at
// 0.75, 10:1, still lighter than the primary.
function timeline(container) {
  return TimelinePlugin.create({ container, secondaryLabelOpacity: 0.75, formatTimeCallback: axisLabel });
}

export class WaveView {
  // served: the model's patch (seconds) and rate, from GET /voxcpm/spec (null: the timeline keeps
  // wavesurfer's own ticks and the spectrogram its own range).
  constructor(root, served) {
    this.root = root;
    this.served = served;
    this.el = (name) => root.querySelector(`[data-wb="${name}"]`);
    this.regions = RegionsPlugin.create();
    // A time axis under A and one under B, their labels on the patch grid as close as fits (fit()).
    this.timelines = [timeline(this.el('timeline')), timeline(this.el('timeline-b'))];
    // Not stretched to the width by wavesurfer: fit() sets A's scale, which a longer B shares.
    this.a = surface(this.el('wave-a'), { fillParent: false, plugins: [this.regions, this.timelines[0]] });
    addSpectrogram(this.a, { container: this.el('spectrogram'), height: 128, ...nyquist(served) });
    this.b = surface(this.el('wave-b'), { height: 64, waveColor: '#7b8794', progressColor: '#3e4c59', fillParent: false,
      plugins: [this.timelines[1]] });
    this.active = 'A';
    this.rate = null; // the shown take's (show())
    this.zoomed = Number(this.el('zoom').value); // the zoom slider: the fewest pixels per second
    this.selection = null;
    this.shown = null;
    this.urls = [];
    this.onTime = []; // (seconds) => void, on every cursor move of the side listened to
    this.onScale = []; // (pixels per second) => void, whenever A is drawn at another scale
    this.onSelect = []; // ({start, end} in seconds, or null) => void, whenever the selection changes or goes
    this.onNoB = []; // () => void, when A/B switching is asked for with no B to switch to
    this.wire();
  }

  wire() {
    this.regions.enableDragSelection({ color: COLORS.selection, id: 'selection' });
    this.regions.on('region-created', (region) => {
      if (region.id !== 'selection') return;
      if (this.selection && this.selection !== region) this.selection.remove();
      this.selection = region;
      this.selected();
    });
    this.regions.on('region-updated', (region) => { if (region === this.selection) this.selected(); else this.showReadout(); });
    // Loop: playback that runs off the selection's end goes back to its start. A click elsewhere
    // (playing or not) also leaves the region, but that is a seek: the cursor stays where clicked.
    this.regions.on('region-out', (region) => {
      const t = this.a.getCurrentTime();
      const ranOff = this.a.isPlaying() && t >= region.end - 0.05 && t <= region.end + 0.15;
      if (region === this.selection && this.el('loop').checked && this.active === 'A' && ranOff) region.play();
    });
    for (const [from, to] of [[this.a, this.b], [this.b, this.a]]) {
      from.on('interaction', (t) => to.setTime(t)); // a seek on either moves both cursors
      from.on('timeupdate', (t) => { this.showReadout(); if (from === this.current()) this.onTime.forEach((f) => f(t)); });
      for (const event of ['play', 'pause', 'finish']) from.on(event, () => this.showPlaying()); // the button says what is so
    }
    // The timeline and spectrogram are drawn in boxes of their own, below the waveform: zoomed in,
    // they follow its scroll (the plugins draw only what is in view, at the scrolled x).
    // B scrolls with A and A with B: one time axis (a guard stops the echo).
    this.a.on('scroll', (start, end, left) => { this.follow(left); if (this.urlB && Math.abs(this.b.getScroll() - left) > 1) this.b.setScroll(left); });
    this.b.on('scroll', (start, end, left) => { if (Math.abs(this.a.getScroll() - left) > 1) this.a.setScroll(left); });
    for (const ws of [this.a, this.b]) ws.on('redraw', () => this.follow(this.a.getScroll()));
    this.el('wave-a').addEventListener('keydown', (e) => this.onKey(e));
    scrollOnVerticalSwipe(this.el('wave-a'));
    this.el('zoom').addEventListener('input', (e) => { this.zoomed = Number(e.target.value); this.fit(); });
    new ResizeObserver(() => this.fit()).observe(this.el('wave-a')); // the window's width: the axis's scale with it
    this.a.on('redraw', () => this.rescale());
    this.el('play').addEventListener('click', () => this.toggle());
    this.el('switch').addEventListener('click', () => {
      if (this.active === 'A' && !this.urlB) return this.onNoB.forEach((f) => f()); // it said "Listening to B" over nothing
      this.switchTo(this.active === 'A' ? 'B' : 'A');
    });
  }

  async show(take, marks) {
    this.stop();
    // No take is shown while another is drawn: the selection emptied below is no change of the old
    // take's (static/workbench/memory.js saved it as that take's, so every take kept `null`).
    this.shown = null;
    this.rate = take.sampleRate;
    const old = this.urls; // revoked once the new audio replaced them: a media element still on a revoked URL re-requests it
    this.urls = [await loadPcm(this.a, new Int16Array(take.pcm), take.sampleRate)];
    old.forEach((u) => URL.revokeObjectURL(u));
    this.regions.clearRegions();
    this.selection = null;
    this.selected();
    for (const mark of marks) this.mark(mark);
    this.switchTo('A', false);
    this.fit();
    this.shown = take.id; // the take the waveform holds, once drawn: a drag before it would be cleared
  }

  mark({ id, sample, color, label, title }) {
    const t = sample / this.rate;
    const region = this.regions.addRegion({ id, start: t, end: t, color: color || COLORS.boundary, drag: false,
      resize: false, content: label ? tag(label, title) : undefined });
    // A mark is only drawn: a drag that starts on its line (one every 160 ms) must still select.
    if (region.element) region.element.style.pointerEvents = 'none';
    setTimeout(() => this.placeLabel(region), 0); // once the plugin has put it in the page (a task later)
  }

  // A mark's label reads rightwards from its line, or leftwards where it would run past the end and
  // be cut off (a gap at a take's last patch); again whenever A is drawn at another width.
  placeLabel(region) {
    const seconds = this.a.getDuration();
    if (!region.content || region.start !== region.end || !seconds) return;
    const room = (1 - region.start / seconds) * this.a.getWrapper().clientWidth;
    region.content.style.transform = room < region.content.offsetWidth + 4 ? 'translateX(-100%)' : '';
  }

  // pcm: B's samples (null: no B); name: what B is, for its label ("B: take 3").
  async showB(pcm, name = '') {
    const old = this.urlB;
    this.urlB = null;
    this.b.pause();
    for (const name of ['b-label', 'wave-b', 'timeline-b']) this.el(name).hidden = !pcm; // no B: no empty strip with a lone cursor line in it
    if (!pcm) {
      this.b.empty();
      const media = this.b.getMediaElement(); // let go of the WAV before its URL is revoked
      media.removeAttribute('src');
      media.load();
      if (old) URL.revokeObjectURL(old);
      return this.fit(); // the axis is A's alone again
    }
    this.el('b-label').textContent = `B: ${name}`;
    this.urlB = await loadPcm(this.b, pcm, this.rate);
    if (old) URL.revokeObjectURL(old);
    this.fit(); // a B longer than A widens the axis: A is drawn again at the new scale too
    this.b.setTime(this.a.getCurrentTime());
  }

  // The seconds the axis spans: A's, or B's where B is longer.
  axisSeconds() {
    return Math.max(this.a.getDuration() || 0, this.urlB ? this.b.getDuration() || 0 : 0);
  }

  // The axis's scale: the zoom's pixels per second, or more where the longer of A and B then fits
  // the width. A, B and the difference are drawn at it, so a time is at the same x on all three
  // whatever their lengths (each filling the width on its own put B's 300 ms under A's 400 ms, for
  // a B a quarter shorter; a recording three times A's length ran on far past A's end).
  pxPerSec() {
    const seconds = this.axisSeconds();
    return Math.max(this.zoomed, seconds ? this.el('wave-a').clientWidth / seconds : 0);
  }

  // A at the axis's scale: after a new take, a new B, the zoom or a change of the window's width.
  // Its redraw then draws the rest at that scale (rescale). Never called from within a redraw:
  // wavesurfer draws synchronously, and a zoom inside its own drawing was overdrawn by the outer one.
  fit() {
    const px = this.pxPerSec();
    this.spaceLabels(px);
    if (this.a.getDuration() && Math.abs(this.a.options.minPxPerSec - px) > 0.01) this.a.zoom(px);
    else this.rescale();
  }

  // Both axes' ticks for the scale they are about to be drawn at (they are drawn on A's and B's
  // redraws, from these options); without the patch's length (no spec), the plugin's own.
  spaceLabels(px) {
    const patch = this.served && this.served.patchSeconds;
    if (patch) this.timelines.forEach((t) => Object.assign(t.options, axisTicks(px, patch)));
  }

  // On every redraw of A: B, the labels and whoever follows the scale, at A's scale; and, where A
  // is not at the axis's (its width changed), A again, once this drawing is done.
  rescale() {
    const px = this.pxPerSec();
    if (this.a.getDuration() && Math.abs(this.a.options.minPxPerSec - px) > 0.01) {
      requestAnimationFrame(() => this.fit());
      return;
    }
    this.regions.getRegions().forEach((r) => this.placeLabel(r));
    // The plugin stacks a label under those it overlaps once, when its mark is added: at another
    // scale (a zoom, the window's width, a scrollbar that came with the take's facts) they were
    // left overlapping or stacked rows deep beside their own lines. Stacked again at this one.
    this.regions.avoidOverlappingAll();
    if (this.urlB && Math.abs(this.b.options.minPxPerSec - px) > 0.01) this.b.zoom(px);
    this.onScale.forEach((f) => f(px));
  }

  // Instant A/B: the other side takes over at the current position, playing if this one was.
  switchTo(which, keepPlaying = true) {
    const [from, to] = which === 'A' ? [this.b, this.a] : [this.a, this.b];
    const playing = keepPlaying && from.isPlaying();
    const t = from.getCurrentTime();
    from.pause();
    to.setTime(t);
    this.active = which;
    if (playing) to.play();
    const button = this.el('switch');
    button.textContent = which === 'A' ? 'Listening to A: switch to B' : 'Listening to B: switch to A';
    button.setAttribute('aria-pressed', which === 'B' ? 'true' : 'false');
    this.root.dataset.active = which;
    this.showPlaying();
  }

  // The waveform in focus: arrows seek 100 ms (Page Up/Down 1 s, Home/End the ends); with Shift
  // they grow the selection from where the cursor was instead.
  onKey(e) {
    const steps = { ArrowLeft: -0.1, ArrowRight: 0.1, PageDown: 1, PageUp: -1, Home: -Infinity, End: Infinity };
    if (!(e.key in steps) || e.ctrlKey || e.metaKey || e.altKey) return;
    e.preventDefault();
    const from = this.current().getCurrentTime();
    const to = Math.max(0, Math.min(this.a.getDuration(), from + steps[e.key]));
    if (e.shiftKey) this.select(this.selection ? Math.min(this.selection.start, to) : Math.min(from, to),
      this.selection ? Math.max(this.selection.end, to) : Math.max(from, to));
    this.seek(to);
  }

  // A selection from `start` to `end` seconds, as a drag would make.
  select(start, end) {
    if (end <= start) return;
    if (this.selection) this.selection.setOptions({ start, end });
    else this.selection = this.regions.addRegion({ id: 'selection', start, end, color: COLORS.selection });
    this.selected();
  }

  // The selection changed (dragged, grown by keys, typed, or gone with the take): the readout and
  // whoever shows it (the From / To fields) follow.
  selected() {
    const s = this.selection;
    this.onSelect.forEach((f) => f(s ? { start: s.start, end: s.end } : null));
    this.showReadout();
  }

  // The timeline, spectrogram and words track drawn as wide as the waveform and shifted by its
  // scroll in boxes that clip them; the spectrogram's frequency labels stay at the left edge.
  // B's axis is as wide as B, which may run on past A's end.
  follow(left) {
    for (const [name, ws] of [['timeline', this.a], ['spectrogram', this.a], ['words', this.a], ['timeline-b', this.b]]) {
      const box = this.el(name);
      const width = ws.getWrapper().scrollWidth;
      box.style.overflow = 'hidden';
      for (const child of box.children) {
        Object.assign(child.style, { width: `${width}px`, transform: left ? `translateX(${-left}px)` : '' });
        const labels = child.querySelector('[part=spec-labels]');
        if (labels) labels.style.transform = left ? `translateX(${left}px)` : '';
      }
    }
  }

  // Both sides to `seconds`, as a click there would.
  seek(seconds) {
    this.a.setTime(seconds);
    this.b.setTime(seconds);
  }

  current() {
    return this.active === 'A' ? this.a : this.b;
  }

  toggle() {
    const ws = this.current();
    if (ws.isPlaying()) ws.pause();
    else if (this.selection && this.active === 'A' && this.el('loop').checked) this.selection.play();
    else ws.play();
    setTimeout(() => this.showPlaying(), 50);
  }

  stop() {
    this.a.pause();
    this.b.pause();
    this.showPlaying();
  }

  showPlaying() {
    this.el('play').textContent = this.current().isPlaying() ? 'Pause' : 'Play';
  }

  position() {
    const t = this.current().getCurrentTime();
    return { ms: t * 1000, samples: Math.round(t * this.rate) };
  }

  showReadout() {
    const { ms, samples } = this.position();
    const wave = this.el('wave-a');
    wave.setAttribute('aria-valuenow', String(Math.round(ms)));
    wave.setAttribute('aria-valuemax', String(Math.round(this.a.getDuration() * 1000) || 0));
    wave.setAttribute('aria-valuetext', `${ms.toFixed(1)} ms`);
    let text = `${this.active} at ${ms.toFixed(1)} ms (sample ${samples})`;
    if (this.selection) {
      const s = Math.round(this.selection.start * this.rate);
      const e = Math.round(this.selection.end * this.rate);
      text += ` · selection ${(s / this.rate * 1000).toFixed(1)}–${(e / this.rate * 1000).toFixed(1)} ms ` +
        `(samples ${s}–${e}, ${e - s} long)`;
    }
    this.el('readout').textContent = text;
  }

  unmark(prefix) {
    this.regions.getRegions().filter((r) => r.id.startsWith(prefix)).forEach((r) => r.remove());
  }

  // Region starts (in samples) of the marks whose id starts with `prefix`: what the page drew.
  marks(prefix) {
    return this.regions.getRegions().filter((r) => r.id.startsWith(prefix)).map((r) => Math.round(r.start * this.rate));
  }

}

// Up to half the model's rate: all the audio holds.
export function nyquist(served) {
  return served && served.rate ? { frequencyMax: served.rate / 2 } : {};
}

// The spectrogram under a waveform. The vendored plugin (wavesurfer.js 7.12.12) keeps the
// frequencies it computed and, when a new load redraws at the same zoom, draws those again: the
// first take's (or the first B's difference) stayed on screen whatever was loaded after it. Its
// cache is cleared as each new audio is decoded, before that redraw, so the redraw computes the
// new audio's (as wavesurfer.js pull request 4118 proposes upstream).
export function addSpectrogram(ws, options) {
  const plugin = ws.registerPlugin(SpectrogramPlugin.create({ labels: true, fftSamples: 512, ...options }));
  ws.on('decode', () => plugin.clearCache());
  return plugin;
}
