// A recording from a file as B: a reference read by a person, or an earlier build's WAV. The browser
// decodes it (WAV, FLAC, OGG, MP3: whatever its decoder reads) straight to the take's rate, since
// Web Audio resamples what it decodes to its context's rate; several channels are averaged to one.
// Nothing goes to the server.

const ACCEPTED = 'B takes a recording the browser can decode: WAV, FLAC, OGG or MP3';

// {pcm: Int16Array at `rate`, seconds, channels, describe}; throws an Error whose message names the
// file, what is wrong with it and what is accepted. limits: GET /voxcpm/spec's `workbench`
// (recording_mb: larger is refused before it is read; recording_seconds: longer once decoded, as B
// is held in memory as int16).
export async function decodeRecording(file, rate, limits) {
  const name = `“${file.name}”`;
  if (!file.size) throw new Error(`${name} is empty. ${ACCEPTED}.`);
  if (file.size > limits.recording_mb * 2 ** 20) {
    throw new Error(`${name} is ${(file.size / 2 ** 20).toFixed(0)} MB; a recording for B is at most ${limits.recording_mb} MB.`);
  }
  let audio;
  const bytes = await file.arrayBuffer();
  const source = wavRate(bytes); // decoded audio no longer says its rate: a WAV's header does
  try {
    audio = await new OfflineAudioContext(1, 1, rate).decodeAudioData(bytes);
  } catch (err) {
    throw new Error(`${name} could not be decoded as audio. ${ACCEPTED}.`);
  }
  if (!audio.length) throw new Error(`${name} holds no samples. ${ACCEPTED}.`);
  if (audio.duration > limits.recording_seconds) {
    throw new Error(`${name} is ${audio.duration.toFixed(0)} s long; a recording for B is at most ${limits.recording_seconds} s.`);
  }
  const channels = Array.from({ length: audio.numberOfChannels }, (_, c) => audio.getChannelData(c));
  const pcm = new Int16Array(audio.length);
  for (let i = 0; i < pcm.length; i++) {
    let v = 0;
    for (const ch of channels) v += ch[i];
    pcm[i] = Math.max(-32768, Math.min(32767, Math.round((v / channels.length) * 32767))); // as the server scales
  }
  const mixed = channels.length > 1 ? `, ${channels.length} channels averaged` : '';
  return { pcm, seconds: audio.duration, channels: channels.length,
    describe: `${audio.duration.toFixed(2)} s, ${source && source !== rate ? `resampled from ${source / 1000} kHz to`
      : 'decoded at'} ${rate / 1000} kHz${mixed}` };
}

// The sample rate in a RIFF/WAVE file's fmt chunk, or null (not a WAV, or none found).
function wavRate(buffer) {
  const view = new DataView(buffer);
  const tag = (at) => String.fromCharCode(...new Uint8Array(buffer, at, 4));
  if (buffer.byteLength < 12 || tag(0) !== 'RIFF' || tag(8) !== 'WAVE') return null;
  for (let at = 12; at + 8 <= buffer.byteLength; at += 8 + view.getUint32(at + 4, true) + (view.getUint32(at + 4, true) & 1)) {
    if (tag(at) === 'fmt ' && at + 16 <= buffer.byteLength) return view.getUint32(at + 12, true);
  }
  return null;
}
