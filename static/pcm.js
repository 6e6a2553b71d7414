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

// A 16-bit mono WAV holding exactly the given chunks, for download and for replay.
export function wavBlob(chunks, sampleRate) {
  const samples = chunks.reduce((n, c) => n + c.length, 0);
  const header = new DataView(new ArrayBuffer(44));
  const text = (offset, s) => [...s].forEach((ch, i) => header.setUint8(offset + i, ch.charCodeAt(0)));
  text(0, 'RIFF');
  header.setUint32(4, 36 + samples * 2, true);
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
  return new Blob([header.buffer, ...body], { type: 'audio/wav' });
}
