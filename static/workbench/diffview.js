// The difference A−B, drawn under B: its waveform and its spectrogram, where whatever differs shows
// at its time and frequency. The waveform is drawn so its peak fills the strip, and a scale at its
// left edge says what that height is (in int16 steps and dBFS): without one, a difference of one
// step and one of half full scale looked the same.

import WaveSurfer from '../vendor/wavesurfer/wavesurfer.esm.js';
import { wavBlob } from '../player/pcm.js';
import { addSpectrogram, nyquist } from './waveview.js';

// The scale's words for a peak of `steps` (int16): its top, middle and bottom marks, and the line
// above the strip.
export function diffScale(steps) {
  if (!steps) return { marks: ['0', '0', '0'], line: 'A−B: none, A and B hold the same samples' };
  const dbfs = 20 * Math.log10(steps / 32767);
  return { marks: [`+${steps}`, '0', `−${steps}`],
    line: `A−B, drawn to fill the strip: its full height is ±${steps} steps (${dbfs.toFixed(1)} dBFS); its spectrogram below` };
}

export class DiffView {
  constructor(root, view) {
    const el = (name) => root.querySelector(`[data-wb="${name}"]`);
    this.box = el('diff-view');
    this.label = el('diff-label');
    this.scale = el('diff-scale');
    this.ws = WaveSurfer.create({ container: el('wave-d'), height: 64, waveColor: '#b91c1c', progressColor: '#7f1d1d',
      cursorColor: '#000', normalize: true, interact: false, minPxPerSec: 100, fillParent: false }); // at A's scale
    addSpectrogram(this.ws, { container: el('spectrogram-d'), height: 96, ...nyquist(view.served) });
    this.loaded = false;
    this.url = null;
    view.onTime.push((t) => { if (this.loaded) this.ws.setTime(Math.min(t, this.ws.getDuration())); });
    this.view = view;
    view.onScale.push((px) => { if (this.loaded) this.ws.zoom(px); });
    view.a.on('scroll', (start, end, left) => { if (this.loaded) this.ws.setScroll(left); }); // under A, wherever A is scrolled
  }

  // a, b: Int16Array samples (b null: no B, nothing drawn), over the samples both hold.
  async show(a, b, rate) {
    const old = this.url; // revoked only once its media element has let go of it (else it re-requests it)
    const release = () => old && URL.revokeObjectURL(old);
    this.url = null;
    this.loaded = false;
    this.box.hidden = !b;
    if (!b) {
      const media = this.ws.getMediaElement();
      media.removeAttribute('src');
      media.load();
      return release();
    }
    const { peaks, pcm, steps } = differenceOf(a, b);
    this.showScale(steps);
    this.url = URL.createObjectURL(wavBlob([pcm], rate));
    await this.ws.load(this.url, [peaks], pcm.length / rate);
    release();
    this.ws.zoom(this.view.pxPerSec());
    this.loaded = true;
  }

  showScale(steps) {
    const { marks, line } = diffScale(steps);
    this.label.textContent = line;
    [...this.scale.children].forEach((mark, i) => { mark.textContent = marks[i]; });
  }
}

// A−B over the samples both hold: the peaks to draw (half scale: a difference of two full-scale
// signals still fits in [-1, 1]), the samples to play (clipped to int16) and its peak in steps.
function differenceOf(a, b) {
  const n = Math.min(a.length, b.length);
  const peaks = new Float32Array(n);
  const pcm = new Int16Array(n);
  let steps = 0;
  for (let i = 0; i < n; i++) {
    const v = a[i] - b[i];
    peaks[i] = v / 65536;
    pcm[i] = Math.max(-32768, Math.min(32767, v));
    steps = Math.max(steps, Math.abs(v));
  }
  return { peaks, pcm, steps };
}
