"""Which questions a voter file has seen, so that nothing judges it on them: the questions it was
fitted on and those an earlier `eor calibrate` fitted its lines on, rebuilt from the selection its
provenance records (the file's sha256, split, seed, fraction, grouping, limit) and checked against
the fingerprints kept beside. `eor eval` refuses them; `eor calibrate` leaves them out.
"""
from __future__ import annotations

from typing import Any, Sequence

from serve.offline.dataset import Question, Selection, qids_digest, select_questions


def fitted_on(saved: Any, path: str) -> bool:
    """Whether the voter's provenance names this question file (by content: it records no path)."""
    from voter.weights_io import file_sha256

    extra = saved.provenance.extra
    return "split" in extra and extra.get("questions_sha256") == file_sha256(path)


def voter_questions(saved: Any, path: str) -> set[str]:
    """The qids of `path` the voter has seen (empty: it was fitted on another file). An error where
    its records cannot be rebuilt into the questions they fingerprint."""
    if not fitted_on(saved, path):
        return set()
    extra = saved.provenance.extra
    seed, fraction = extra.get("split_seed", 0), extra.get("fit_fraction", 0.6)

    def rebuilt(sel: dict, digest: str | None, minus: set[str], what: str) -> set[str]:
        qs = [q for q in select_questions(Selection(path, sel.get("dataset"), sel["split"], sel.get("limit"), seed,
                                                    fraction, sel.get("split_by", "question")))
              if q.qid not in minus]
        if digest not in (None, qids_digest(qs)):
            raise ValueError(f"the questions {what} cannot be rebuilt from the voter's records (their fingerprint "
                             "differs): which questions it saw is unknown")
        return {q.qid for q in qs}
    seen = rebuilt(extra, extra.get("qids_sha256"), set(), "it was fitted on")
    earlier = (saved.adaptive.fit.get("recalibrated") if saved.adaptive is not None else None) or {}
    if earlier.get("selection"):
        seen |= rebuilt(earlier["selection"], earlier.get("qids_sha256"), seen, "its lines were calibrated on")
    return seen


def refuse_seen(saved: Any, selection: Selection, questions: Sequence[Question]) -> None:
    """A ValueError when any selected question is one the voter has seen."""
    seen = voter_questions(saved, selection.path)
    mine = [q for q in questions if q.qid in seen]
    if mine:
        split = saved.provenance.extra.get("split")
        grouped = saved.provenance.extra.get("split_by", "question")
        raise ValueError(f"{len(mine)} of the {len(questions)} selected questions are ones the voter "
                         f"({saved.describe()}) was fitted or calibrated on (its split {split!r}, grouped by "
                         f"{grouped}): judge it on questions it never saw (the other split of the same grouping, "
                         f"--split-by {grouped}, or another file)")
