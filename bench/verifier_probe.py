"""Would a verifier read lift the cascade's round 1? An offline probe on the fit split (issue 33).

The shipped voter asks `SE@1~1.5B` and `SE@2&Wiki@5~1.5B` together and a scorer picks between
their answers. Where they differ (about half the questions) the scorer reads log-probabilities,
agreement and who answered; the reader never compares the two answers itself. This probe asks
it to, over each member's own document, with the answer prompt's prefix unchanged (so in the
service the prefix cache serves the document: only the question, the two answers and the
instruction are prefilled):

- `choose`: "which answer is correct, (A) or (B)?", both orders (the 1.5B favours a position);
- `check`: "is the proposed answer correct? Yes or No", each answer over each document.

`read` writes one JSON line per fit question (round 1's answers, their log-probabilities and
tokens, every verifier read with its tokens); resumable. `cv` adds the reads' P as scorer
features and compares 5-fold CV Match and ECE of the one-round layout with and without them,
on the fit split only (fitting/layout_fit.py: fit_layout, five CV seeds).

    python -m bench.verifier_probe read --out var/bench/verifier-fit.jsonl --limit 360
    python -m bench.verifier_probe cv --reads var/bench/verifier-fit.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bench.common import DEFAULT_QUESTIONS

PAIR = ("SE@1~1.5B", "SE@2&Wiki@5~1.5B")
RAG_INSTRUCTION = "Please directly answer the following question"  # where retrievers/prompts.py's RAG prompt's document ends
CHECK = ("Question: {q}\nProposed answer: {a}\n"
         "Is the proposed answer correct according to the paragraphs above? Reply with Yes or No only.")
CHOOSE = ("Question: {q}\nTwo answers were proposed:\n(A) {a}\n(B) {b}\n"
          "According to the paragraphs above, which answer is correct? Reply with A or B only.")
FEATURES = ("check_own", "check_mean", "choose_mean")


def p_token(read: dict[str, Any], token: str) -> float:
    """P(the reply's first token is `token`), from the greedy token and its log-probability (the
    engine reports the chosen token's only: two-way choices make the rest the other answer)."""
    p = math.exp(read["lp"][0]) if read.get("lp") else 0.5
    return p if read["text"].strip().lower().startswith(token) else 1.0 - p


def verifier_features(rec: dict[str, Any], pair: Sequence[str] = PAIR) -> dict[str, list[float]]:
    """member -> [P(Yes) for its answer over its own document, P(Yes) for it over both documents,
    P(it is chosen) over both documents and orders]; where the two agree nothing was asked:
    (0.5, 0.5, 1.0)."""
    a, b = pair
    reads = rec.get("reads", [])
    out = {}
    for me in pair:
        own = [p_token(r, "yes") for r in reads if r["kind"] == "check" and r["doc"] == me and r["arg"] == me]
        both = [p_token(r, "yes") for r in reads if r["kind"] == "check" and r["arg"] == me]
        # order "ab": (A) is the first member's answer
        chosen = [p_token(r, "a" if (me == a) == (r["arg"] == "ab") else "b") for r in reads if r["kind"] == "choose"]
        out[me] = [own[0] if own else 0.5, float(np.mean(both)) if both else 0.5,
                   float(np.mean(chosen)) if chosen else 1.0]
    return out


def cmd_read(args) -> int:
    from retrievers.reader import PromptText, SamplingParams
    from serve.builder import make_pool
    from serve.config import load_config
    from serve.offline.dataset import Selection, select_questions
    from voter.normalize import normalize_answer
    from voter.qa_metrics import match

    out = Path(args.out)
    seen = {json.loads(line)["qid"] for line in out.open()} if out.exists() else set()
    todo = [q for q in select_questions(Selection(args.questions, None, "fit", args.limit)) if q.qid not in seen]
    pool = make_pool(load_config(args.config, {"index": {"name": args.index}})).load()
    read: list[PromptText] = []
    generate = pool._generate

    def keep(readers, prompts, params):  # the answer prompts round 1 reads (reader cache or engine)
        read.extend(prompts)
        return generate(readers, prompts, params)
    pool._generate = keep
    engine = pool.readers[args.reader].engine
    engine.load()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        for q in todo:
            read.clear()
            res = pool.run_round([q.question], list(PAIR)).results[0]
            c = {x.retriever: x for x in res.candidates}
            rec = {"qid": q.qid, "dataset": q.dataset, "same": normalize_answer(c[PAIR[0]].answer) ==
                   normalize_answer(c[PAIR[1]].answer), "members": {
                       s: {"answer": c[s].answer, "right": match(c[s].answer, q.answers), "logprobs": c[s].logprobs,
                           "tokens": [c[s].tokens.prompt, c[s].tokens.generated, c[s].tokens.cached]} for s in PAIR}}
            prefixes = [p.body.split(RAG_INSTRUCTION)[0] for p in read if RAG_INSTRUCTION in p.body]
            if len(prefixes) != 2:
                rec["skipped"] = f"{len(prefixes)} answer prompts read"
            else:
                prompts, tags = [], []
                answers = {s: c[s].answer for s in PAIR}
                for doc, prefix in zip(PAIR, prefixes):
                    for who in (PAIR if not rec["same"] else (doc,)):
                        prompts.append(PromptText(prefix + CHECK.format(q=q.question, a=answers[who])))
                        tags.append(("check", doc, who))
                    if not rec["same"]:
                        for order, (x, y) in (("ab", (answers[PAIR[0]], answers[PAIR[1]])),
                                              ("ba", (answers[PAIR[1]], answers[PAIR[0]]))):
                            prompts.append(PromptText(prefix + CHOOSE.format(q=q.question, a=x, b=y)))
                            tags.append(("choose", doc, order))
                outs = engine.generate([engine.format(p) for p in prompts], SamplingParams(max_tokens=2))
                rec["reads"] = [{"kind": k, "doc": d, "arg": w, "text": g.text, "lp": list(g.logprobs or ()),
                                 "tokens": [g.tokens.prompt, g.tokens.cached, g.tokens.generated] if g.tokens else None}
                                for (k, d, w), g in zip(tags, outs)]
            f.write(json.dumps(rec) + "\n")
            f.flush()
    return 0


def cmd_cv(args) -> int:
    import fitting.pool_run as rows  # its candidate_features is swapped for the probe's below
    from fitting.layout_fit import fit_layout
    from fitting.pricing import LatencyModel
    from retrievers.types import Candidate, Context, QuestionResult, ReaderTokens
    from serve.builder import make_pool
    from serve.config import load_config
    from serve.offline.dataset import Selection, select_questions
    from voter.question_vote import MetricOptions, build_metrics
    from voter.selector import candidate_features

    recs = {r["qid"]: r for r in map(json.loads, Path(args.reads).open()) if "skipped" not in r}
    config = load_config(args.config, {"index": {"name": args.index}})
    pool = make_pool(config)

    def result(q, rec) -> QuestionResult:
        m = rec["members"]
        return QuestionResult(q.question, tuple(
            Candidate(s, m[s]["answer"], Context(s), tokens=ReaderTokens(*m[s]["tokens"]),
                      logprobs=tuple(m[s]["logprobs"]) if m[s]["logprobs"] else None) for s in PAIR), {})
    scored = [(q, result(q, recs[q.qid])) for q in select_questions(Selection(args.questions, None, "fit", None))
              if q.qid in recs]
    names = config.voter.metrics
    metrics = build_metrics(MetricOptions.parse(",".join(names)), pool.reader)
    run = rows.pool_run(scored, list(PAIR), metrics, rows.equal_vote(list(PAIR), names, config.voter.pooling))
    by_answers = {tuple(run.answers[i]): verifier_features(recs[q.qid]) for i, (q, _) in enumerate(scored)}
    n, right = len(run), run.right
    doc: dict[str, Any] = {"questions": n, "right": {s: round(float(right[:, k].mean()), 4) for k, s in enumerate(PAIR)},
                           "oracle": round(float(right.max(axis=1).mean()), 4), "rows": []}
    for used in ((), *((f,) for f in range(len(FEATURES))), tuple(range(len(FEATURES)))):
        def features(view, members, used=used):
            X, idx = candidate_features(view, members)
            if not used:
                return X, idx
            f = by_answers.get(tuple(view.answers))
            extra = [[(f[members[m]] if f else [0.5, 0.5, 1.0])[k] for k in used] for m in idx]
            return np.hstack([X, np.asarray(extra, dtype=np.float64).reshape(len(idx), len(used))]), idx
        rows.candidate_features = features
        fits = [fit_layout(run, (PAIR,), LatencyModel(), seed=s, calibration="platt-per-round")
                for s in range(5)]
        doc["rows"].append({"features": [FEATURES[k] for k in used] or ["(the shipped scorer's)"],
                            "cv_match": round(float(np.mean([f.cv_accuracy for f in fits])), 4),
                            "cv_ece": round(float(np.mean([f.cv_ece for f in fits])), 4)})
    rows.candidate_features = candidate_features
    disagree = [i for i, (q, _) in enumerate(scored) if not recs[q.qid]["same"]]
    one = [i for i in disagree if right[i].sum() == 1]
    chose = sum(1 for i in one if (verifier_features(recs[scored[i][0].qid])[PAIR[0]][2] > 0.5) == bool(right[i, 0]))
    doc["disagree"] = {"questions": len(disagree), "exactly_one_right": len(one), "chosen_right": chose,
                       f"{PAIR[1]}_right": int(sum(right[i, 1] for i in one))}
    print(json.dumps(doc, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["read", "cv"])
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--config", default="deploy/eor-15b.yaml")
    ap.add_argument("--reader", default="1.5B", help="the configured reader that verifies (the pair's)")
    ap.add_argument("--limit", type=int, default=360, help="read: the first N fit-split questions")
    ap.add_argument("--out", default="var/bench/verifier-fit.jsonl", help="read: the JSONL it grows")
    ap.add_argument("--reads", default="var/bench/verifier-fit.jsonl", help="cv: what `read` wrote")
    args = ap.parse_args(argv)
    return cmd_read(args) if args.mode == "read" else cmd_cv(args)


if __name__ == "__main__":
    sys.exit(main())
