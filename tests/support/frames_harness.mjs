// Runs static/player/frames.js (the page's reader of the framed stream) in Node on a body given as base64,
// fed in reads of the given sizes (cycled), so tests can check every frame it returns and the
// error it throws. Usage: node frames_harness.mjs <frames.js> <base64 body> '<JSON list of sizes>'
// '<JSON format, as GET /voxcpm/spec gives it>'; prints {frames, error}.
import { pathToFileURL } from 'node:url';

const [modulePath, body64, sizesJson, formatJson] = process.argv.slice(2);
const { FrameParser, FrameError } = await import(pathToFileURL(modulePath).href);
const body = new Uint8Array(Buffer.from(body64, 'base64'));
const sizes = JSON.parse(sizesJson);
const parser = new FrameParser(JSON.parse(formatJson));
const frames = [];
let error = null;
try {
  for (let at = 0, i = 0; at < body.length; i++) {
    const size = sizes[i % sizes.length];
    for (const f of parser.push(body.slice(at, at + size))) {
      frames.push(f.kind === 'audio' ? { kind: f.kind, pcm: Array.from(f.pcm) } : f);
    }
    at += size;
  }
  parser.finish();
} catch (err) {
  if (!(err instanceof FrameError)) throw err;
  error = err.message;
}
console.log(JSON.stringify({ frames, error }));
