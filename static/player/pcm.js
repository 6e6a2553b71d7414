// Byte-level helpers for the PCM stream: int16 little-endian in, float32 out, and a WAV of the
// exact samples that were streamed.

// Network reads split the stream anywhere, so a sample's two bytes can land in different reads:
// the odd byte is carried over to the next read instead of being dropped or misaligned.
export class PcmDecoder {
  constructor() {
    this.carry = null;
  }

  // Returns the whole samples in `bytes` (plus any carried byte) as an Int16Array.
  push(bytes) {
    let data = bytes;
    if (this.carry !== null) {
      data = new Uint8Array(bytes.length + 1);
      data[0] = this.carry;
      data.set(bytes, 1);
      this.carry = null;
    }
    const whole = data.length & ~1;
    if (whole < data.length) this.carry = data[data.length - 1];
    const view = new DataView(data.buffer, data.byteOffset, whole);
    const out = new Int16Array(whole / 2);
    for (let i = 0; i < out.length; i++) out[i] = view.getInt16(2 * i, true);
    return out;
  }

  get pending() {
    return this.carry === null ? 0 : 1;
  }
}

export function toFloat32(int16) {
  const out = new Float32Array(int16.length);
  for (let i = 0; i < int16.length; i++) out[i] = int16[i] / 32767; // the inverse of the server's scaling
  return out;
}

// A 16-bit mono WAV holding exactly the given chunks, for download and for replay; `extra`: whole
// RIFF chunks (bytes) to append after the data, e.g. a LIST/INFO chunk of metadata.
export function wavBlob(chunks, sampleRate, extra = []) {
  const samples = chunks.reduce((n, c) => n + c.length, 0);
  const extraBytes = extra.reduce((n, c) => n + c.length, 0);
  const header = new DataView(new ArrayBuffer(44));
  const text = (offset, s) => [...s].forEach((ch, i) => header.setUint8(offset + i, ch.charCodeAt(0)));
  text(0, 'RIFF');
  header.setUint32(4, 36 + samples * 2 + extraBytes, true);
  text(8, 'WAVE');
  text(12, 'fmt ');
  header.setUint32(16, 16, true);
  header.setUint16(20, 1, true); // PCM
  header.setUint16(22, 1, true); // mono
  header.setUint32(24, sampleRate, true);
  header.setUint32(28, sampleRate * 2, true);
  header.setUint16(32, 2, true);
  header.setUint16(34, 16, true);
  text(36, 'data');
  header.setUint32(40, samples * 2, true);
  const body = chunks.map((c) => {
    const bytes = new DataView(new ArrayBuffer(c.length * 2));
    c.forEach((v, i) => bytes.setInt16(2 * i, v, true));
    return bytes.buffer;
  });
  return new Blob([header.buffer, ...body, ...extra], { type: 'audio/wav' });
}

// The int16 mono samples and rate of a PCM WAV, walking its RIFF chunks (a LIST/INFO chunk may
// come before or after the data, as libsndfile writes it).
export function readWav(buffer) {
  const view = new DataView(buffer);
  const tag = (at) => String.fromCharCode(...new Uint8Array(buffer, at, 4));
  if (buffer.byteLength < 12 || tag(0) !== 'RIFF' || tag(8) !== 'WAVE') throw new Error('not a WAV file');
  let rate = null;
  for (let at = 12; at + 8 <= buffer.byteLength;) {
    const size = view.getUint32(at + 4, true);
    if (tag(at) === 'fmt ') {
      if (view.getUint16(at + 8, true) !== 1 || view.getUint16(at + 10, true) !== 1 || view.getUint16(at + 22, true) !== 16) {
        throw new Error('only 16-bit mono PCM WAV is read here');
      }
      rate = view.getUint32(at + 12, true);
    } else if (tag(at) === 'data') {
      const n = Math.floor(Math.min(size, buffer.byteLength - at - 8) / 2);
      const pcm = new Int16Array(n);
      for (let i = 0; i < n; i++) pcm[i] = view.getInt16(at + 8 + 2 * i, true);
      return { rate, pcm };
    }
    at += 8 + size + (size % 2);
  }
  throw new Error('the WAV file has no data chunk');
}
