"""SURE (Yang et al., 2025): robustness to spurious features of the grounding document.

Protocol, as the paper's §3 maps onto this service:
- Instances: a question with ONE grounding document, Golden (its gold passage, which holds
  an answer) or Noise (see `bench.robust.data`: the best BM25 passage that is neither gold nor
  holds an answer). Each is asked as is ("original") and with each perturbation applied to
  the document; the service's Wiki/SE sources return that document instead of searching, so
  every retriever reads it through its own ops (@k, @RR, &, @CP).
- Causal features kept (§3.4): by string match, a Golden document must still hold an answer
  and a Noise document must not gain one; and a perturbed document must be semantically
  equivalent to the original. SURE judges that by bidirectional entailment with an LLM (its
  Figure 10 prompt); the default judge here (`judge="content"`) is BERTScore both ways
  (`preserve.content_kept`), because the 0.5B reader calls a passage and its own copy
  "neutral" in 54 of 60 judgements; `judge="reader"` asks the reader as SURE does
  (`preserve.equivalent`). SURE introduces the filter for the LLM rewrites, so by default
  (`nli="rewrites"`) it judges the style and source perturbations; the logic, format and
  metadata ones keep every sentence verbatim (`nli="all"` judges them too, `"none"` none). A
  perturbation that could not apply (the text came back with the same words: case,
  punctuation and spacing aside) is dropped too: an unchanged pair would count as robust for
  free. Dropped instances are recorded (`kept: false`, with the reason), not asked, and
  counted in the report.
- Known / Unknown (§3.3): the question is Known when the closed-book answer (the ReFree
  retriever: the reader with no retrieval) is correct.
- Metrics (§3.6): per instance C = Y(original) - Y(perturbed), Y = Match; RR = share of
  C == 0, LR = share of C == 1 (right -> wrong), WR = share of C == -1, per subset (K-G, K-N,
  U-G, U-N) and in total, for EoR's voted answer and every single retriever.
- Figure 4's radar: the total RR of the perturbations of one category, averaged.
- Refusals: Y is Match alone, so SURE credits none (its reader's "NO-RES" scores 0 like a wrong
  answer, in the Unknown and Noise subsets too); the deployed path's abstaining row
  (`--min-confidence`) is scored the same way: an abstention is Y = 0.

PK and ReFree do not read grounding documents (the service leaves them unchanged), so their
RR is 1 by construction: they are reported but never chosen as the "best single retriever".
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from bench.robust import abstention
from bench.robust.client import Doc
from bench.robust.data import Item
from bench.robust.perturb.textutil import same_words
from bench.robust.qa import match
from bench.robust.runner import (Perturber, PerturbationSpecs, is_single, reply_fields, run_cost, systems_of,
                                 unknown_labels, with_readers)
from bench.robust.store import Instance

NAME = "sure"
CLOSED_BOOK = "ReFree"
DOC_BLIND = ("PK", "ReFree")  # retrievers that ignore grounding documents
SUBSETS = ("K-G", "K-N", "U-G", "U-N", "Total")

#: label -> (category, registry name, kwargs); the 15 rows of SURE's Table 2
TYPES: dict[str, tuple[str, str, dict]] = {
    "style_simple": ("style", "style_simple", {}),
    "style_complex": ("style", "style_complex", {}),
    "source_llm": ("source", "source_llm", {}),
    "source_self": ("source", "source_self", {}),
    "logic_reverse": ("logic", "logic_reverse", {}),
    "logic_random": ("logic", "logic_random", {}),
    "logic_llm_ranked": ("logic", "logic_llm_ranked", {}),
    "format_json": ("format", "format_json", {}),
    "format_html": ("format", "format_html", {}),
    "format_yaml": ("format", "format_yaml", {}),
    "format_markdown": ("format", "format_markdown", {}),
    "meta_timestamp_pre": ("meta", "meta_timestamp_pre", {}),
    "meta_timestamp_post": ("meta", "meta_timestamp_post", {}),
    "meta_source_wiki": ("meta", "meta_source_wiki", {}),
    "meta_source_twitter": ("meta", "meta_source_twitter", {}),
}
CATEGORIES = ("style", "source", "logic", "format", "meta")
#: the perturbations an LLM rewrites the text for; the others keep every sentence verbatim
#: (reordered, or wrapped in a format or metadata template), so meaning is kept by construction
REWRITES = frozenset({"style_simple", "style_complex", "source_llm", "source_self"})
NLI_MODES = ("rewrites", "all", "none")  # which perturbations the entailment filter judges

#: (originals, perturbed, contexts, generator) -> one (kept, reason) per pair
Preserve = Callable[[Sequence[str], Sequence[str], Sequence[Mapping[str, Any]], Any], list[tuple[bool, str]]]


def category(label: str) -> str:
    return TYPES[label][0] if label in TYPES else label.split("_", 1)[0]


def content_preserve(originals, perturbed, contexts, generator) -> list[tuple[bool, str]]:
    """BERTScore both ways (`bench.robust.perturb.preserve.content_kept`); the default judge."""
    from bench.robust.perturb.preserve import content_kept

    return [(c.ok, c.reason) for c in content_kept(originals, perturbed)]


def reader_preserve(originals, perturbed, contexts, generator) -> list[tuple[bool, str]]:
    """SURE §3.4's semantic-equivalence filter as SURE runs it: bidirectional entailment judged
    by the service's reader (`bench.robust.perturb.preserve.equivalent`, its Figure 10 prompt)."""
    from bench.robust.perturb.preserve import equivalent

    return [(c.ok, c.reason) for c in equivalent(generator, originals, perturbed)]


