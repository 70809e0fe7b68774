"""Test doubles for the robustness suites: a deterministic fake of the live service (the
`BenchClient` methods) and a few simple, seeded perturbations. Tests only."""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace
from typing import Sequence

from bench.robust.client import AskResult, Deployed, Doc, Hit
from bench.robust.data import Item
from bench.robust.perturb.base import NotApplicable, Perturbation
from bench.robust.qa import contains_answer
from bench.robust.runner import Perturber

POOL = ("Wiki@10", "SE@1", "PK", "ReFree")


def _doc(pid: str, title: str, text: str) -> Doc:
    return Doc(text=text, title=title, id=pid, source="nqgold")


ITEMS = [
    Item("q1", "who wrote hamlet", ("Shakespeare",),
         (_doc("nqgold-1", "Hamlet", "Hamlet is a tragedy. It was written by William Shakespeare around 1600."),),
         _doc("vital-1", "Macbeth", "Macbeth is a play. It is about a Scottish general."), ("nqgold-1",)),
    Item("q2", "what is the capital of france", ("Paris",),
         (_doc("nqgold-2", "France", "France is in Europe. Its capital is Paris. It has many museums."),),
         _doc("vital-2", "Germany", "Berlin is the capital of Germany. It is a large city."), ("nqgold-2",)),
    Item("q3", "who painted the mona lisa", ("Leonardo da Vinci", "Leonardo"),
         (_doc("nqgold-3", "Mona Lisa", "The Mona Lisa is a portrait. It was painted by Leonardo da Vinci."),),
         _doc("vital-3", "Louvre", "The Louvre is a museum. It is in a former palace."), ("nqgold-3",)),
    Item("q4", "how many legs does a spider have", ("eight", "8"),
         (_doc("nqgold-4", "Spider", "Spiders are arachnids. A spider has eight legs and two body parts."),),
         _doc("vital-4", "Insect", "Insects have six legs. They have three body parts."), ("nqgold-4",)),
]
KNOWN = {"q1", "q2"}  # the fake reader answers these closed-book


def _vote(answers: dict[str, str]) -> str:
    counts = Counter(answers.values())
    top = max(counts.values())
    return next(a for a in answers.values() if counts[a] == top)


def _cascade(answers: dict[str, str], degraded: bool = False) -> Deployed:
    """The fake service's production path: Wiki@10 and SE@1 first, settled when they agree,
    else the vote over the whole pool in a second round; `degraded` (a bad voter pushed):
    SE@1's answer, alone. P(right): 0.9 settled in round 1, 0.6 after round 2, 0.3 degraded."""
    if degraded:
        return Deployed(answers["SE@1"], "degraded voter", ("SE@1",), 1, 150, 0.2, 0.1, 0.3)
    first = {s: answers[s] for s in ("Wiki@10", "SE@1")}
    if len(set(first.values())) == 1:
        return Deployed(first["Wiki@10"], "fake cascade", tuple(first), 1, 300, 0.5, 0.2, 0.9)
    return Deployed(_vote(answers), "fake cascade", tuple(answers), 2, 900, 1.0, 0.5, 0.6)


def _at_bar(d: Deployed, min_confidence: float) -> Deployed:
    """As the service replies at `min_confidence`: below it "not sure", the answer in `guess`."""
    if min_confidence > 0 and (d.confidence is None or d.confidence < min_confidence):
        return replace(d, answer="", abstained=True, guess=d.answer, min_confidence=min_confidence)
    return replace(d, min_confidence=min_confidence)


