// The workbench's keyboard shortcuts (one table, read by the keys and shown by the help overlay,
// so the two cannot disagree), and the help overlay that lists them (? opens it).

import { KINDS } from './markers.js';

// ABX is listened to with the keys: while a session runs, or the focus is in ABX's row, a, b and
// x play and 1 and 2 answer, ahead of their meanings below (a marker, or A/B switching, is no part
// of a blind trial).
const abxActive = (wb) => Boolean(wb.compare.abx.session) || Boolean(document.activeElement?.closest('.vox-wb-abx'));

// They act while a take is on screen and the focus is not in a field that takes text; a line with a
// fourth entry acts only while that says so.
const SHORTCUTS = [
  ['a / b / x', 'ABX (during a session, or with the focus in its row): play A / B / X', (wb, key) => wb.compare.abxPlay(key.toUpperCase()), abxActive],
  ['1 / 2', 'ABX (during a session, or with the focus in its row): answer X is A / X is B', (wb, key) => wb.compare.abxAnswer(key === '1' ? 'A' : 'B'), abxActive],
  ['k or Space', 'play / pause (Space: not on a button)', (wb) => wb.el('play').click()], // as the button does: ABX stops too
  ['b', 'switch between A and B at the same position', (wb) => wb.el('switch').click()],
  ['l', 'loop the selection on / off', (wb) => { const loop = wb.el('loop'); loop.checked = !loop.checked; }],
  ['m', 'a marker at the cursor, of the kind picked beside "Marker at cursor"; the focus stays here', (wb) => wb.markers.add()],
  ['1 / 2 / 3', 'a marker of the kind click / glitch / mispronunciation at the cursor', (wb, key) => wb.markers.add(KINDS[Number(key)])],
  ['e', 'write the note of the last marker (Enter: back to the waveform)', (wb) => wb.markers.editLast()],
  ['u', 'undo the last delete or marker removal', (wb) => wb.undo()],
  ['n / p', 'next (older) / previous (newer) take; sorted otherwise, the next / previous in the list as shown', (wb, key) => wb.step(key === 'n' ? 1 : -1)],
  ['w', 'focus the waveform', (wb) => wb.el('wave-a').focus()],
  ['] / [', 'the next / previous flagged boundary or gap (red and amber marks)', (wb, key) => wb.landmarks.go(key === ']' ? 1 : -1)],
  ['← / →', 'seek 100 ms, with the waveform in focus (Page Up/Down: 1 s, Home/End)', null],
  ['Shift + ← / →', 'grow the selection, with the waveform in focus', null],
  ['?', 'this help', (wb) => wb.el('help').showModal()],
  // Listed here too, though static/page/gradio.js acts on it: it works anywhere, a text field included.
  ['Ctrl+Enter (Cmd+Enter)', 'Generate, anywhere on the page', null],
];

// Key -> its lines above, first first, read off the help's own words ('k or Space', 'n / p', '1 / 2 / 3'),
// so the help and the keys cannot disagree; the arrows act in the waveform's own handler (waveview.js).
const KEYS = {};
SHORTCUTS.forEach(([keys, , act], i) => {
  if (act) keys.split(/ or | \/ /).forEach((key) => (KEYS[key === 'Space' ? ' ' : key] ||= []).push(i));
});

// Fields that take text (or a choice from a list, where letters pick an option): a shortcut there
// would eat the typing. A checkbox, radio, range or button leaves the letter keys free.
const TYPING = /^(TEXTAREA|SELECT)$/;
const TEXT_INPUTS = /^(text|search|number|email|url|tel|password|date|time|datetime-local|month|week)$/;

export function wireKeys(wb) {
  const help = wb.el('help');
  help.querySelector('tbody').replaceChildren(...SHORTCUTS.map(([keys, what]) => {
    const tr = document.createElement('tr');
    tr.append(Object.assign(document.createElement('th'), { textContent: keys }),
      Object.assign(document.createElement('td'), { textContent: what }));
    return tr;
  }));
  wb.el('help-open').addEventListener('click', () => help.showModal());
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey || !wb.selected || help.open) return;
    if (TYPING.test(t.tagName) || (t.tagName === 'INPUT' && TEXT_INPUTS.test(t.type)) || t.isContentEditable) return;
    // Space keeps its own meaning where it has one: press a button or tab, tick a box.
    if (e.key === ' ' && t.closest('button, [role=tab], a, summary, input')) return;
    const i = (KEYS[e.key] || []).find((j) => !SHORTCUTS[j][3] || SHORTCUTS[j][3](wb));
    if (i === undefined) return;
    e.preventDefault();
    SHORTCUTS[i][2](wb, e.key);
  });
}
