// The audio output: one AudioContext at the model's rate (so samples reach the worklet untouched)
// and the gapless worklet player in it (static/player/pcm-worklet.js). Built at page load,
// suspended until a click may start it, so the first Generate does not pay for loading the worklet.

export class Output {
  constructor(onReport) {
    this.ctx = null;
    this.node = null;
    this.onReport = onReport; // each message of the worklet: started, underrun, resumed, ended, metrics
  }

  async open(rate, prebufferMs, start = true) {
    if (!this.ctx || this.ctx.sampleRate !== rate || this.ctx.state === 'closed') {
      if (this.ctx && this.ctx.state !== 'closed') await this.ctx.close();
      this.ctx = new AudioContext({ sampleRate: rate, latencyHint: 'interactive' });
      await this.ctx.audioWorklet.addModule(new URL('pcm-worklet.js', import.meta.url));
      this.node = new AudioWorkletNode(this.ctx, 'pcm-player', {
        outputChannelCount: [1],
        processorOptions: { prebufferSamples: Math.round((prebufferMs / 1000) * rate), fadeSamples: Math.round(rate / 200) },
      });
      this.node.port.onmessage = (event) => this.onReport(event.data);
      this.node.connect(this.ctx.destination);
    }
    if (start && this.ctx.state === 'suspended') await this.ctx.resume();
  }

  // Everything played from now on belongs to the stream `id`; null silences the player at once.
  reset(id) {
    if (this.node) this.node.port.postMessage({ type: 'reset', id });
  }

  push(floats) {
    this.node.port.postMessage({ type: 'push', samples: floats }, [floats.buffer]);
  }

  end() {
    this.node.port.postMessage({ type: 'end' });
  }

  // Milliseconds from a sample leaving the worklet to the speaker, as the browser reports it.
  latencyMs() {
    return ((this.ctx.outputLatency || 0) + (this.ctx.baseLatency || 0)) * 1000;
  }
}
