"""Query rewrites by the live service's reader: one Generate call per batch, greedy.

- `ambiguity`: the query-level paper's prompt (its Table 3), asking for `variants` (5)
  paraphrases, one per line; the paper uses all five as five samples, so seed s takes line
  s mod (lines returned). The one prompt serves every seed, so the service's reader cache
  answers seeds 1..4 for free. `formal`: one rewrite per prompt, guided by a formal opener per
  seed (`GuidedRewrite`: the paper's prompt is answered, not followed, by a 0.5B reader).
  `redundancy`: one rewrite per prompt whose reply is begun for the model with the question and
  a link per seed (`ContinuedRewrite`); the paper's prompts stay in `prompt` for reference.
- `grammar_rewrite`, `irrelevant_detail`: RARE App. C.1 (GPT-4.1 wrote 3 candidates, the most
  similar to the query by an embedding model was kept). RARE does not publish its prompts;
  ours (`GRAMMAR_PROMPT`, `IRRELEVANT_PROMPT`, in the style of the ones above) are answered, not
  followed, by a 0.5B reader, so both are guided rewrites like `formal` (`GuidedRewrite`):
  one rewrite per prompt, its opening given per seed.

Adapted for a 135M-parameter instruct reader, minimally: "separate the samples by single \\n"
(a newline character inside the paper's Python string) is written "a single newline"; the
reader's answer is cleaned line by line (list numbering, labels such as "Rewritten
question:", quotes); lines equal to the original, lines that talk about the task or an answer
("The answer is ...", "The sentence is ambiguous") and, for a question, lines that are no
question are not rewrites. When no usable line is left the original query is kept and
flagged in `last_fallbacks`. Measured with SmolLM2-135M-Instruct (greedy, these prompts and
four rewordings of them): it answers or comments on the question nearly every time, so with
that reader expect most of these to fall back; a larger reader is what they were written for.
"""
from __future__ import annotations

from typing import Any, Mapping

from bench.robust.perturb.base import LLMPerturbation, register
from bench.robust.perturb.textutil import query_rewrites

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
    """`prompt` asks for `variants` rewrites of `{text}`, one per line; see the module doc."""

    target = "query"
    prompt: str = ""
    default_variants = 5

    def __init__(self, generator=None, variants: int | None = None, max_tokens: int | None = None,
                 temperature: float = 0.0):
        self.variants = variants or self.default_variants
        super().__init__(generator, max_tokens or min(512, 48 * self.variants + 32), temperature)

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        outs = self.generate([self.prompt.format(n=self.variants, text=t) for t in texts])
        return self._choose(texts, [query_rewrites(o, t)[:self.variants] for t, o in zip(texts, outs)], seed)

    def _choose(self, texts: list[str], candidates: list[list[str]], seed: int) -> list[str]:
        """The seed's candidate per text; the text itself where there is none (flagged in
        `last_fallbacks`)."""
        self.last_fallbacks = [not c for c in candidates]
        return [c[seed % len(c)] if c else t for t, c in zip(texts, candidates)]


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
        starts = [_question_opening(t) + link for t in texts]
        outs = self.generate([CONTINUE_PROMPT.format(how=self.how, text=t) for t in texts], max_tokens=48,
                             starts=starts)
        candidates = []
        for text, start, out in zip(texts, starts, outs):
            line = out.strip().splitlines()[0] if out.strip() else ""
            added = line[len(start):] if line.startswith(start) else ""
            candidates.append(query_rewrites(line, text)[:1] if len(added.split()) >= 2 else [])
        return self._choose(texts, candidates, 0)


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
    30 usable rewrites of 30 are listed (README, issue 12's yields)."""

    openers: tuple[str, ...] = ()
    how = ""  # what the rewrite changes, as a clause after "Rewrite the question below"

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        opener = self.openers[seed % len(self.openers)]
        outs = self.generate([GUIDED_PROMPT.format(how=self.how, opener=opener, text=t) for t in texts],
                             max_tokens=64)
        return self._choose(texts, [query_rewrites(o, t)[:1] for t, o in zip(texts, outs)], 0)


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


@register("ambiguity")
class Ambiguity(QueryRewrite):
    prompt = AMBIGUITY_PROMPT


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
