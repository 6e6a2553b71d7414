// Gapless playback of streamed PCM. Runs on the audio rendering thread: the page pushes Float32Array
// chunks, this processor plays them back to back from a jitter buffer counted in samples.
//
// Why a worklet: one continuous output with no per-chunk scheduling, so chunk boundaries cannot
// click or gap; the only gaps left are real underruns, which are counted and faded around.

const QUANTUM = 128;

class PcmPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebuffer = opts.prebufferSamples; // both set by static/player/player.js (Output) from the served spec
    this.fadeLen = opts.fadeSamples;
    this.reportEvery = opts.reportEveryQuanta ?? 8;
    this.port.onmessage = (event) => this.onMessage(event.data);
    this.reset(null);
  }

  reset(id) {
    this.id = id;
    this.chunks = [];
    this.readPos = 0; // offset into chunks[0]
    this.buffered = 0;
    this.state = 'idle'; // idle -> buffering -> playing <-> buffering -> done
    this.ended = false; // the page has sent every sample of this stream
    this.played = 0;
    this.received = 0;
    this.underruns = 0;
    this.dryAt = -1; // samples received when the player last ran dry
    this.gain = 1; // fade-in position as a gain in [0, 1]
    this.started = false;
    this.quanta = 0;
  }

  onMessage(msg) {
    if (msg.type === 'push') {
      this.chunks.push(msg.samples);
      this.buffered += msg.samples.length;
      this.received += msg.samples.length;
      if (this.state === 'idle') this.state = 'buffering';
    } else if (msg.type === 'end') {
      this.ended = true;
      // Dry on the stream's last sample, before the page knew it was the last (its status frame,
      // or words being aligned, came later): that was the end of the audio, not a gap in it.
      if (this.state === 'buffering' && this.underruns && this.dryAt === this.received) this.underruns -= 1;
      if (this.state === 'idle') this.finish();
    } else if (msg.type === 'reset') {
      this.reset(msg.id ?? null);
      this.post('metrics');
    }
  }

  post(type, extra) {
    this.port.postMessage(Object.assign({
      type, id: this.id, played: this.played, received: this.received, buffered: this.buffered,
      underruns: this.underruns, state: this.state, frame: currentFrame,
    }, extra || {}));
  }

  finish() {
    this.state = 'done';
    this.post('ended');
  }

  // Copies up to `count` samples into out[offset...], applying the fade-in ramp; returns the count.
  take(out, offset, count) {
    let written = 0;
    const step = 1 / Math.max(1, this.fadeLen);
    while (written < count && this.chunks.length) {
      const chunk = this.chunks[0];
      const n = Math.min(count - written, chunk.length - this.readPos);
      for (let i = 0; i < n; i++) {
        out[offset + written + i] = chunk[this.readPos + i] * this.gain;
        if (this.gain < 1) this.gain = Math.min(1, this.gain + step);
      }
      written += n;
      this.readPos += n;
      if (this.readPos === chunk.length) {
        this.chunks.shift();
        this.readPos = 0;
      }
    }
    this.buffered -= written;
    return written;
  }

  // The buffer ran dry mid-stream: fade the tail we did have instead of stopping on a full sample.
  fadeOutTail(out, end) {
    const len = Math.min(end, this.fadeLen);
    for (let i = 0; i < len; i++) out[end - len + i] *= 1 - (i + 1) / len;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    if (this.state === 'buffering' && (this.buffered >= this.prebuffer || (this.ended && this.buffered > 0))) {
      this.state = 'playing';
      this.gain = 0; // fade in at the start and after every underrun
      if (this.underruns) this.post('resumed'); // the gap's end: the page measures how long it was
    } else if (this.state === 'buffering' && this.ended && this.buffered === 0) {
      this.finish();
    }
    if (this.state === 'playing') this.render(out);
    for (let ch = 1; ch < outputs[0].length; ch++) outputs[0][ch].set(out);
    // Between streams (idle, or done after the 'ended' report) there is nothing new to say.
    const live = this.state === 'buffering' || this.state === 'playing';
    if (++this.quanta % this.reportEvery === 0 && live) this.post('metrics');
    return true; // stays alive between streams; the page reuses one node
  }

  render(out) {
    const n = this.take(out, 0, out.length || QUANTUM);
    if (n > 0 && !this.started) {
      this.started = true;
      this.post('started', { firstFrame: currentFrame });
    }
    this.played += n;
    if (this.buffered > 0) return;
    if (this.ended) {
      this.finish();
    } else {
      // Dry mid-stream, whether within this block or exactly at its end (a whole patch is 60
      // blocks, so that is the usual case): fade what was played instead of stopping on a full
      // sample, and wait for the prebuffer again.
      this.fadeOutTail(out, n);
      this.underruns += 1;
      this.dryAt = this.received;
      this.state = 'buffering';
      this.post('underrun');
    }
  }
}

registerProcessor('pcm-player', PcmPlayer);
