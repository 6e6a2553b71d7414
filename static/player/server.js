// What the page says to the server and reads from it: where the app's routes are, the message of a
// refused request (the routes answer {"error": ...}), the spec, and the request a form asks for.

const API = new URL('../../', import.meta.url); // .../voxcpm/, wherever the app is mounted

export function route(path) {
  return new URL(path, API);
}

export async function errorText(response) {
  try {
    const data = await response.json();
    if (data && data.error) return data.error;
  } catch (err) { /* not JSON */ }
  return `the server answered ${response.status}`;
}

// The modes and request settings as the server states them (GET /voxcpm/spec, built from
// inference/request/modes.py, the same spec the page's sliders are built from): what each mode
// reads, and each setting's range, default and whether it is a whole number; and the model's sample
// rate, the player's prebuffer and the limits (ui/http/status.py), which the page never writes itself.
let loading = null;

export function spec() {
  if (!loading) {
    loading = fetch(route('spec'), { cache: 'no-store' }).then(async (response) => {
      if (!response.ok) throw new Error(await errorText(response));
      return response.json();
    });
    loading.catch(() => { loading = null; }); // a failed read is tried again on the next call
  }
  return loading;
}

// The request a form asks for. The form is what the Generate hook hands over (static/page/gradio.js:
// field -> value, each mode's inputs named <mode>_control, <mode>_ref, <mode>_transcript and
// <mode>_audio by ui/page/layout.py); what a mode reads, and which settings are whole numbers, is
// the spec's (above).
const text = (v) => (typeof v === 'string' && v.trim() ? v : null);

export function requestBody(form, spec, id) {
  const mode = spec.modes[form.mode] || {}; // an unknown mode is the server's to refuse
  const number = (name) => (spec.settings[name].integer ? Math.round(Number(form[name])) : Number(form[name]));
  const body = { mode: form.mode, text: form.text ?? '', request_id: id };
  for (const name of Object.keys(spec.settings)) if (name !== 'seed' && name in form) body[name] = number(name);
  body.normalize = Boolean(form.normalize);
  body.trim_silence = Boolean(mode.clip && form.trim_silence);
  body.seed = form.random_seed || form.seed == null || form.seed === '' ? null : number('seed');
  if (mode.control) body.control = text(form[`${form.mode}_control`]);
  if (mode.clip) body.reference_id = text(form[`${form.mode}_ref`]);
  if (mode.transcript) body.prompt_text = text(form[`${form.mode}_transcript`]);
  if (mode.clip && form.voice) Object.assign(body, { voice: form.voice, reference_id: null }); // a saved voice instead of the clip
  if (form.word_timestamps && sendsWords(spec)) body.timestamps = 'word';
  return body;
}

// Whether this server's framed stream carries the words of each segment (issue 47): its spec names
// a "words" frame kind. A server without one refuses the `timestamps` field, so it is not sent there.
export function sendsWords(spec) {
  return Object.values(spec.frames?.kinds || {}).includes('words');
}

// A cloning mode's request with no clip, said in the page's own terms (its upload, recording and
// voice picker) before anything is sent; null when it has one. The server refuses such a request
// too, naming the fields an API client sends instead (ui/http/schema.py MissingClip).
export function missingClip(body, spec) {
  if (!spec.modes[body.mode]?.clip || body.reference_id || body.voice) return null;
  return "this mode needs a reference clip: upload or record one, or pick a saved voice (after an upload, wait for 'Reference ready')";
}

// The reference clip's file name, for the take's record.
export function clipName(form, spec) {
  return spec.modes[form.mode]?.clip ? form[`${form.mode}_audio`] ?? null : null;
}

// Where the page can read the reference clip's bytes (Gradio's file of it), for the take to keep.
export function clipUrl(form, spec) {
  return spec.modes[form.mode]?.clip ? form[`${form.mode}_audio_url`] ?? null : null;
}
