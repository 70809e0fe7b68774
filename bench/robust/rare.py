"""RARE (Retrieval-Aware Robustness Evaluation, 2025): query and document perturbations,
real retrieval, and the retrieval-aware robustness judge.

Protocol, as RARE §5 maps onto this service (one question = the grid below, every cell one
AskBatch entry that scores EoR and every single retriever at once):
- queries Q = the original q plus Q' = four perturbations (§5.1): character-level and
  word-level (TextAttack), an LLM grammar rewrite, an LLM insertion of irrelevant detail;
- documents D (§5.2) = the ground-truth passages `gt` (the question's gold passages), `no_answer`
  (lexically similar, no answer: the answer sentences deleted from the gold passages),
  `back_translate` (lexically different, has the answer: LLM back-translation) and
  `retrieval` (real retrieval: the service searches as usual, no documents given).
  A `no_answer` document that still holds an answer, or a `back_translate` one that lost it
  (normalised string match), is dropped (`kept: false`) rather than mis-labelled; so is a
  cell whose query or documents the perturbation could not change, and one whose rewritten
  query names a gold answer the original did not (`qa.leaks_answer`).
- The judge (Table 3): g(q, ∅) is the closed-book probe, the ReFree retriever's answer to the
  original query. Ground-truth and lexically-different documents: robust iff correct.
  Lexically-similar, no answer: correct or a safe refusal when g(q, ∅) = 1, a safe refusal
  when g(q, ∅) = 0. Real retrieval: correct or a safe refusal. Correct = Match (RARE's first,
  lexical stage; its LLM second stage is not used), refusal = `qa.is_refusal`, or the deployed
  path's abstention (`--min-confidence`: its second row, `bench.robust.abstention`).
- Scores (Table 4): overall = mean over all q ∈ Q, d ∈ D; query = q' ∈ Q' with d_gt; document
  = the original q with d' ∈ {no_answer, back_translate}; real-retrieval = the original q with
  the service's own retrieval.
PK and ReFree ignore given documents (they still answer every cell).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from bench.robust import abstention
from bench.robust.client import Doc
from bench.robust.data import Item
from bench.robust.qa import contains_answer, is_refusal, leaks_answer, match
from bench.robust.runner import (Perturber, PerturbationSpecs, is_single, reply_fields, run_cost, systems_of,
                                 unknown_labels, with_readers)
from bench.robust.store import Instance

NAME = "rare"
CLOSED_BOOK = "ReFree"
DOC_BLIND = ("PK", "ReFree")

#: label -> (registry name, kwargs)
QUERY_PERTURBATIONS: dict[str, tuple[str, dict]] = {
    "char": ("char_level", {}),
    "word": ("word_level", {}),
    "grammar": ("grammar_rewrite", {}),
    "irrelevant": ("irrelevant_detail", {}),
}
DOC_PERTURBATIONS: dict[str, tuple[str, dict]] = {
    "no_answer": ("answer_sentence_delete", {}),
    "back_translate": ("back_translate", {}),
}
DOC_SETTINGS = ("gt", "no_answer", "back_translate", "retrieval")
SCORES = ("overall", "query", "document", "retrieval")
LEAK_REASON = "the rewrite names the answer"


def judge(answer: str, gold: Sequence[str], setting: str, closed_book_correct: bool, abstained: bool = False) -> bool:
    """RARE Table 3: is this answer robust for this document setting? An abstention (the
    service withheld its answer as not sure) is a refusal: never correct, safe where one is."""
    correct = not abstained and match(answer, gold)
    refused = abstained or (not correct and is_refusal(answer))
    if setting in ("gt", "back_translate"):
        return correct
    if setting == "no_answer":
        return (correct or refused) if closed_book_correct else refused
    if setting == "retrieval":
        return correct or refused
    raise ValueError(f"unknown RARE document setting {setting!r}")


@dataclass
class RareSuite:
    items: Sequence[Item]
    seed: int = 0
    query_perturbations: Sequence[str] | None = None  # None: all of QUERY_PERTURBATIONS
    doc_settings: Sequence[str] = DOC_SETTINGS
    retrievers: Sequence[str] = ()
    perturber: Perturber | None = None
    min_confidence: float | None = None  # the deployed path's second row abstains below this P(right)
    name: str = NAME
    _by_qid: dict[str, Item] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._by_qid = {it.qid: it for it in self.items}
        if self.query_perturbations is None:
            self.query_perturbations = tuple(QUERY_PERTURBATIONS)
        bad = unknown_labels(self.query_perturbations, QUERY_PERTURBATIONS, self.perturber)
        bad += [d for d in self.doc_settings if d not in DOC_SETTINGS]
        if bad:
            raise ValueError(f"unknown RARE perturbation(s)/setting(s) {bad}")
        if "gt" not in self.doc_settings:
            raise ValueError("RARE needs the ground-truth document setting 'gt'")

    def specs(self) -> PerturbationSpecs:
        return {**{q: QUERY_PERTURBATIONS[q] for q in self.query_perturbations if q in QUERY_PERTURBATIONS},
                **{d: DOC_PERTURBATIONS[d] for d in self.doc_settings if d in DOC_PERTURBATIONS}}

    def plan(self) -> list[Instance]:
        return [Instance(self.name, it.qid, q, d, self.seed)
                for it in self.items for q in ("original", *self.query_perturbations) for d in self.doc_settings]

    def group(self, inst: Instance) -> Hashable:
        return (inst.perturbation, inst.variant)

    def execute(self, batch: list[Instance], pending: set[str], client: Any) -> list[dict]:
        perturber = self.perturber = self.perturber or Perturber(self.specs(), generator=client)
        qlabel, setting = batch[0].perturbation, batch[0].variant
        items = [self._by_qid[i.qid] for i in batch]
        qctx = [{"question": it.question, "answers": list(it.answers)} for it in items]
        q_same = [False] * len(items)
        queries = [it.question for it in items]
        if qlabel != "original":
            queries, q_same = perturber.apply_flagged(qlabel, queries, self.seed, qctx)
        docs: list[list[Doc]] | None = None
        d_same = [False] * len(items)
        if setting == "gt":
            docs = [list(it.gold) for it in items]
        elif setting in DOC_PERTURBATIONS:
            flat = [(n, d) for n, it in enumerate(items) for d in it.gold]
            dctx = [{"question": items[n].question, "answers": list(items[n].answers), "title": d.title}
                    for n, d in flat]
            texts, same = perturber.apply_flagged(setting, [d.text for _, d in flat], self.seed, dctx)
            docs = [[] for _ in items]
            changed = [False] * len(items)
            for (n, d), t, u in zip(flat, texts, same):
                docs[n].append(Doc(t, d.title, d.id, d.source))
                changed[n] = changed[n] or not u
            d_same = [not c for c in changed]
        todo = [n for n, inst in enumerate(batch) if inst.id in pending]
        checks = {n: (True, "") for n in todo}
        for n in todo:
            if q_same[n]:
                checks[n] = (False, "query unchanged (not applicable)")
            elif qlabel != "original" and leaks_answer(queries[n], items[n].question, items[n].answers):
                checks[n] = (False, LEAK_REASON)
            elif d_same[n]:
                checks[n] = (False, "documents unchanged (not applicable)")
            elif setting == "no_answer" and any(contains_answer(d.text, items[n].answers) for d in docs[n]):
                checks[n] = (False, "answer still present")
            elif setting == "back_translate" and not any(contains_answer(d.text, items[n].answers) for d in docs[n]):
                checks[n] = (False, "lost the answer")
        asked = [n for n in todo if checks[n][0]]
        results = {}
        if asked:
            replies = client.ask([queries[n] for n in asked],
                                 documents=[docs[n] for n in asked] if docs is not None else None,
                                 retrievers=with_readers(self.retrievers), min_confidence=self.min_confidence or 0.0)
            results = dict(zip(asked, replies))
        records = []
        for n in todo:
            inst, it, r = batch[n], items[n], results.get(n)
            rec = {**inst.key(), "question": queries[n], "original_question": it.question, "gold": list(it.answers),
                   "kept": checks[n][0], "reason": checks[n][1], **reply_fields(r)}
            if docs is not None:
                rec["doc_ids"] = [d.id for d in docs[n]]
                if setting != "gt":
                    rec["docs"] = [d.text for d in docs[n]]
            records.append(rec)
        return records

    def score(self, records: list[dict]) -> dict:
        return score(records, self.min_confidence)


# ---------------------------------------------------------------------------- metrics
def closed_book(records: list[dict]) -> dict[str, bool]:
    """g(q, ∅) per question: ReFree's answer to the original query (any original cell: ReFree
    ignores documents; the ground-truth cell first)."""
    order = {s: i for i, s in enumerate(DOC_SETTINGS)}
    cb: dict[str, bool] = {}
    for r in sorted(records, key=lambda r: order.get(r["variant"], 9)):
        if (r["perturbation"] == "original" and r["qid"] not in cb and CLOSED_BOOK in r.get("answers", {})
                and CLOSED_BOOK not in r.get("missing", ())):
            cb[r["qid"]] = match(r["answers"][CLOSED_BOOK], r["gold"])
    return cb


def _in_score(r: dict, which: str) -> bool:
    q, d = r["perturbation"], r["variant"]
    if which == "overall":
        return True
    if which == "query":
        return q != "original" and d == "gt"
    if which == "document":
        return q == "original" and d in DOC_PERTURBATIONS
    if which == "retrieval":
        return q == "original" and d == "retrieval"
    raise ValueError(which)


def score(records: list[dict], min_confidence: float | None = None) -> dict:
    """Table 4's scores per system; with `min_confidence`, the deployed path's abstaining row too."""
    all_recs = [r for r in records if r.get("suite", NAME) == NAME]
    records = abstention.with_row([r for r in all_recs if r.get("kept", True)], min_confidence)
    dropped: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in all_recs:
        if not r.get("kept", True):
            dropped[r["variant"]][r.get("reason", "")] += 1
    cb = closed_book(records)
    systems = systems_of([r.get("answers", {}) for r in records])
    judged: dict[str, list[tuple[dict, bool]]] = defaultdict(list)
    for r in records:
        if r["qid"] not in cb:
            continue
        for s, a in r.get("answers", {}).items():
            if s in r.get("missing", ()):
                continue
            judged[s].append((r, judge(a, r["gold"], r["variant"], cb[r["qid"]], abstention.abstained(r, s))))
    per_system = {}
    for s in systems:
        js = judged.get(s, [])
        scores = {w: _mean([ok for r, ok in js if _in_score(r, w)]) for w in SCORES}
        grid: dict[str, dict[str, float | None]] = defaultdict(dict)
        for q in sorted({r["perturbation"] for r, _ in js}):
            for d in DOC_SETTINGS:
                grid[q][d] = _mean([ok for r, ok in js if r["perturbation"] == q and r["variant"] == d])
        answers = [(r, r["answers"][s], abstention.abstained(r, s)) for r, _ in js]
        per_system[s] = {**scores, "grid": dict(grid), "n": len(js),
                         "correct": _mean([not no and match(a, r["gold"]) for r, a, no in answers]),
                         "refusal": _mean([no or (is_refusal(a) and not match(a, r["gold"])) for r, a, no in answers])}
    singles = [s for s in systems if is_single(s) and per_system[s]["overall"] is not None]
    best = max(singles, key=lambda s: (per_system[s]["overall"], s), default=None)
    return {"suite": NAME, "systems": list(systems), "per_system": per_system, "best_single": best,
            "questions": len({r["qid"] for r in all_recs}), "closed_book_correct": sum(cb.values()),
            "doc_blind": [s for s in DOC_BLIND if s in systems], "instances": len(all_recs),
            "dropped": {d: dict(v) for d, v in dropped.items()},
            "abstention": abstention.rate(records, min_confidence, lambda r: r["variant"]),
            "cost": run_cost(all_recs)}


def outcomes(records: list[dict], min_confidence: float | None = None) -> dict[str, dict[str, bool]]:
    """Per kept instance and system: robust by RARE Table 3 (the overall score's unit)."""
    records = abstention.with_row([r for r in records if r.get("suite", NAME) == NAME and r.get("kept", True)],
                                  min_confidence)
    cb = closed_book(records)
    return {r["id"]: {s: judge(a, r["gold"], r["variant"], cb[r["qid"]], abstention.abstained(r, s))
                      for s, a in r.get("answers", {}).items() if s not in r.get("missing", ())}
            for r in records if r["qid"] in cb}


def gauges(metrics: dict) -> list[tuple[str, str, float]]:
    return [(s, w, v[w]) for s, v in metrics["per_system"].items() for w in SCORES if v[w] is not None]


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None
