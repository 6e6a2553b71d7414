// The page's one module script (ui/server.py writes its tag; the model's rate and the prebuffer
// come from GET /voxcpm/spec): starts the player, the listening-QA workbench, the voice library and the
// automatic transcripts of ultimate cloning, keeps the form across reloads (static/page/keep.js),
// and hands the form's buttons to the player through the adapter to Gradio (static/page/gradio.js).
// No module is imported for its side effects, and none puts anything on window.

import { handle } from './page/gradio.js';
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
  generate: (form) => player.generate(transcripts.sent({ ...form, voice: pickedVoice(form.mode) })),
  stop: () => player.stop(),
  clipChanged: () => {
    player.clipChanged();
    remember();
  },
  clipStored: (mode, id) => mode === 'ultimate' && transcripts.clipStored(id),
});
keepForm();
voices.onPick = (mode, voice) => mode === 'ultimate' && transcripts.voicePicked(voice);
player.start(config());
liveText.start(player);
workbench.start();
voices.start();
transcripts.start();