class FakeClient:
    """Deterministic answers that depend on the question and the documents, like a reader:

    - ReFree, PK: closed-book: right for KNOWN questions asked plainly, else "no idea" / "London".
    - Wiki@10: reads the documents: the answer when one holds it, else "unknown"; without
      documents (it retrieves) it is right unless the query is shouted (upper case).
    - SE@1: like Wiki@10 but an HTML-wrapped document confuses it.
    - EoR: the most common answer (ties: pool order).
    - deployed (production's path): Wiki@10 and SE@1 when they agree, else the vote over the pool;
      at a `min_confidence` above its P(right) it abstains. `bars`: the bar of every Ask.
    """

    def __init__(self, items: Sequence[Item] = ITEMS, fail_on_ask: int | None = None, degraded: bool = False):
        self.degraded = degraded
        self.items = {it.question: it for it in items}
        self.asked: list[tuple[str, tuple[str, ...] | None]] = []
        self.ask_calls = 0
        self.bars: list[float] = []
        self.generate_seconds = 0.0
        self.fail_on_ask = fail_on_ask

    def _item(self, q: str) -> tuple[Item, bool]:
        base = re.sub(r" x\d+$", "", q).lower()
        return self.items[base], q != q.lower() or base != q

    def ask(self, questions, documents=None, retrievers=(), deployed=True, min_confidence=0.0):
        self.ask_calls += 1
        self.bars.append(min_confidence)
        if self.fail_on_ask is not None and self.ask_calls >= self.fail_on_ask:
            raise KeyboardInterrupt("interrupted")
        out = []
        for n, q in enumerate(questions):
            docs = documents[n] if documents is not None else None
            self.asked.append((q, tuple(d.text for d in docs) if docs is not None else None))
            it, perturbed = self._item(q)
            gold = it.answers[0]
            plain_known = it.qid in KNOWN and q == q.lower()
            ans = {"PK": gold if plain_known else "London", "ReFree": gold if plain_known else "no idea"}
            if docs is None:
                ans["Wiki@10"] = gold if q != q.upper() else "wrong"
                ans["SE@1"] = "wrong"
            else:
                has = any(contains_answer(d.text, it.answers) for d in docs)
                ans["Wiki@10"] = gold if has else "unknown"
                ans["SE@1"] = gold if has and not any(d.text.startswith("<html>") for d in docs) else "Rome"
            full = dict(ans)
            ans = {s: a for s, a in ans.items() if not retrievers or s in retrievers}
            out.append(AskResult(question=q, answer=_vote(ans), retriever="", answers=ans, reader_s=0.5, latency_s=1.0,
                                 deployed=_at_bar(_cascade(full, self.degraded), min_confidence) if deployed else None))
        return out

    def retrieve(self, questions, k, sources=()):
        out = []
        for q in questions:
            it, perturbed = self._item(q)
            gold = it.gold[0]
            wiki = [Hit(f"{gold.id}#0", gold.title, gold.text, "Wiki")] if not perturbed else []
            wiki += [Hit(f"vital-{i}", "x", "filler", "Wiki") for i in range(k - len(wiki))]
            se = [Hit("page-7", "x", "filler", "SE"), Hit("page-9", gold.title, "intro\n" + gold.text, "SE")]
            out.append({"Wiki": wiki[:k], "SE": se[:k]})
        return out

    def generate(self, prompts, max_tokens=128, temperature=0.0):
        self.generate_seconds += 0.25
        return ["entailment" for _ in prompts]

    def close(self):
        pass


# ---------------------------------------------------------------------------- perturbations
class Shout(Perturbation):
    name = "shout"

    def perturb_one(self, text, rng, context):
        return text.upper()


class Suffix(Perturbation):
    """Appends a seeded variant tag " xN" (the fake client strips it)."""
    name = "suffix"

    def perturb_one(self, text, rng, context):
        return f"{text} x{rng.randint(1, 9999)}"


class SuffixSome(Suffix):
    """Like Suffix, but spider questions have "no word it may touch"."""
    name = "suffix_some"

    def perturb_one(self, text, rng, context):
        if "spider" in text:
            raise NotApplicable("nothing to change")
        return super().perturb_one(text, rng, context)


class Html(Perturbation):
    name = "html"
    target = "document"

    def perturb_one(self, text, rng, context):
        return f"<html><body>{text}</body></html>"


class DropAnswer(Perturbation):
    """Deletes the sentences holding a gold answer."""
    name = "drop_answer"
    target = "document"

    def perturb_one(self, text, rng, context):
        sents = re.split(r"(?<=\.)\s+", text)
        return " ".join(s for s in sents if not contains_answer(s, context.get("answers", [])))


class Reverse(Perturbation):
    name = "reverse"
    target = "document"

    def perturb_one(self, text, rng, context):
        return " ".join(reversed(re.split(r"(?<=\.)\s+", text)))


class Generated(Perturbation):
    """An 'LLM' perturbation: asks the generator (counts Generate time)."""
    name = "generated"
    target = "document"

    def __init__(self, generator=None):
        self.generator = generator

    def perturb_batch(self, texts, seed, context):
        self.generator.generate([f"rewrite: {t}" for t in texts])
        return [t + " (rewritten)" for t in texts]


FAKE = {"shout": Shout, "suffix": Suffix, "suffix_some": SuffixSome, "html": Html, "drop_answer": DropAnswer, "reverse": Reverse,
        "generated": Generated}


def fake_get(name, **kwargs):
    return FAKE[name](**kwargs)


def perturber(specs: dict, client=None) -> Perturber:
    return Perturber({label: (name, {}) for label, name in specs.items()}, generator=client, get=fake_get)


def keep_all(originals, perturbed, contexts, generator):
    return [(True, "") for _ in originals]


def seeded(seed: int) -> random.Random:
    return random.Random(seed)
