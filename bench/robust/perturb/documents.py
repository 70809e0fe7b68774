"""Document perturbations: SURE's 13 spurious features (§3.2, App. C) and RARE's two (§5.2).

SURE, as its paper makes them:
- style `style_simple` / `style_complex` and source `source_llm` / `source_self`: the reader
  rewrites the passage with SURE's Figure 8 prompts (the passage moved to its own line).
  SURE's LLM-generated copy was written by a stronger LLM than the RAG reader, its
  self-generated one by the reader itself. This service has one LLM, so both are the
  service's reader and give the same text, unless `source_llm` is given a `paraphraser`
  (another Generator). Greedy decoding: the seed does not change these. The reply is tidied
  (label line, repeated sentences, a last sentence cut off by the token limit dropped).
- logic: `logic_reverse`, `logic_random` (seeded shuffle, never the original order),
  `logic_llm_ranked` (the reader orders the sentence list with SURE's prompt; repeated and
  out-of-range indices are dropped and missing ones appended in their original order).
- format `format_json` / `format_html` / `format_yaml` / `format_markdown`: SURE builds these
  by rule (§3.3), with its Figure 9 templates and the document's title (`context["title"]`);
  the JSON is made by `json.dumps`, so it is valid JSON. (Deterministic templates rather than
  an LLM conversion: SURE did the same, and a small reader could not be trusted to keep the
  text verbatim.)
- metadata (Figure 9's HTML with one `<meta>`): `meta_timestamp_pre` / `_post`, a seeded time
  before / after the reader's knowledge `cutoff` (default 2024-06-01, SmolLM2's training data
  ends in 2024); `meta_source_wiki` / `_twitter`, a pseudo link: the Wikipedia page of the
  title, or a seeded tweet URL.
RARE: `answer_sentence_delete` drops every sentence holding a gold answer
(`context["answers"]`, the suites' normalised match); `back_translate` goes English ->
`language` -> English through the reader, two batched Generate calls; a result that is not
English again (by its share of English stop words) is a fallback.

Sentences come from `textutil.split_sentences` (rule-based, no NLTK data). A perturbation
that cannot apply (one sentence to reorder, no answer sentence, an unusable LLM answer)
keeps the text and flags it in `last_fallbacks`.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import string
from typing import Any, Mapping

from bench.robust.perturb.base import Generator, LLMPerturbation, NotApplicable, Perturbation, register
from bench.robust.perturb.textutil import STOP_WORDS, clean_passage, join_sentences, split_sentences, tidy_rewrite
from bench.robust.qa import contains_answer

# ------------------------------------------------------------------ LLM rewrites (SURE Fig. 8)
SIMPLE_PROMPT = ("Please simplify the following text while preserving its original meaning. Use shorter "
                 "sentences, basic vocabulary, and clear language. Avoid complex structures, technical terms, "
                 "or ambiguous expressions. Here is the passage to simplify:\n\n{document}")
COMPLEX_PROMPT = ("Please complexify the following text while preserving its original meaning. Use longer "
                  "sentences, intricate sentence structures, and advanced vocabulary. Avoid contractions, "
                  "informal language, and colloquial expressions, ensuring the text maintains a professional "
                  "and authoritative tone throughout. Here is the passage to complexify:\n\n{document}")
SOURCE_PROMPT = ("Please rewrite the following passage. Ensure that the overall meaning, tone, and important "
                 "details remain intact. Avoid any significant shifts in style or focus. The aim is to create "
                 "a fresh version while faithfully conveying the original content. Here is the passage to "
                 "paraphrase:\n\n{document}")


class PassageRewrite(LLMPerturbation):
    target = "document"
    prompt = ""
    max_tokens = 384

    def perturb_batch(self, texts, seed, context):
        outs = [tidy_rewrite(clean_passage(o)) for o in self.generate([self.prompt.format(document=t) for t in texts])]
        self.last_fallbacks = [not o for o in outs]
        return [o or t for o, t in zip(outs, texts)]


@register("style_simple")
class StyleSimple(PassageRewrite):
    prompt = SIMPLE_PROMPT


@register("style_complex")
class StyleComplex(PassageRewrite):
    prompt = COMPLEX_PROMPT


@register("source_self")
class SourceSelf(PassageRewrite):
    prompt = SOURCE_PROMPT


@register("source_llm")
class SourceLLM(PassageRewrite):
    prompt = SOURCE_PROMPT

    def __init__(self, generator: Generator | None = None, paraphraser: Generator | None = None, **kw):
        super().__init__(paraphraser or generator, **kw)


# ------------------------------------------------------------------ logic (sentence order)
def _sentences(text: str) -> list[str]:
    sents = split_sentences(text)
    if len(sents) < 2:
        raise NotApplicable("fewer than two sentences")
    return sents


@register("logic_reverse")
class LogicReverse(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        return join_sentences(_sentences(text)[::-1])


@register("logic_random")
class LogicRandom(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        sents = _sentences(text)
        order = list(range(len(sents)))
        while order == sorted(order):
            rng.shuffle(order)
        return join_sentences([sents[i] for i in order])


LLM_RANKED_PROMPT = ("Rearrange the following list of sentences in your preferred logical order and provide only "
                     "the indices of the sentences. Please do not include any explanations.\n"
                     "Example:\nSentences List: {example}\nIndices: [1, 0, 2]\n"
                     "Sentences List: {sentences}\nThe length of the Sentences List is {n}. Therefore, the indices "
                     "must contain {n} elements, and the index values cannot exceed {last}.")
_EXAMPLE = json.dumps(["He moved to Paris in 1920.", "Tom Smith was a painter born in Leeds.",
                       "He died there in 1961."])


_INDEX_LIST = re.compile(r"\[\s*\d+(?:\s*,\s*\d+)*\s*\]|^[\d\s,]*\d[\d\s,]*$", re.MULTILINE)


def parse_order(output: str, n: int) -> list[int] | None:
    """The reader's index list ("[2, 0, 1]", or a line of bare numbers; not numbers inside
    echoed sentences) as a permutation of range(n): repeats and out-of-range values dropped,
    missing indices appended in order; None when it names no valid index."""
    m = _INDEX_LIST.search(output)
    seen: list[int] = []
    for tok in re.findall(r"\d+", m.group(0) if m else ""):
        i = int(tok)
        if i < n and i not in seen:
            seen.append(i)
    if not seen:
        return None
    return seen + [i for i in range(n) if i not in seen]


@register("logic_llm_ranked")
class LogicLLMRanked(LLMPerturbation):
    target = "document"

    def perturb_batch(self, texts, seed, context):
        sents = [split_sentences(t) for t in texts]
        todo = [i for i, s in enumerate(sents) if len(s) >= 2]
        prompts = [LLM_RANKED_PROMPT.format(example=_EXAMPLE, sentences=json.dumps(sents[i], ensure_ascii=False),
                                            n=len(sents[i]), last=len(sents[i]) - 1) for i in todo]
        longest = max((len(sents[i]) for i in todo), default=1)
        outs = dict(zip(todo, self.generate(prompts, max_tokens=4 * longest + 16))) if todo else {}
        result, flags = [], []
        for i, text in enumerate(texts):
            order = parse_order(outs[i], len(sents[i])) if i in outs else None
            result.append(join_sentences([sents[i][j] for j in order]) if order else text)
            flags.append(order is None)
        self.last_fallbacks = flags
        return result


# ------------------------------------------------------------------ format (SURE Fig. 9)
HTML_TEMPLATE = ('<html lang="en">\n<head>\n<meta charset="UTF-8">\n{meta}{title}\n</head>\n<body>\n'
                 '{document}\n</body>\n</html>')


def _title(context: Mapping[str, Any]) -> str:
    return str(context.get("title") or "")


@register("format_json")
class FormatJSON(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        return json.dumps({"title": _title(context), "text": text}, ensure_ascii=False, indent=4)


@register("format_html")
class FormatHTML(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        return HTML_TEMPLATE.format(meta="", title=_title(context), document=text)


@register("format_yaml")
class FormatYAML(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        return f"Title: {_title(context)}\nText: {text}"


@register("format_markdown")
class FormatMarkdown(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        return f"# {_title(context)}\n\n{text}"


# ------------------------------------------------------------------ metadata (SURE Fig. 9)
def _with_meta(name: str, content: str, text: str, context: Mapping[str, Any]) -> str:
    return HTML_TEMPLATE.format(meta=f"<meta name='{name}' content='{content}'>\n", title=_title(context),
                                document=text)


class MetaTimestamp(Perturbation):
    """A seeded time within `years` before (pre) or after (post) the reader's knowledge cutoff."""

    target = "document"
    after = False

    def __init__(self, cutoff: str = "2024-06-01", years: int = 5):
        self.cutoff = dt.datetime.fromisoformat(cutoff)
        self.span = int(dt.timedelta(days=365 * years).total_seconds())

    def perturb_one(self, text, rng, context):
        offset = dt.timedelta(seconds=rng.randint(1, self.span))
        when = self.cutoff + offset if self.after else self.cutoff - offset
        return _with_meta("timestamp", when.strftime("%Y-%m-%d %H:%M:%S"), text, context)


