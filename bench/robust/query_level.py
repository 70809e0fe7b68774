"""Query-level robustness (Perçin et al., 2025): how query perturbations move each module.

Protocol, as the paper's §3-§5 maps onto this service:
- Perturbations (§3): redundancy insertion, formal tone, ambiguity (LLM rewrites by the
  service's reader) and QWERTY typos in 10% and 25% of the words (TextAttack, stop words
  kept); 5 perturbed variants per question and type (variant v is perturbed with seed
  `seed * 100 + v`), plus the original query. A variant the perturbation could not change
  is recorded (`kept: false`) and not asked: it is no perturbed sample; nor is a variant whose
  query equals an earlier variant's of the same question (two variants' rewrites can come
  out the same; counting a repeat twice would weight that question double); nor is a rewrite
  that names a gold answer its original did not (`qa.leaks_answer`): it answers the question
  instead of perturbing it.
- Retriever (§5.2): the `Retrieve` rpc gives each knowledge source's ranking on its own (Wiki
  and SE; "Any" = the union of both); Recall@k = |gold passages in the top k| / |gold| (BEIR's
  recall), k in `KS`. A hit is a gold passage when its id, less a chunk suffix `#n`, is a gold
  pid, or when it contains the gold passage's whole text (an SE page holds several records).
- Generator (§5.3): closed-book = the ReFree retriever's answer; oracle = Ask with the gold
  passages as the documents (every retriever reads them through its own ops; PK and ReFree
  ignore them); RAG (§5.4) = a plain Ask. All scored with Match, for EoR and each retriever;
  Match credits no refusal, so the deployed path's abstention (`--min-confidence`, its second
  row) is not a match.
- Correlations (§5.4, Table 2): per perturbed sample, the change from its original query in
  Recall@5 (RET; the system's own source: Wiki, SE, or Any for mixed, HB and EoR), in
  closed-book Match (CB) and in the system's oracle Match (OR), each Pearson-correlated with
  the change in the system's RAG Match, per perturbation type.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from bench.robust import abstention
from bench.robust.client import Hit
from bench.robust.data import Item
from bench.robust.qa import leaks_answer, match
from bench.robust.runner import (Perturber, PerturbationSpecs, is_single, run_cost, systems_of, unknown_labels,
                                 with_readers)
from bench.robust.store import Instance

NAME = "query"
CLOSED_BOOK = "ReFree"
KS = (1, 3, 5, 10, 20)
CORR_K = 5  # the paper's end-to-end k
REPEAT_REASON = "same query as variant"
LEAK_REASON = "the rewrite names the answer"
#: each answers field -> the deployed reply behind its `deployed` answer
DEPLOYED_FIELDS = {"rag": "deployed", "oracle": "oracle_deployed"}

#: label -> (registry name, kwargs)
PERTURBATIONS: dict[str, tuple[str, dict]] = {
    "redundancy": ("redundancy", {}),
    "formal": ("formal", {}),
    "ambiguity": ("ambiguity", {}),
    "typo10": ("typo", {"rate": 0.10}),
    "typo25": ("typo", {"rate": 0.25}),
}


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def gold_matches(hit: Hit, gold: dict[str, str]) -> list[str]:
    """The gold pids one hit holds: by id (`X#n` counts as `X`) or by containing the text."""
    base = hit.id.split("#", 1)[0]
    text = _squash(hit.text)
    return [g for g, gtext in gold.items() if g == base or (gtext and _squash(gtext) in text)]


def recall_at(ranks: Sequence[Sequence[str]], n_gold: int, k: int) -> float:
    """BEIR Recall@k: the share of gold passages found in the top k (ranks: gold pids per hit)."""
    if n_gold <= 0:
        return 0.0
    return len({g for hit in ranks[:k] for g in hit}) / n_gold


def source_of(system: str) -> str | None:
    """Which retrieval ranking a system's answer depends on (None: no retrieval)."""
    if not is_single(system) or "HB" in system or ("Wiki" in system and "SE" in system):
        return "Any"
    if re.search(r"\bWiki\b", system):
        return "Wiki"
    if re.search(r"\bSE\b", system):
        return "SE"
    return None


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None when fewer than two pairs or either side is constant."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)


