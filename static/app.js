// The page's one module script (ui/server.py writes its tag; the model's rate and the prebuffer
// come from GET /voxcpm/spec): starts the player, the listening-QA workbench, the voice library and the
// automatic transcripts of ultimate cloning, keeps the form across reloads (static/page/keep.js),
// and hands the form's buttons to the player through the adapter to Gradio (static/page/gradio.js).
// No module is imported for its side effects, and none puts anything on window.

import { handle } from './page/gradio.js';
import { guardDrops } from './page/drops.js';
import { keepForm, remember } from './page/keep.js';
import { liveText } from './player/live.js';
import { player } from './player/player.js';
import { transcripts } from './voices/transcript.js';
import { pickedVoice, voices } from './voices/voices.js';
import { workbench } from './workbench/workbench.js';

// ?prebuffer_ms= on the page overrides the server's prebuffer, for listening tests.
function config() {
  const asked = new URLSearchParams(location.search).get('prebuffer_ms');
  return { prebufferMs: asked === null ? null : Number(asked) };
}

handle({
  // During a live session, Generate waits for what was typed to be spoken and kept (static/player/live.js).
  generate: (form) => {
    const asked = transcripts.sent({ ...form, voice: pickedVoice(form.mode) });
    if (!liveText.generateAfter(() => player.generate(asked))) player.generate(asked);
  },
  stop: () => player.stop(),
  clipChanged: () => {
    player.clipChanged();
    remember();
  },
  clipStored: (mode, id) => mode === 'ultimate' && transcripts.clipStored(id),
});
keepForm();
voices.onPick = (mode, voice) => mode === 'ultimate' && transcripts.voicePicked(voice);
guardDrops();
player.start(config());
liveText.start(player, pickedVoice);
workbench.start();
voices.start();
transcripts.start();
