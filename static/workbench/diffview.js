// The difference A−B, drawn under B: its waveform (scaled to fit the strip; the line above it says
// how large it is) and its spectrogram, where whatever differs shows at its time and frequency.

import WaveSurfer from '../vendor/wavesurfer/wavesurfer.esm.js';
import { addSpectrogram } from './spectrogram.js';
import { wavBlob } from '../player/pcm.js';

export class DiffView {
  constructor(root, view) {
    const el = (name) => root.querySelector(`[data-wb="${name}"]`);
    this.box = el('diff-view');
    this.ws = WaveSurfer.create({ container: el('wave-d'), height: 64, waveColor: '#b91c1c', progressColor: '#7f1d1d',
      cursorColor: '#000', normalize: true, interact: false, minPxPerSec: 100, fillParent: false }); // at A's scale
    addSpectrogram(this.ws, { container: el('spectrogram-d'), height: 96 });
    this.loaded = false;
    this.url = null;
    view.onTime.push((t) => { if (this.loaded) this.ws.setTime(Math.min(t, this.ws.getDuration())); });
    this.view = view;
    view.onScale.push((px) => { if (this.loaded) this.ws.zoom(px); });
  }

  // a, b: Int16Array samples (b null: no B, nothing drawn), over the samples both hold.
  async show(a, b, rate) {
    if (this.url) URL.revokeObjectURL(this.url);
    this.url = null;
    this.loaded = false;
    this.box.hidden = !b;
    if (!b) return;
    const n = Math.min(a.length, b.length);
    const peaks = new Float32Array(n); // half scale: a difference of two full-scale signals still fits in [-1, 1]
    const pcm = new Int16Array(n);
    for (let i = 0; i < n; i++) {
      const v = a[i] - b[i];
      peaks[i] = v / 65536;
      pcm[i] = Math.max(-32768, Math.min(32767, v));
    }
    this.url = URL.createObjectURL(wavBlob([pcm], rate));
    await this.ws.load(this.url, [peaks], n / rate);
    this.ws.zoom(this.view.pxPerSec());
    this.loaded = true;
  }
}