@register("meta_timestamp_pre")
class MetaTimestampPre(MetaTimestamp):
    after = False


@register("meta_timestamp_post")
class MetaTimestampPost(MetaTimestamp):
    after = True


@register("meta_source_wiki")
class MetaSourceWiki(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        page = _title(context).replace(" ", "_") or "Special:Random"
        return _with_meta("datasource", f"https://en.wikipedia.org/wiki/{page}", text, context)


@register("meta_source_twitter")
class MetaSourceTwitter(Perturbation):
    target = "document"

    def perturb_one(self, text, rng, context):
        user = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 10)))
        user += str(rng.randint(0, 999)) if rng.random() < 0.5 else ""
        status = rng.randint(10**18, 2 * 10**18)  # a 19-digit tweet id
        return _with_meta("datasource", f"https://twitter.com/{user}/status/{status}", text, context)


# ------------------------------------------------------------------ RARE
@register("answer_sentence_delete")
class AnswerSentenceDelete(Perturbation):
    """RARE's lexically similar, answer-less document: the answer sentences removed."""

    target = "document"

    def perturb_one(self, text, rng, context):
        answers = [a for a in context.get("answers", ()) if str(a).strip()]
        if not answers:
            raise NotApplicable("no gold answers in the context")
        sents = split_sentences(text)
        kept = [s for s in sents if not contains_answer(s, answers)]
        if len(kept) == len(sents) or not kept:
            raise NotApplicable("no answer sentence" if kept else "every sentence holds the answer")
        return join_sentences(kept)


