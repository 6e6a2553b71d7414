// Reader of the framed stream body (format: ui/http/frames.py, docs/api.md "The framed stream"). Network reads split
// the body anywhere, so bytes are buffered until a whole frame is in; each frame comes out as
// { kind: 'audio', pcm: Int16Array } | { kind: 'meta' | 'status', data: object }.
// The format's constants are the server's (GET /voxcpm/spec's `frames`: header size, largest
// payload, the kind of each type byte), never written here.

export class FrameError extends Error {}

export class FrameParser {
  constructor(format) {
    this.header = format.header_bytes;
    this.maxPayload = format.max_payload;
    this.kinds = Object.fromEntries(Object.entries(format.kinds).map(([type, kind]) => [type.charCodeAt(0), kind]));
    this.buffer = new Uint8Array(0);
    this.consumed = 0; // bytes of the body before the buffer, for error positions
  }

  // Returns the whole frames now available; throws FrameError on a malformed one.
  push(bytes) {
    const joined = new Uint8Array(this.buffer.length + bytes.length);
    joined.set(this.buffer);
    joined.set(bytes, this.buffer.length);
    const view = new DataView(joined.buffer);
    const frames = [];
    let at = 0;
    while (joined.length - at >= this.header) {
      const length = view.getUint32(at + 4, true);
      if (joined[at + 1] || joined[at + 2] || joined[at + 3] || length > this.maxPayload) {
        throw new FrameError(`bad frame header at byte ${this.consumed + at}`);
      }
      if (joined.length - at < this.header + length) break;
      const frame = this.decode(joined[at], joined.subarray(at + this.header, at + this.header + length), this.consumed + at);
      if (frame) frames.push(frame);
      at += this.header + length;
    }
    this.buffer = joined.slice(at);
    this.consumed += at;
    return frames;
  }

  // The body is over: anything left is a frame cut short.
  finish() {
    if (this.buffer.length) {
      throw new FrameError(`the stream ended inside a frame: ${this.buffer.length} bytes after byte ${this.consumed}`);
    }
  }

  decode(type, payload, where) {
    const kind = this.kinds[type];
    if (kind === 'audio') {
      if (payload.length % 2) throw new FrameError(`an audio frame at byte ${where} holds half a sample`);
      const view = new DataView(payload.buffer, payload.byteOffset, payload.length);
      const pcm = new Int16Array(payload.length / 2);
      for (let i = 0; i < pcm.length; i++) pcm[i] = view.getInt16(2 * i, true);
      return { kind, pcm };
    }
    if (kind) {
      let data = null;
      try {
        data = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(payload));
      } catch (err) { /* reported below */ }
      if (!data || typeof data !== 'object' || Array.isArray(data)) {
        throw new FrameError(`a ${kind} frame at byte ${where} is not a JSON object`);
      }
      return { kind, data };
    }
    return null; // a frame type from a later version: skipped
  }
}