@dataclass
class QueryLevelSuite:
    items: Sequence[Item]
    seed: int = 0
    perturbations: Sequence[str] | None = None  # None: all of PERTURBATIONS
    variants: int = 5
    retrievers: Sequence[str] = ()
    sources: Sequence[str] = ()  # empty: every source the service has
    k: int = max(KS)
    perturber: Perturber | None = None
    min_confidence: float | None = None  # the deployed path's second row abstains below this P(right)
    name: str = NAME
    _by_qid: dict[str, Item] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._by_qid = {it.qid: it for it in self.items}
        if self.perturbations is None:
            self.perturbations = tuple(PERTURBATIONS)
        bad = unknown_labels(self.perturbations, PERTURBATIONS, self.perturber)
        if bad:
            raise ValueError(f"unknown query-level perturbation(s) {bad}; known: {', '.join(PERTURBATIONS)}")
        if self.variants < 1:
            raise ValueError("variants must be >= 1")

    def specs(self) -> PerturbationSpecs:
        return {p: PERTURBATIONS[p] for p in self.perturbations if p in PERTURBATIONS}

    def plan(self) -> list[Instance]:
        out = []
        for it in self.items:
            out.append(Instance(self.name, it.qid, "original", "0", self.seed))
            out += [Instance(self.name, it.qid, p, str(v), self.seed)
                    for p in self.perturbations for v in range(self.variants)]
        return out

    def group(self, inst: Instance) -> Hashable:
        return (inst.perturbation, inst.variant)

    def execute(self, batch: list[Instance], pending: set[str], client: Any) -> list[dict]:
        perturber = self.perturber = self.perturber or Perturber(self.specs(), generator=client)
        label, variant = batch[0].perturbation, int(batch[0].variant)
        items = [self._by_qid[i.qid] for i in batch]
        questions = [it.question for it in items]
        contexts = [{"question": q, "answers": list(it.answers)} for q, it in zip(questions, items)]
        queries, same = questions, [False] * len(items)
        if label != "original":
            queries, same = perturber.apply_flagged(label, questions, self.seed * 100 + variant, contexts)
        repeats = self._repeated_variant(perturber, label, variant, questions, contexts, queries, same)
        todo = [n for n, inst in enumerate(batch) if inst.id in pending]
        why: dict[int, str] = {}  # why a variant is no new perturbed sample
        for n in todo:
            if same[n]:
                why[n] = "query unchanged (not applicable)"
            elif repeats[n] is not None:
                why[n] = f"{REPEAT_REASON} {repeats[n]}"
            elif label != "original" and leaks_answer(queries[n], items[n].question, items[n].answers):
                why[n] = LEAK_REASON
        asked = [n for n in todo if n not in why]
        records = [{**batch[n].key(), "question": queries[n], "original_question": items[n].question,
                    "gold": list(items[n].answers), "kept": False, "reason": why[n]}
                   for n in todo if n in why]
        if not asked:
            return records
        qs = [queries[n] for n in asked]
        hits = client.retrieve(qs, self.k, self.sources)
        readers = with_readers(self.retrievers)
        bar = self.min_confidence or 0.0
        rag = client.ask(qs, retrievers=readers, min_confidence=bar)
        oracle = client.ask(qs, documents=[list(items[n].gold) for n in asked], retrievers=readers, min_confidence=bar)
        for j, n in enumerate(asked):
            it = items[n]
            gold = {d.id: d.text for d in it.gold}
            records.append({
                **batch[n].key(), "question": queries[n], "original_question": it.question, "kept": True,
                "gold": list(it.answers), "gold_pids": list(it.gold_pids) or list(gold),
                "hits": {src: [gold_matches(h, gold) for h in hs] for src, hs in hits[j].items()},
                "hit_ids": {src: [h.id for h in hs] for src, hs in hits[j].items()},
                "rag": rag[j].by_system(), "rag_missing": list(rag[j].missing),
                "oracle": oracle[j].by_system(), "oracle_missing": list(oracle[j].missing),
                **({"deployed": rag[j].deployed.to_dict()} if rag[j].deployed is not None else {}),
                **({"oracle_deployed": oracle[j].deployed.to_dict()} if oracle[j].deployed is not None else {}),
                "latency_s": rag[j].latency_s + oracle[j].latency_s,
                "ask_reader_s": rag[j].reader_s + oracle[j].reader_s})
        return records

    def _repeated_variant(self, perturber: Perturber, label: str, variant: int, questions: list[str],
                          contexts: list[dict], queries: list[str], same: list[bool]) -> list[int | None]:
        """Per query, the earlier variant that gave the same perturbed text (None: a new one).
        The earlier variants are re-derived: seeded, and their Generate calls hit the reader cache."""
        repeats: list[int | None] = [None] * len(queries)
        if label == "original":
            return repeats
        for u in range(variant):
            prev, prev_same = perturber.apply_flagged(label, questions, self.seed * 100 + u, contexts)
            for n, q in enumerate(queries):
                if repeats[n] is None and not same[n] and not prev_same[n] and prev[n].strip() == q.strip():
                    repeats[n] = u
        return repeats

    def score(self, records: list[dict]) -> dict:
        return score(records, self.min_confidence)