#: the semantic-equivalence judges by name (`--judge`)
JUDGES: dict[str, Preserve] = {"content": content_preserve, "reader": reader_preserve}


@dataclass
class SureSuite:
    items: Sequence[Item]
    seed: int = 0
    types: Sequence[str] | None = None  # None: all of TYPES
    retrievers: Sequence[str] = ()
    perturber: Perturber | None = None
    preserve: Preserve = content_preserve
    nli: str = "rewrites"  # one of NLI_MODES
    min_confidence: float | None = None  # the deployed path's second row abstains below this P(right)
    name: str = NAME
    _by_qid: dict[str, Item] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._by_qid = {it.qid: it for it in self.items}
        self.types = tuple(TYPES) if self.types is None else tuple(self.types)
        unknown = unknown_labels(self.types, TYPES, self.perturber)
        if unknown:
            raise ValueError(f"unknown SURE perturbation(s) {unknown}; known: {', '.join(TYPES)}")
        if self.nli not in NLI_MODES:
            raise ValueError(f"nli must be one of {NLI_MODES}, not {self.nli!r}")

    def specs(self) -> PerturbationSpecs:
        return {t: (TYPES[t][1], TYPES[t][2]) for t in self.types if t in TYPES}

    def _doc(self, item: Item, kind: str) -> Doc | None:
        return item.golden if kind == "golden" else item.noise

    def plan(self) -> list[Instance]:
        out = []
        for it in self.items:
            for kind in ("golden", "noise"):
                if self._doc(it, kind) is None:
                    continue
                for p in ("original", *self.types):
                    out.append(Instance(self.name, it.qid, p, kind, self.seed))
        return out

    def group(self, inst: Instance) -> Hashable:
        return (inst.perturbation, inst.variant)

    def execute(self, batch: list[Instance], pending: set[str], client: Any) -> list[dict]:
        perturber = self.perturber or Perturber(self.specs(), generator=client)
        self.perturber = perturber
        label, kind = batch[0].perturbation, batch[0].variant
        items = [self._by_qid[i.qid] for i in batch]
        docs = [self._doc(it, kind) for it in items]
        contexts = [{"question": it.question, "answers": list(it.answers), "title": d.title, "doc_kind": kind}
                    for it, d in zip(items, docs)]
        unchanged = [False] * len(batch)
        if label == "original":
            texts = [d.text for d in docs]
        else:  # the whole batch is perturbed (positions fixed), only pending ones are used
            texts, unchanged = perturber.apply_flagged(label, [d.text for d in docs], self.seed, contexts)
        todo = [n for n, inst in enumerate(batch) if inst.id in pending]
        checks: dict[int, tuple[bool, str]] = {n: (True, "") for n in todo}
        if label != "original":
            from bench.robust.perturb.preserve import answer_check

            for n in todo:
                ans = answer_check(docs[n].text, texts[n], items[n].answers)
                same = unchanged[n] or same_words(texts[n]) == same_words(docs[n].text)
                checks[n] = (False, "not applicable (unchanged)") if same else (ans.ok, ans.reason)
            judged = self.nli == "all" or (self.nli == "rewrites" and label in REWRITES)
            to_nli = [n for n in todo if checks[n][0]] if judged else []
            if to_nli:
                res = self.preserve([docs[n].text for n in to_nli], [texts[n] for n in to_nli],
                                    [contexts[n] for n in to_nli], client)
                checks.update(dict(zip(to_nli, res)))
        asked = [n for n in todo if checks[n][0]]
        results = {}
        if asked:
            replies = client.ask([items[n].question for n in asked],
                                 documents=[[Doc(texts[n], docs[n].title, docs[n].id, docs[n].source)] for n in asked],
                                 retrievers=with_readers(self.retrievers), min_confidence=self.min_confidence or 0.0)
            results = dict(zip(asked, replies))
        records = []
        for n in todo:
            inst, it, r = batch[n], items[n], results.get(n)
            records.append({
                **inst.key(), "question": it.question, "gold": list(it.answers), "doc_id": docs[n].id,
                "doc": texts[n], "kept": checks[n][0], "reason": checks[n][1], **reply_fields(r)})
        return records

    def score(self, records: list[dict]) -> dict:
        return score(records, self.types, self.min_confidence)


