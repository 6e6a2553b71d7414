// What a live-text run (static/player/live.js) records of itself, for its status line and its take:
// when each clause was committed and when its audio began, the seams between clauses and the gaps
// heard there, and the first-audio figures counted from the first clause's commit. Issue 58: a live
// take counted its first audio from the session's opening, so the typing before the first clause
// was in it.
//
// The run's log (run.liveLog), kept by live.js: source ('typed', 'replay' or 'reuse'), rate (tokens a
// second of a replay), sends [{at, chars}] (ms from the run's start; all characters sent so far),
// starts [{at, samples, text}] (each audio.start: when it came, the take's samples before its
// audio, the clause), finishedAt (input.done sent), patchSamples, requestId.

// When the page had sent what completes the clause ending at character `end`: the piece that brought
// the character after it (a clause ends at punctuation followed by a space), else Finish. Never after
// its own audio began: the server may commit a clause at a pause in the typing, before any of that.
// A clause cut at such a pause (no punctuation) counts from its last word's space, so the server's
// wait for more text (0.5 s) is in its figure.
export function committedAt(log, end, audioAt) {
  const next = log.sends.find((s) => s.chars > end);
  return Math.min(...[next?.at, log.finishedAt, audioAt].filter((t) => t != null));
}

// The clauses whose audio began, in order: the server's clause texts partition the text sent, so
// each ends where the lengths before it add up to.
function clausesOf(log) {
  let end = 0;
  return log.starts.map((s) => {
    end += s.text.length;
    return { text: s.text, committedAt: committedAt(log, end, s.at), audioAt: s.at, samples: s.samples };
  });
}

// The first clause's commit, in ms from the run's start: where its first-audio figures count from.
export function firstCommitMs(log) {
  return clausesOf(log)[0]?.committedAt ?? null;
}

// The gaps the player heard within a patch of a seam (where a clause's audio begins): their length
// in ms, 0 for none, null where one was still going when the take stopped.
function seamGap(run, at, patch) {
  const near = run.underrunTimes.filter((u) => u.at >= at - patch && u.at <= at + patch);
  if (near.some((u) => u.gapMs == null)) return null;
  return near.reduce((sum, u) => sum + u.gapMs, 0);
}

// The take's record: times in ms from the first clause's commit (first_commit_ms: from the
// session's opening to it, the typing before), each clause with where its audio starts in the take
// (at_samples) and whether the take holds any of it (a stopped take may not), the seam before it,
// and the pieces as sent (their times from the first piece), so a Re-use can send them again at
// the same pace.
export function liveRecord(run) {
  const log = run.liveLog;
  const clauses = clausesOf(log);
  const origin = clauses[0]?.committedAt ?? null;
  const from = (t) => (origin == null || t == null ? null : t - origin);
  const first = log.sends[0]?.at ?? 0;
  return {
    source: log.source, rate: log.rate, request_id: log.requestId, first_commit_ms: origin,
    finished_ms: from(log.finishedAt),
    clauses: clauses.map((c, k) => ({ text: c.text, committed_ms: from(c.committedAt), audio_ms: from(c.audioAt),
      at_samples: c.samples, heard: c.samples < run.samples, seam_gap_ms: k ? seamGap(run, c.samples, log.patchSamples) : null })),
    pieces: log.sends.map((s) => ({ at_ms: s.at - first, chars: s.chars })),
  };
}

// What the take holds of the text: the clauses whose audio it has (a stopped replay had sent far
// more than was spoken: issue 58 showed the whole paragraph).
export function heardText(record) {
  return record.clauses.filter((c) => c.heard).map((c) => c.text).join('');
}

// The figures the live box's status line gives: from the first clause's commit to its first audio,
// the clauses spoken, the underruns and those within a patch of a seam between clauses.
export function statusFigures(run) {
  const log = run.liveLog;
  const origin = firstCommitMs(log);
  const seams = log.starts.slice(1).map((s) => s.samples);
  const patch = log.patchSamples;
  return { clauseToAudioMs: origin != null && run.firstByteAt != null ? run.firstByteAt - run.t0 - origin : null,
    clauses: log.starts.length, underruns: run.underruns || 0,
    atSeams: run.underrunTimes.filter((u) => seams.some((at) => u.at >= at - patch && u.at <= at + patch)).length };
}
