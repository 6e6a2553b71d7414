// Per-take level figures a QA pass reads: integrated loudness (ITU-R BS.1770-4: K-weighting, 400 ms
// blocks every 100 ms, an absolute gate at -70 LUFS and a relative one 10 LU below), true peak
// (4x oversampled), clipped samples, DC offset, and the silence before the first and after the last
// sound. Pure functions on int16 samples, so Node runs them as the page does.

const FULL = 32768;
const SILENCE_DBFS = -50; // quieter than this is silence for the lead / tail figures

// The two K-weighting biquads for a sample rate: a high shelf (+4 dB above ~1.7 kHz, the head's
// effect) and a high pass (~38 Hz), designed by the bilinear transform from the analog filters the
// standard's 48 kHz coefficients come from, so any rate gets the same curve.
export function kWeighting(rate) {
  const shelf = (() => {
    const f0 = 1681.974450955533;
    const gain = 3.999843853973347;
    const q = 0.7071752369554196;
    const k = Math.tan((Math.PI * f0) / rate);
    const vh = 10 ** (gain / 20);
    const vb = vh ** 0.4996667741545416;
    const a0 = 1 + k / q + k * k;
    return { b: [(vh + (vb * k) / q + k * k) / a0, (2 * (k * k - vh)) / a0, (vh - (vb * k) / q + k * k) / a0],
      a: [1, (2 * (k * k - 1)) / a0, (1 - k / q + k * k) / a0] };
  })();
  const highPass = (() => {
    const f0 = 38.13547087602444;
    const q = 0.5003270373238773;
    const k = Math.tan((Math.PI * f0) / rate);
    const a0 = 1 + k / q + k * k;
    return { b: [1, -2, 1], a: [1, (2 * (k * k - 1)) / a0, (1 - k / q + k * k) / a0] };
  })();
  return [shelf, highPass];
}

function biquad(x, { b, a }) {
  const y = new Float64Array(x.length);
  let x1 = 0, x2 = 0, y1 = 0, y2 = 0;
  for (let i = 0; i < x.length; i++) {
    const v = b[0] * x[i] + b[1] * x1 + b[2] * x2 - a[1] * y1 - a[2] * y2;
    x2 = x1; x1 = x[i]; y2 = y1; y1 = v;
    y[i] = v;
  }
  return y;
}

// int16 samples through BS.1770's K-weighting, as floats of full scale 1.
export function kWeighted(pcm, rate) {
  let y = Float64Array.from(pcm, (v) => v / FULL);
  for (const f of kWeighting(rate)) y = biquad(y, f);
  return y;
}

// Integrated loudness in LUFS; -Infinity when nothing passes the gates (or under 400 ms of audio).
export function integratedLoudness(pcm, rate) {
  const y = kWeighted(pcm, rate);
  const block = Math.round(0.4 * rate);
  const hop = Math.round(0.1 * rate);
  const powers = [];
  for (let start = 0; start + block <= y.length; start += hop) {
    let sum = 0;
    for (let i = start; i < start + block; i++) sum += y[i] * y[i];
    powers.push(sum / block);
  }
  const loudness = (p) => -0.691 + 10 * Math.log10(p);
  const mean = (ps) => ps.reduce((s, p) => s + p, 0) / ps.length;
  const absolute = powers.filter((p) => loudness(p) > -70);
  if (!absolute.length) return -Infinity;
  const relative = loudness(mean(absolute)) - 10;
  const gated = absolute.filter((p) => loudness(p) > relative);
  return gated.length ? loudness(mean(gated)) : -Infinity;
}

// The interpolation filter for 4x oversampling: a Hann-windowed sinc, 16 taps per phase.
const PHASES = 4;
const TAPS = 16;
const INTERPOLATOR = Array.from({ length: PHASES }, (_, phase) => Array.from({ length: TAPS }, (_, k) => {
  const t = k - TAPS / 2 + 1 - phase / PHASES; // distance, in input samples, of tap k from the output point
  const sinc = t === 0 ? 1 : Math.sin(Math.PI * t) / (Math.PI * t);
  const window = 0.5 + 0.5 * Math.cos((Math.PI * t) / (TAPS / 2));
  return sinc * window;
}));

// True peak in dBTP: the largest magnitude of the signal oversampled 4x (peaks between samples).
export function truePeak(pcm) {
  let peak = 0;
  for (let i = 0; i < pcm.length; i++) {
    peak = Math.max(peak, Math.abs(pcm[i]) / FULL);
    for (let phase = 1; phase < PHASES; phase++) {
      const taps = INTERPOLATOR[phase];
      let v = 0;
      for (let k = 0; k < TAPS; k++) {
        const j = i + k - TAPS / 2 + 1;
        if (j >= 0 && j < pcm.length) v += taps[k] * pcm[j];
      }
      peak = Math.max(peak, Math.abs(v) / FULL);
    }
  }
  return peak ? 20 * Math.log10(peak) : -Infinity;
}

export function measure(pcm, rate) {
  const threshold = FULL * 10 ** (SILENCE_DBFS / 20);
  let clipped = 0, sum = 0, first = -1, last = -1;
  for (let i = 0; i < pcm.length; i++) {
    const v = pcm[i];
    if (v >= 32767 || v <= -32768) clipped += 1;
    sum += v;
    if (Math.abs(v) > threshold) { if (first < 0) first = i; last = i; }
  }
  const ms = (n) => (n / rate) * 1000;
  return { lufs: integratedLoudness(pcm, rate), true_peak_dbtp: truePeak(pcm), clipped_samples: clipped,
    dc_offset: pcm.length ? sum / pcm.length / FULL : 0, lead_silence_ms: ms(first < 0 ? pcm.length : first),
    tail_silence_ms: ms(first < 0 ? pcm.length : pcm.length - 1 - last), silence_dbfs: SILENCE_DBFS };
}

export function describeMeasures(m) {
  const db = (v, unit) => (isFinite(v) ? `${v.toFixed(1)} ${unit}` : `−∞ ${unit}`);
  return `${db(m.lufs, 'LUFS')} integrated, true peak ${db(m.true_peak_dbtp, 'dBTP')}, ${m.clipped_samples} clipped ` +
    `samples, DC offset ${(m.dc_offset * 100).toFixed(3)} % of full scale, silence ${Math.round(m.lead_silence_ms)} ms ` +
    `before and ${Math.round(m.tail_silence_ms)} ms after (below ${m.silence_dbfs} dBFS)`;
}