# ---------------------------------------------------------------------------- metrics
def lr_rr_wr(pairs: Sequence[tuple[bool, bool]]) -> dict:
    """SURE eq. 5 and its siblings over (correct on original, correct on perturbed) pairs:
    C = Y(y) - Y(y'); RR = P(C = 0), LR = P(C = 1), WR = P(C = -1)."""
    n = len(pairs)
    if not n:
        return {"LR": None, "RR": None, "WR": None, "n": 0}
    c = [int(a) - int(b) for a, b in pairs]
    return {"LR": c.count(1) / n, "RR": c.count(0) / n, "WR": c.count(-1) / n, "n": n}


def _systems(records: list[dict]) -> list[str]:
    return systems_of([r.get("answers", {}) for r in records])


def _answered(r: dict, system: str) -> bool:
    return system in r.get("answers", {}) and system not in r.get("missing", ())


def known_by_qid(records: list[dict]) -> dict[str, bool]:
    """Closed-book correctness per question, from the ReFree answer of an original instance."""
    known: dict[str, bool] = {}
    for r in sorted(records, key=lambda r: r["variant"] != "golden"):
        if r["perturbation"] == "original" and r["qid"] not in known and _answered(r, CLOSED_BOOK):
            known[r["qid"]] = match(r["answers"][CLOSED_BOOK], r["gold"])
    return known


def same_source_docs(records: list[dict]) -> tuple[int, int]:
    """(identical, compared): how many instances got the same document from `source_llm` as
    from `source_self`. SURE means two different LLMs; with one model behind `Generate` (no
    separate paraphraser) the two types coincide, and the report says so."""
    docs = {t: {(r["qid"], r["variant"]): r.get("doc") for r in records if r["perturbation"] == t}
            for t in ("source_llm", "source_self")}
    both = docs["source_llm"].keys() & docs["source_self"].keys()
    return sum(docs["source_llm"][k] == docs["source_self"][k] for k in both), len(both)


def subset(r: dict, known: Mapping[str, bool]) -> str:
    """K-G, K-N, U-G or U-N: the question Known closed-book or not, the document Golden or Noise."""
    return ("K-" if known[r["qid"]] else "U-") + ("G" if r["variant"] == "golden" else "N")


