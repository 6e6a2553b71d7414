// The workbench's keyboard shortcuts, and the help overlay that lists them (? opens it). They act
// while the take view is on screen and focus is not in a field that takes text.

export const SHORTCUTS = [
  ['k or Space', 'play / pause (Space: not on a button)', (wb) => wb.el('play').click()], // as the button does: ABX stops too
  ['b', 'switch between A and B at the same position', (wb) => wb.el('switch').click()],
  ['l', 'loop the selection on / off', (wb) => { const loop = wb.el('loop'); loop.checked = !loop.checked; }],
  ['m', 'a marker at the cursor (its note below the waveform)', (wb) => wb.markers?.add()],
  ['n / p', 'next (older) / previous (newer) take', (wb, key) => wb.step(key === 'n' ? 1 : -1)],
  ['w', 'focus the waveform', (wb) => wb.el('wave-a').focus()],
  ['← / →', 'seek 100 ms, with the waveform in focus (Page Up/Down: 1 s, Home/End)', null],
  ['Shift + ← / →', 'grow the selection, with the waveform in focus', null],
  ['?', 'this help', (wb) => wb.el('help').showModal()],
];

const KEYS = { k: 0, ' ': 0, b: 1, l: 2, m: 3, n: 4, p: 4, w: 5, '?': 8 };
const TYPING = /^(INPUT|TEXTAREA|SELECT)$/;

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
    if (TYPING.test(t.tagName) || t.isContentEditable || (e.key === ' ' && t.closest('button, [role=tab], a, summary'))) return;
    const i = KEYS[e.key];
    if (i === undefined) return;
    e.preventDefault();
    SHORTCUTS[i][2](wb, e.key);
  });
}
