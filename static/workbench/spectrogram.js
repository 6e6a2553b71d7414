// The spectrogram under a waveform. The vendored plugin (wavesurfer.js 7.12.12) keeps the
// frequencies it computed and, when a new load redraws at the same zoom, draws those again: the
// first take's (or the first B's difference) stayed on screen whatever was loaded after it. Its
// cache is cleared as each new audio is decoded, before that redraw, so the redraw computes the
// new audio's (as wavesurfer.js pull request 4118 proposes upstream).

import SpectrogramPlugin from '../vendor/wavesurfer/spectrogram.esm.js';

export function addSpectrogram(ws, options) {
  const plugin = ws.registerPlugin(SpectrogramPlugin.create({ labels: true, fftSamples: 512, frequencyMax: 24000,
    ...options }));
  ws.on('decode', () => plugin.clearCache());
  return plugin;
}
