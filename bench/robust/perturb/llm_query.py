"""Query rewrites by the live service's reader: one Generate call per batch, greedy.

- `ambiguity`: a modal hedge ("Who might ...") or the most specific noun or name changed to its
  kind, one per variant (`Ambiguity`); `formal`: one rewrite per prompt, guided by a formal
  opener per seed (`GuidedRewrite`: the paper's prompt is answered, not followed, by a 0.5B
  reader). `redundancy`: one rewrite per prompt whose reply is begun for the model with the
  question and a link per seed (`ContinuedRewrite`). The paper's prompts (its Table 3, n
  paraphrases one per line) stay in each class's `prompt` for reference.
- `grammar_rewrite`, `irrelevant_detail`: RARE App. C.1 (GPT-4.1 wrote 3 candidates, the most
  similar to the query by an embedding model was kept). RARE does not publish its prompts;
  ours (`GRAMMAR_PROMPT`, `IRRELEVANT_PROMPT`, in the style of the ones above) are answered, not
  followed, by a 0.5B reader, so both are guided rewrites like `formal` (`GuidedRewrite`):
  one rewrite per prompt, its opening given per seed.

The reader's reply is cleaned (list numbering, labels such as "Rewritten question:", quotes);
a reply equal to the original (case and punctuation aside), one that talks about the task or
an answer ("The answer is ...") and, for a question, one that is no question are not rewrites:
the original query is kept and flagged in `last_fallbacks`.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from bench.robust.perturb.base import LLMPerturbation, register
from bench.robust.perturb.textutil import STOP_WORDS, query_rewrites

_FORMAT = ("Separate the output text samples by a single newline between them. Do not output anything "
           "else and do not answer the question but only paraphrase it.\n\nInput text: {text}\nOutput:\n\n")

# Perçin et al. (2025), Table 3
REDUNDANCY_PROMPT = ("Paraphrase the input text {n} times by inserting related redundant knowledge into the "
                     "input text. Do not insert any information that will answer the question directly.\n\n"
                     + _FORMAT)
FORMAL_PROMPT = "Paraphrase the input text {n} times in a more formal tone.\n\n" + _FORMAT
AMBIGUITY_PROMPT = ("Paraphrase the text below {n} times while making it unclear to answer by introducing "
                    "ambiguity to the text.\n\n" + _FORMAT)
# RARE App. C.1 describes these two; the wording is ours, in the style of the three above
GRAMMAR_PROMPT = ("Rewrite the input question {n} times, changing only its grammar, punctuation or word "
                  "order. Keep its meaning and every name, number and fact in it.\n\n" + _FORMAT)
IRRELEVANT_PROMPT = ("Rewrite the input question {n} times, each time inserting one detail that is related "
                     "to its topic but irrelevant to its answer. Do not insert any information that "
                     "answers the question.\n\n" + _FORMAT)


class QueryRewrite(LLMPerturbation):
    """A rewrite of a query; `prompt` is the paper's own prompt, kept for reference (see the
    module doc)."""

    target = "query"
    prompt: str = ""
    max_tokens = 64

    def _choose(self, texts: list[str], candidates: list[list[str]]) -> list[str]:
        """Each text's first candidate; the text itself where there is none (flagged in
        `last_fallbacks`)."""
        self.last_fallbacks = [not c for c in candidates]
        return [c[0] if c else t for t, c in zip(texts, candidates)]


CONTINUE_PROMPT = ("Rewrite the question below{how}. Do not answer it. Reply with the rewritten question only."
                   "\n\nQuestion: {text}")


class ContinuedRewrite(QueryRewrite):
    """One rewrite per prompt whose reply is begun for the model (Generate's `starts`): the
    question itself and a link (seed s takes the (s mod n)-th of `links`), which the model must
    continue. A chat model given the opening only as an instruction ("starting with ...")
    repeats the question and stops. A continuation of fewer than two words is no rewrite."""

    links: tuple[str, ...] = ()
    how = ""

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        link = self.links[seed % len(self.links)]
        return self._choose(texts, self._continued(texts, [_question_opening(t) + link for t in texts], self.how))

    def _continued(self, texts: list[str], starts: list[str], how: str) -> list[list[str]]:
        """Per text, its rewrite continued from `starts` (none when unusable)."""
        outs = self.generate([CONTINUE_PROMPT.format(how=how, text=t) for t in texts], max_tokens=48,
                             starts=starts)
        candidates = []
        for text, start, out in zip(texts, starts, outs):
            line = out.strip().splitlines()[0] if out.strip() else ""
            added = line[len(start):] if line.startswith(start) else ""
            candidates.append(query_rewrites(line, text)[:1] if len(added.split()) >= 2 else [])
        return candidates


def _question_opening(question: str) -> str:
    q = question.strip().rstrip("?").rstrip()
    return q[:1].upper() + q[1:]


@register("redundancy")
class Redundancy(ContinuedRewrite):
    """The query-level paper's redundancy: related knowledge inserted into the question. Its own
    prompt (`prompt`, five at once) gave 4 usable of 150 with Qwen-0.5B; continued, 133 of 150
    (the facts it adds are related, not always true; 2 named the answer and were dropped)."""

    prompt = REDUNDANCY_PROMPT
    links = (", knowing that", ", given that", ", considering that", ", bearing in mind that", ", as")
    how = ", adding a related fact that does not answer it"


GUIDED_PROMPT = ("Rewrite the question below{how}, starting with \"{opener}\". Keep its meaning. Do not answer "
                 "it. Reply with the rewritten question only.\n\nQuestion: {text}")


class GuidedRewrite(QueryRewrite):
    """One rewrite per prompt, the reply's opening given (`openers`, seed s takes the
    (s mod n)-th): what makes a 0.5B reader rewrite a question instead of answering it. Measured
    with Qwen2.5-Coder-0.5B-Instruct (greedy) on 30 NQ questions: asked the papers' prompts (n
    paraphrases, one per line) it answered the question or copied it; numbered lists and
    few-shot examples gave copies, answers or the example's question back. Asked for one
    rewrite starting with a given opener it writes a faithful question. Only openers that gave
    30 usable rewrites of 30 are listed (docs/benchmarks.md, the yields table)."""

    openers: tuple[str, ...] = ()
    how = ""  # what the rewrite changes, as a clause after "Rewrite the question below"

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        opener = self.openers[seed % len(self.openers)]
        outs = self.generate([GUIDED_PROMPT.format(how=self.how, opener=opener, text=t) for t in texts],
                             max_tokens=64)
        return self._choose(texts, [query_rewrites(o, t)[:1] for t, o in zip(texts, outs)])


#: one formal opener per variant (see `GuidedRewrite`)
FORMAL_OPENERS = ("Could you please tell me", "May I inquire", "I would like to know", "Would you kindly tell me",
                  "Might I ask")


@register("formal")
class Formal(GuidedRewrite):
    """The formal tone (query-level paper). Its own prompt, kept in `prompt` for reference, gave
    22 usable variants of 150; guided, 150 of 150."""

    prompt = FORMAL_PROMPT
    openers = FORMAL_OPENERS
    how = " in a more formal tone"


#: per variant: the modal the question is hedged with ("" for none), and whether its most
#: specific noun or name is changed to a general category
AMBIGUITY_MOVES: tuple[tuple[str, bool], ...] = (("might", False), ("could", False), ("", True), ("may", False),
                                                  ("might", True))
HEDGE_HOW = ' so that it is vague and open to interpretation, using the word "{modal}"'
TERM_PROMPT = "Which noun or name in the question below is its most specific one? Do not answer it.\n\nQuestion: {text}"
TERM_START = 'The most specific noun or name in the question is "'
CATEGORY_PROMPT = ('In the question "{text}", what kind of thing is "{term}"? Reply with a general category of one '
                   'or two words, without naming it.')
CATEGORY_START = '"{term}" is a kind of "'
_WH = re.compile(r"^(who|whom|whose|what|when|where|which|why|how)\b", re.IGNORECASE)
_DETERMINERS = frozenset("the a an this that these those his her its their my your our".split())


@register("ambiguity")
class Ambiguity(ContinuedRewrite):
    """The query-level paper's ambiguity (§3: "inserting words such as 'might' ... or changing
    words to more general correspondents (e.g., changing 'rapper' to 'artist')"), both ways, one
    per variant (`AMBIGUITY_MOVES`). A hedge is a continued rewrite begun with the question word
    and the modal ("Who might"); a generalisation asks the model, each time with a begun reply,
    for the question's most specific noun or name and for the kind of thing it is, and puts the
    kind in its place in code ("lithium batteries" -> "metal batteries", "the us mint" -> "the
    company"). Its own prompt (`prompt`, five at once) gave 3 usable of 150 with Qwen-0.5B: it
    wrote the question back. The kinds a 0.5B model names are not always right ("eye" -> "skeleton")."""

    prompt = AMBIGUITY_PROMPT

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        modal, general = AMBIGUITY_MOVES[seed % len(AMBIGUITY_MOVES)]
        if modal:
            starts = [f"{_wh_word(t)} {modal}" for t in texts]
            rewrites = [c[0] if c else "" for c in self._continued(texts, starts, HEDGE_HOW.format(modal=modal))]
        else:
            rewrites = list(texts)
        if general:
            terms = self._quoted([TERM_PROMPT.format(text=t) for t in texts], [TERM_START] * len(texts))
            kinds = self._quoted([CATEGORY_PROMPT.format(text=t, term=term) for t, term in zip(texts, terms)],
                                 [CATEGORY_START.format(term=term) for term in terms])
            rewrites = [generalize(r, term, kind) if r else "" for r, term, kind in zip(rewrites, terms, kinds)]
        return self._choose(texts, [query_rewrites(r, t)[:1] if r else [] for t, r in zip(texts, rewrites)])

    def _quoted(self, prompts: list[str], starts: list[str]) -> list[str]:
        """What the model wrote between the begun reply's opening quote and its closing one."""
        outs = self.generate(prompts, max_tokens=16, starts=starts)
        return [o[len(s):].split('"', 1)[0].strip().rstrip(".") if o.startswith(s) else "" for o, s in zip(outs, starts)]


def _wh_word(question: str) -> str:
    m = _WH.match(question.strip())
    return m.group(1).capitalize() if m else "What"


def generalize(question: str, term: str, kind: str) -> str:
    """`question` with `term` replaced by `kind` ("" when that is no generalisation: the term is
    not in the question, the kind is the term, longer than three words, or repeats a word the
    question has outside the term). A kind put where a bare noun phrase ends gets "a"/"an"
    unless a determiner precedes it ("in great britain" -> "in a country")."""
    words = kind.split()
    if not term or not words or len(words) > 3 or kind.lower() == term.lower():
        return ""
    m = re.search(rf"(?<!\w){re.escape(term)}(?!\w)", question, re.IGNORECASE)
    if not m:
        return ""
    before, after = question[:m.start()], question[m.end():]
    outside = set(re.findall(r"[a-z']+", (before + " " + after).lower()))
    if any(w.lower() in outside for w in words):
        return ""
    prev = re.findall(r"[a-z']+", before.lower())[-1:]
    nxt = re.findall(r"[a-z']+", after.lower())[:1]
    bare = not (prev and prev[0] in _DETERMINERS) and words[0].lower() not in _DETERMINERS
    if bare and (not nxt or nxt[0] in STOP_WORDS):  # the term ends a noun phrase: it needs an article
        kind = ("an " if kind[0].lower() in "aeiou" else "a ") + kind
    return before + kind + after


@register("grammar_rewrite")
class GrammarRewrite(GuidedRewrite):
    """RARE's grammar rewrite as an indirect question: a new main clause, the question's own
    clause reordered under it ("Do you know where the TV show ... is filmed?"). Its three-at-once
    prompt (`prompt`) gave 4 usable of 30 with Qwen-0.5B; guided, 30 of 30 per opener."""

    prompt = GRAMMAR_PROMPT
    openers = ("Do you know", "Does anyone know", "Can you tell me")
    how = " with different grammar and word order"


@register("irrelevant_detail")
class IrrelevantDetail(GuidedRewrite):
    """RARE's irrelevant detail as why the question is asked ("For a school project, ..."): a
    detail no answer depends on. RARE asks for a detail related to the question's topic; Qwen-0.5B
    asked for one states a fact (often the answer) or no question, so the detail here is the
    asker's, not the topic's. The three-at-once prompt gave 2 usable of 30; guided, 30 of 30."""

    prompt = IRRELEVANT_PROMPT
    openers = ("For a school project,", "Just out of curiosity,")
    how = ", adding a detail about why you ask that has nothing to do with its answer"
