// What a take leaves the page as: a JSON report, a curl command that asks the server for the same
// samples, a WAV whose RIFF INFO chunk carries the settings, and a zip bundle of it all.

import { wavBlob } from '../player/pcm.js';
import { zipSync, strToU8 } from '../vendor/fflate/fflate.esm.js';

const SOFTWARE = 'VoxCPM2 streaming demo';

// mode, seed, cfg and steps in the name, so a folder of downloads sorts and reads by setting.
export function fileName(take, suffix) {
  const s = take.settings;
  return `voxcpm2-${s.mode}-seed${s.seed}-cfg${s.cfg_value}-steps${s.inference_timesteps}-take${take.n}${suffix}`;
}

// The request that reproduces the take: its own body with the seed it used and no request id
// (an id names one request; the server refuses it twice), nor a live take's mark, which the stream
// route does not take (it refuses fields it does not know).
export function reproBody(take) {
  const { request_id, live, ...body } = take.body;
  return { ...body, seed: Number(take.settings.seed) };
}

export function curlCommand(take, origin) {
  const json = JSON.stringify(reproBody(take)).replace(/'/g, "'\\''");
  const file = fileName(take, '.s16le');
  return `curl -sS -X POST '${origin}/voxcpm/stream?format=pcm' -H 'Content-Type: application/json' ` +
    `--data-binary '${json}' -o ${file}\n# ${file}: ${take.sampleRate} Hz mono int16 little-endian; ` +
    `play it with: ffplay -f s16le -ar ${take.sampleRate} -ac 1 ${file}` +
    (take.body.reference_id ? '\n# the reference clip id expires: upload the clip again if the server refuses it' : '') +
    (take.body.live ? '\n# a live take: this asks for its text whole; Re-use replays it live, its pieces and times are the report\'s live.pieces' : '');
}

// Settings, figures, boundaries, ABX answers and notes: everything but the samples (and of a kept
// clip only its name, type and size: the bundle holds its file).
export function report(take, origin) {
  const { pcm, clip, ...rest } = take;
  return { ...rest, ...(clip ? { clip: { name: clip.name, type: clip.type, bytes: clip.bytes.byteLength } } : {}),
    reproduce: { body: reproBody(take), curl: curlCommand(take, origin) } };
}

// RIFF INFO subchunks: a 4-letter id, a length, the text NUL-terminated and padded to even length.
function infoChunk(fields) {
  const parts = Object.entries(fields).filter(([, v]) => v).map(([id, text]) => {
    const bytes = new TextEncoder().encode(text);
    const size = bytes.length + 1;
    const out = new Uint8Array(8 + size + (size % 2));
    out.set(new TextEncoder().encode(id), 0);
    new DataView(out.buffer).setUint32(4, size, true);
    out.set(bytes, 8);
    return out;
  });
  const size = 4 + parts.reduce((n, p) => n + p.length, 0);
  const head = new Uint8Array(12);
  head.set(new TextEncoder().encode('LIST'), 0);
  new DataView(head.buffer).setUint32(4, size, true);
  head.set(new TextEncoder().encode('INFO'), 8);
  return [head, ...parts];
}

// libsndfile (soundfile) reads an INFO string only while its chunk is under 2,048 bytes: a longer
// one reads as empty. The comment is kept under that, its longest texts shortened (with …) to fit,
// and says so; the whole report is the bundle's JSON.
export const MAX_COMMENT_BYTES = 2000;

export function infoComment(take) {
  const f = take.figures;
  const comment = { job: take.id, settings: { ...take.settings },
    figures: { seconds: f.seconds, samples: f.samples, server_rtf: f.server_rtf, first_sound_ms: f.first_sound_ms,
      underruns: f.underruns, flagged_boundaries: f.flagged_boundaries }, reproduce: reproBody(take) };
  const bytes = () => new TextEncoder().encode(JSON.stringify(comment)).length;
  const texts = [[comment.settings, 'text'], [comment.settings, 'text_as_spoken'], [comment.settings, 'prompt_text'],
    [comment.settings, 'control'], [comment.reproduce, 'text'], [comment.reproduce, 'prompt_text'], [comment.reproduce, 'control']];
  while (bytes() > MAX_COMMENT_BYTES) {
    const [obj, key] = texts.filter(([o, k]) => typeof o[k] === 'string').sort(([o, k], [p, j]) => p[j].length - o[k].length)[0] || [];
    if (!obj || obj[key].length < 16) break;
    obj[key] = `${obj[key].slice(0, Math.floor(obj[key].length * 0.8) - 1)}…`;
    comment.shortened = 'texts cut to fit the WAV comment; the bundle\'s JSON holds them whole';
  }
  return JSON.stringify(comment);
}

// A 16-bit mono WAV of the samples, with title, software, date and the take's settings (JSON) as
// the comment in a LIST/INFO chunk, which libsndfile (soundfile) and most editors read.
export function wavWithInfo(pcm, sampleRate, take) {
  const info = infoChunk({
    INAM: `VoxCPM2 take ${take.n} (${take.settings.mode})`, ISFT: SOFTWARE, ICRD: take.created, ICMT: infoComment(take),
  });
  return wavBlob([pcm], sampleRate, info);
}

// The zip bundle: streamed WAV, offline WAV (when the server still holds the latents), the
// report as JSON, the notes typed for this take, and the clip it was cloned from where kept.
export async function bundle(take, origin, offlineWav) {
  const files = {
    [fileName(take, '-stream.wav')]: new Uint8Array(await wavWithInfo(new Int16Array(take.pcm), take.sampleRate, take).arrayBuffer()),
    [fileName(take, '.json')]: strToU8(JSON.stringify(report(take, origin), null, 2)),
    [fileName(take, '-notes.txt')]: strToU8(take.notes || ''),
  };
  if (offlineWav) files[fileName(take, '-offline.wav')] = new Uint8Array(offlineWav);
  if (take.clip) files[fileName(take, `-clip-${take.clip.name}`)] = new Uint8Array(take.clip.bytes);
  return new Blob([zipSync(files, { level: 0 })], { type: 'application/zip' });
}