# ---------------------------------------------------------------------------- metrics
def _recalls(r: dict) -> dict[str, dict[int, float]]:
    n_gold = len(r["gold_pids"])
    out = {src: {k: recall_at(ranks, n_gold, k) for k in KS} for src, ranks in r["hits"].items()}
    if r["hits"]:
        out["Any"] = {k: len({g for ranks in r["hits"].values() for hit in ranks[:k] for g in hit}) / max(n_gold, 1)
                      for k in KS}
    return out


def _ok(answers: dict, missing, system: str, gold) -> float | None:
    if system not in answers or system in missing:
        return None
    return float(match(answers[system], gold))


def repeated_variants(records: Sequence[dict]) -> set[str]:
    """Ids of kept records whose query repeats a lower variant's of the same question and
    perturbation (runs recorded before repeats were caught at run time kept and asked them)."""
    seen: set[tuple[str, str, str]] = set()
    out = set()
    for r in sorted(records, key=lambda r: int(r["variant"])):
        query = str(r.get("question", "")).strip()
        if r["perturbation"] == "original" or not r.get("kept", True) or not query:
            continue
        key = (r["qid"], r["perturbation"], query)
        if key in seen:
            out.add(record_id(r))
        seen.add(key)
    return out


def record_id(r: dict) -> str:
    return r.get("id") or f"{r['qid']}/{r['perturbation']}/{r['variant']}"