TRANSLATE_PROMPT = "Translate the following text into {language}. Output only the translation.\n\n{text}"


def english_share(text: str) -> float:
    """Share of the words that are English stop words (~0.4 in English prose, ~0 in French)."""
    words = re.findall(r"[a-z']+", text.lower())
    return sum(w in STOP_WORDS for w in words) / len(words) if words else 0.0


@register("back_translate")
class BackTranslate(LLMPerturbation):
    """RARE's lexically different, same-answer document (it used EN -> FR -> EN)."""

    target = "document"
    max_tokens = 384

    def __init__(self, generator: Generator | None = None, language: str = "French", **kw):
        super().__init__(generator, **kw)
        self.language = language

    def perturb_batch(self, texts, seed, context):
        there = [clean_passage(o) for o in
                 self.generate([TRANSLATE_PROMPT.format(language=self.language, text=t) for t in texts])]
        todo = [i for i, t in enumerate(there) if t]
        back = self.generate([TRANSLATE_PROMPT.format(language="English", text=there[i]) for i in todo]) if todo else []
        got = {i: tidy_rewrite(clean_passage(o)) for i, o in zip(todo, back)}
        for i in list(got):  # the way back must be English again (a small reader often stays in French)
            if english_share(got[i]) < 0.5 * english_share(texts[i]):
                got[i] = ""
        self.last_fallbacks = [not got.get(i) for i in range(len(texts))]
        return [got.get(i) or t for i, t in enumerate(texts)]
