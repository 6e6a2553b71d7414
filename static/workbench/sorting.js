// Which takes the list shows, and in what order: the text filter, and a QA pass's own questions
// (the stopped ones? those with gaps, or flagged boundaries? rated 4 stars or more? misheard more
// than 10% of the words?), sorted by rating, error rate, similarity, underruns or flagged
// boundaries. Pure functions on the takes and the controls' values.

import { matches } from './listing.js';

const errorRate = (t) => (t.evaluation?.intelligibility?.available ? t.evaluation.intelligibility.rate : null);
const similarity = (t) => (t.evaluation?.similarity?.available ? t.evaluation.similarity.score : null);

// Sort key -> [value of a take (null: none, listed last either way), direction (1 up, -1 down)].
export const SORTS = {
  newest: [(t) => t.n, -1],
  oldest: [(t) => t.n, 1],
  'rating-best': [(t) => t.rating || null, -1],
  'rating-worst': [(t) => t.rating || null, 1],
  'error-worst': [errorRate, -1],
  'similarity-lowest': [similarity, 1],
  'underruns-most': [(t) => t.figures.underruns, -1],
  'flagged-most': [(t) => t.figures.flagged_boundaries, -1],
};

// criteria: {query, outcome ('' any), rating ('' any, 'none' unrated, else at least N), error (a
// least error rate in %, '' any), gaps, flagged (booleans: only takes with underruns / flagged
// boundaries), sort (a key of SORTS)}. takes: oldest first, as kept. Returns the takes to list,
// in the order they are listed.
export function listed(takes, c) {
  const shown = takes.filter((t) => (!c.query || matches(t, c.query))
    && (!c.outcome || t.outcome === c.outcome)
    && (!c.rating || (c.rating === 'none' ? !t.rating : (t.rating || 0) >= Number(c.rating)))
    && (c.error === '' || c.error == null || (errorRate(t) ?? -1) * 100 >= Number(c.error))
    && (!c.gaps || t.figures.underruns > 0)
    && (!c.flagged || t.figures.flagged_boundaries > 0));
  const [value, dir] = SORTS[c.sort] || SORTS.newest;
  const newest = (a, b) => b.n - a.n; // ties, and takes without the value, newest first
  return shown.sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (x == null || y == null) return (x == null) - (y == null) || newest(a, b);
    return dir * (x - y) || newest(a, b);
  });
}

// Whether the criteria leave any take out (the storage line then says "N of M takes").
export function narrowed(c) {
  return Boolean(c.query || c.outcome || c.rating || (c.error !== '' && c.error != null) || c.gaps || c.flagged);
}