def score(records: list[dict], min_confidence: float | None = None) -> dict:
    """The paper's tables per system; with `min_confidence`, the deployed path's abstaining row too."""
    all_recs = [r for r in records if r.get("suite", NAME) == NAME]
    repeats = repeated_variants(all_recs)
    records = abstention.with_row([r for r in all_recs if r.get("kept", True) and record_id(r) not in repeats],
                                  min_confidence, DEPLOYED_FIELDS)
    unchanged: dict[str, int] = {}
    repeated: dict[str, int] = {}
    for r in all_recs:
        if record_id(r) in repeats or str(r.get("reason", "")).startswith(REPEAT_REASON):
            repeated[r["perturbation"]] = repeated.get(r["perturbation"], 0) + 1
        elif not r.get("kept", True):
            unchanged[r["perturbation"]] = unchanged.get(r["perturbation"], 0) + 1
    systems = dict.fromkeys(systems_of([r.get("rag", {}) for r in records]))
    perts = ["original"] + sorted({r["perturbation"] for r in records} - {"original"}, key=_pert_order)
    rows = []  # one per record: its per-sample metrics
    for r in records:
        rows.append({"rec": r, "recall": _recalls(r),
                     "cb": _ok(r["rag"], r["rag_missing"], CLOSED_BOOK, r["gold"]),
                     "rag": {s: _ok(r["rag"], r["rag_missing"], s, r["gold"]) for s in systems},
                     "oracle": {s: _ok(r["oracle"], r["oracle_missing"], s, r["gold"]) for s in systems}})
    sources = sorted({src for row in rows for src in row["recall"]}, key=lambda s: (s == "Any", s))
    by_pert: dict[str, dict] = {}
    for p in perts:
        prow = [row for row in rows if row["rec"]["perturbation"] == p]
        by_pert[p] = {
            "n": len(prow),
            "recall": {src: {f"@{k}": _mean([row["recall"][src][k] for row in prow if src in row["recall"]])
                             for k in KS} for src in sources},
            "closed_book": _mean([row["cb"] for row in prow]),
            "oracle": {s: _mean([row["oracle"][s] for row in prow]) for s in systems},
            "rag": {s: _mean([row["rag"][s] for row in prow]) for s in systems},
        }
    originals = {row["rec"]["qid"]: row for row in rows if row["rec"]["perturbation"] == "original"}
    correlations: dict[str, dict] = {}
    for p in perts[1:]:
        prow = [row for row in rows if row["rec"]["perturbation"] == p and row["rec"]["qid"] in originals]
        correlations[p] = {}
        for s in systems:
            src = source_of(s)
            d = {"RET": ([], []), "CB": ([], []), "OR": ([], [])}
            for row in prow:
                o = originals[row["rec"]["qid"]]
                if row["rag"][s] is None or o["rag"][s] is None:
                    continue
                drag = row["rag"][s] - o["rag"][s]
                if src and src in row["recall"] and src in o["recall"]:
                    d["RET"][0].append(row["recall"][src][CORR_K] - o["recall"][src][CORR_K])
                    d["RET"][1].append(drag)
                if row["cb"] is not None and o["cb"] is not None:
                    d["CB"][0].append(row["cb"] - o["cb"])
                    d["CB"][1].append(drag)
                if row["oracle"][s] is not None and o["oracle"][s] is not None:
                    d["OR"][0].append(row["oracle"][s] - o["oracle"][s])
                    d["OR"][1].append(drag)
            correlations[p][s] = {m: pearson(*xy) for m, xy in d.items()} | {"n": len(d["CB"][0])}
    mean_rag = {s: _mean([by_pert[p]["rag"][s] for p in perts[1:]]) for s in systems}
    singles = [s for s in systems if is_single(s) and mean_rag[s] is not None]
    best = max(singles, key=lambda s: (mean_rag[s], s), default=None)
    return {"suite": NAME, "perturbations": perts, "systems": list(systems), "sources": sources, "ks": list(KS),
            "by_perturbation": by_pert, "correlations": correlations, "mean_rag_perturbed": mean_rag,
            "best_single": best, "questions": len(originals), "instances": len(all_recs),
            "unchanged": unchanged, "repeated": repeated, "cost": run_cost(all_recs),
            "abstention": abstention.rate(records, min_confidence, lambda r: r["perturbation"])}


def outcomes(records: list[dict], min_confidence: float | None = None) -> dict[str, dict[str, bool]]:
    """Per perturbed query and system: RAG Match (the headline's unit)."""
    recs = abstention.with_row([r for r in records if r.get("suite", NAME) == NAME], min_confidence, DEPLOYED_FIELDS)
    repeats = repeated_variants(recs)
    out: dict[str, dict[str, bool]] = {}
    for r in recs:
        if r["perturbation"] == "original" or not r.get("kept", True) or record_id(r) in repeats:
            continue
        oks = {s: _ok(r["rag"], r["rag_missing"], s, r["gold"]) for s in r.get("rag", {})}
        out[record_id(r)] = {s: bool(v) for s, v in oks.items() if v is not None}
    return out


def gauges(metrics: dict) -> list[tuple[str, str, float]]:
    out = []
    for p, m in metrics["by_perturbation"].items():
        for src, rec in m["recall"].items():
            if rec.get(f"@{CORR_K}") is not None:
                out.append((src, f"recall@{CORR_K}_{p}", rec[f"@{CORR_K}"]))
        for s, v in m["rag"].items():
            if v is not None:
                out.append((s, f"rag_match_{p}", v))
        for s, v in m["oracle"].items():
            if v is not None:
                out.append((s, f"oracle_match_{p}", v))
        if m["closed_book"] is not None:
            out.append((CLOSED_BOOK, f"closed_book_match_{p}", m["closed_book"]))
    return out


def _pert_order(p: str) -> tuple[int, str]:
    order = list(PERTURBATIONS)
    return (order.index(p) if p in order else len(order), p)


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None