def score(records: list[dict], types: Sequence[str] | None = None, min_confidence: float | None = None) -> dict:
    """LR/RR/WR per system; with `min_confidence`, the deployed path's abstaining row too."""
    records = abstention.with_row([r for r in records if r.get("suite", NAME) == NAME], min_confidence)
    types = list(types) if types is not None else sorted({r["perturbation"] for r in records} - {"original"})
    known = known_by_qid(records)
    orig = {(r["qid"], r["variant"]): r for r in records if r["perturbation"] == "original"}
    systems = _systems(records)
    per_system: dict[str, dict] = {s: {} for s in systems}
    kept: dict[str, dict] = {}
    for t in types:
        recs = [r for r in records if r["perturbation"] == t]
        kept[t] = {"kept": sum(r["kept"] for r in recs), "dropped": sum(not r["kept"] for r in recs),
                   "reasons": dict(_count(r["reason"] for r in recs if not r["kept"]))}
        for s in systems:
            pairs: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
            for r in recs:
                o = orig.get((r["qid"], r["variant"]))
                if not r["kept"] or o is None or r["qid"] not in known or not (_answered(r, s) and _answered(o, s)):
                    continue
                sub = subset(r, known)
                pair = (match(o["answers"][s], r["gold"]), match(r["answers"][s], r["gold"]))
                pairs[sub].append(pair)
                pairs["Total"].append(pair)
            per_system[s][t] = {sub: lr_rr_wr(pairs.get(sub, [])) for sub in SUBSETS}
    category_rr = {s: {c: _mean([per_system[s][t]["Total"]["RR"] for t in types if category(t) == c])
                       for c in CATEGORIES if any(category(t) == c for t in types)} for s in systems}
    accuracy = {s: {kind: _mean([float(match(o["answers"][s], o["gold"])) for (q, k), o in orig.items()
                                 if k == kind and _answered(o, s)]) for kind in ("golden", "noise")} for s in systems}
    mean_rr = {s: _mean([per_system[s][t]["Total"]["RR"] for t in types]) for s in systems}
    singles = [s for s in systems if is_single(s) and s not in DOC_BLIND and mean_rr[s] is not None]
    best = max(singles, key=lambda s: (mean_rr[s], s), default=None)
    return {
        "suite": NAME, "types": types, "systems": systems, "per_system": per_system,
        "category_rr": category_rr, "mean_rr": mean_rr, "accuracy_original": accuracy,
        "preservation": kept, "questions": len({r["qid"] for r in records}),
        "known": sum(known.values()), "unknown": sum(not v for v in known.values()),
        "best_single": best, "doc_blind": [s for s in DOC_BLIND if s in systems],
        "instances": len(records), "cost": run_cost(records), "same_source_docs": same_source_docs(records),
        "abstention": abstention.rate([r for r in records if r["qid"] in known], min_confidence,
                                      lambda r: subset(r, known)),
    }


def outcomes(records: list[dict], min_confidence: float | None = None) -> dict[str, dict[str, bool]]:
    """Per perturbed instance and system, the headline's unit: robust (C = 0, as right or as
    wrong as on the original document). What a round is compared with its baseline by."""
    records = abstention.with_row([r for r in records if r.get("suite", NAME) == NAME], min_confidence)
    known = known_by_qid(records)
    orig = {(r["qid"], r["variant"]): r for r in records if r["perturbation"] == "original"}
    out: dict[str, dict[str, bool]] = {}
    for r in records:
        o = orig.get((r["qid"], r["variant"]))
        if r["perturbation"] == "original" or not r["kept"] or o is None or r["qid"] not in known:
            continue
        out[r["id"]] = {s: match(o["answers"][s], r["gold"]) == match(r["answers"][s], r["gold"])
                        for s in r.get("answers", {}) if _answered(r, s) and _answered(o, s)}
    return out


def gauges(metrics: dict) -> list[tuple[str, str, float]]:
    """(system, metric, value) for Prometheus: RR per type and category, mean RR."""
    out = []
    for s, per in metrics["per_system"].items():
        for t, subs in per.items():
            if subs["Total"]["RR"] is not None:
                out.append((s, f"rr_{t}", subs["Total"]["RR"]))
        for c, v in metrics["category_rr"][s].items():
            if v is not None:
                out.append((s, f"rr_{c}", v))
        if metrics["mean_rr"][s] is not None:
            out.append((s, "rr_mean", metrics["mean_rr"][s]))
    return out


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _count(xs):
    d: dict[str, int] = defaultdict(int)
    for x in xs:
        d[x] += 1
    return d
