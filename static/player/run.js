// One request as the page sees it: what was asked, the samples and chunk boundaries received, what
// the player reported, and the server's figures. The player (static/player/player.js) writes it;
// the panel shows it and the workbench keeps it as a take.

// The server's RTF over the audio as heard: from the last metadata frame's clock (its offset and
// samples are in the audio sent), until the status frame gives the whole take's. The status frame's
// own `rtf` is over the model's audio, which when the audio is stretched is not what was heard (issue
// 58: 3.876 against the client's 4.899 stretched to 1.26x), so the take's is its generation time over
// the audio sent; a status without those figures keeps its `rtf`.
export function heardRtf(final, boundaries, sampleRate) {
  if (final && final.generation_s != null && final.output_samples > 0 && final.output_rate > 0) {
    return final.generation_s / (final.output_samples / final.output_rate);
  }
  if (final && final.rtf != null) return final.rtf;
  const last = boundaries[boundaries.length - 1];
  return last ? last.server_ms / 1000 / ((last.offset + last.samples) / sampleRate) : null;
}

export class Run {
  constructor() {
    this.id = (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`).replace(/[^A-Za-z0-9-]/g, '');
    this.sampleRate = null; // the model's, from the spec once the request is built
    this.t0 = performance.now();
    this.controller = new AbortController();
    this.body = null; // the request sent: what was asked is part of what the run shows
    this.clip = null; // the reference clip's file name
    this.clipUrl = null; // where the page reads its bytes (the workbench keeps them with the take)
    this.chunks = []; // Int16Array per patch: the WAV is built from exactly these
    this.samples = 0;
    this.reads = 0; // network reads, for the record: patches are what Chunks counts
    this.boundaries = []; // per patch: {index, offset, samples, server_ms, client_ms} from its metadata frame
    this.underrunTimes = []; // {at: samples played when the player ran dry, gapMs}
    this.final = null; // the status frame: outcome and server figures
    this.words = null; // asked for (body.timestamps): each segment's words as its "words" frame gave them
    this.wordErrors = []; // {segment, error}: segments the server could not align (the audio plays on)
    this.played = 0;
    this.buffered = 0;
    this.underruns = 0;
    this.firstByteAt = null;
    // ms from t0 where the first-audio figures count from: live text's first clause commit (the
    // typing before it is no wait for audio); 0 for a stream, whose request is whole when sent.
    this.firstFromMs = null;
    this.lastByteAt = null;
    this.audibleAt = null;
    this.outputLatencyMs = 0;
    this.server = null;
    this.seed = null;
    this.state = 'sending'; // sending -> streaming -> received -> finished | stopped | failed
    this.playbackDone = false;
    this.error = null;
  }

  clientRtf() {
    if (!this.samples) return null;
    return ((this.lastByteAt ?? performance.now()) - this.t0) / 1000 / (this.samples / this.sampleRate);
  }

  serverRtf() {
    return heardRtf(this.final, this.boundaries, this.sampleRate);
  }

  gapMs() {
    return this.underrunTimes.reduce((sum, u) => sum + (u.gapMs || 0), 0);
  }

  // A frame of the body (static/player/frames.js) at `now`; returns the audio frame's samples.
  take(frame, now) {
    if (frame.kind === 'meta') this.boundaries.push({ ...frame.data, client_ms: now - this.t0 });
    if (frame.kind === 'status') this.final = frame.data;
    if (frame.kind === 'words') this.heardWords(frame.data);
    if (frame.kind !== 'audio' || !frame.pcm.length) return null;
    this.chunks.push(frame.pcm);
    this.samples += frame.pcm.length;
    return frame.pcm;
  }

  // A segment's words, sent once that segment's audio is aligned: times are seconds of the audio
  // sent, so they go on the same clock as the samples played. Kept in time order whatever order the
  // segments' frames come in.
  heardWords(data) {
    if (!this.words) return; // not asked for: nothing to show them in
    if (data.error) this.wordErrors.push({ segment: data.segment, error: String(data.error) });
    const words = (Array.isArray(data.words) ? data.words : []).filter((w) => w && Number.isFinite(w.start_s) && Number.isFinite(w.end_s));
    this.words.push(...words);
    this.words.sort((a, b) => a.start_s - b.start_s);
  }

  // What the worklet reported (static/player/pcm-worklet.js), at the context's rate.
  heard(msg, rate) {
    Object.assign(this, { played: msg.played, buffered: msg.buffered, underruns: msg.underruns });
    if (msg.type === 'underrun') this.underrunTimes.push({ at: msg.played, frame: msg.frame, gapMs: null });
    // The worklet takes back a last underrun that turned out to be the stream's end.
    if (this.underrunTimes.length > msg.underruns) this.underrunTimes.length = msg.underruns;
    if (msg.type === 'resumed' && this.underrunTimes.length) {
      const last = this.underrunTimes[this.underrunTimes.length - 1];
      last.gapMs = ((msg.frame - last.frame) / rate) * 1000;
    }
  }
}
