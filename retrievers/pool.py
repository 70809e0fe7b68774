"""The retriever pool: run many retriever specs for many questions, batch-first and staged.

Stages (each one batched across all questions and retrievers: one reader call per reader step,
one encoder call for @RR): PK documents -> source searches -> @RR -> per-spec processing (@k, &)
-> @CP summaries -> answers. Any subset of specs can run: a cascade's rounds run a few at a time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Annotated, Mapping, Sequence

from pydantic import Field

from retrievers.corpus import TRUNCATIONS, split_words, truncate_words
from retrievers.encoder import Encoder
from retrievers.prompts import PROMPT_LAYOUTS, answer_prompt, clean_answer, compress_prompt, pk_prompt
from retrievers.groundwork import Groundwork, PKDocument, RoundRun, pending_searches, search_depths, search_found
from retrievers.prompt_cost import PromptCost, prompt_cost, with_summary
from retrievers.reader import Generation, PromptReader, PromptText, SamplingParams
from retrievers.sources.base import PAGES, KnowledgeSource
from retrievers.sources.dense import ranked_by_similarity
from retrievers.spec import DEFAULT_READER_NAME, PAPER_POOL, RetrieverPlan, Term, parse_pool, parse_spec, split_reader, \
    with_reader
from retrievers.types import ERROR, TIMEOUT, Candidate, Context, Failure, Passage, QuestionResult, ReaderTokens

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000  # the default of PoolConfig.max_question_chars


@dataclass(frozen=True)
class PoolConfig:
    """Processing sizes follow the paper's Appendix C.1; token caps keep CPU runs affordable."""

    specs: tuple[str, ...] = PAPER_POOL
    # the bounds (`Annotated`) are checked where a config is read (serve/config_schema.py)
    chunk_words: Annotated[int, Field(ge=1)] = 100  # @RR chunks (and Wiki passages at index time)
    se_pages: Annotated[int, Field(ge=1)] = 10  # pages one search returns (a search API's first page)
    se_top1_words: Annotated[int, Field(ge=1)] = 1000  # SE@1: the top page truncated to 1000 words
    se_page_words: Annotated[int, Field(ge=1)] = 250  # SE@k, k>1: 250 words from the start of each page
    hb_wiki_k: Annotated[int, Field(ge=1)] = 20  # HB: the top-20 Wiki chunks join the rerank
    default_k: Annotated[int, Field(ge=1)] = 10  # @RR without @k
    max_context_words: Annotated[int, Field(ge=1)] = 1500  # guard so a prompt fits the reader's context window
    answer_tokens: Annotated[int, Field(ge=1)] = 32
    pk_tokens: Annotated[int, Field(ge=1)] = 200
    cp_tokens: Annotated[int, Field(ge=1)] = 200
    # PK/@CP: a 135M model loops under plain greedy
    long_form_repetition_penalty: Annotated[float, Field(gt=0)] = 1.1
    prompt_layout: str = "shared-prefix"  # or "paper": see retrievers/prompts.py
    # a cut page or document keeps its own whitespace, so SE@1's page and SE@k's first page share a
    # prefix (retrievers/corpus.py: truncate_words); "collapse" reads as run logs before 2026-11-26 did
    truncation: str = "own-whitespace"
    # not read since the engine counts its own prefix-cache hits; kept because run logs are keyed by these
    # settings (removing it would orphan every run log)
    prefix_block_tokens: int = 128
    max_question_chars: int = MAX_QUESTION_CHARS  # longer questions are refused (eor ask, fit, eval, and the service's requests)

    def __post_init__(self) -> None:
        if self.prompt_layout not in PROMPT_LAYOUTS:
            raise ValueError(f"pool.prompt_layout must be one of {PROMPT_LAYOUTS}, got {self.prompt_layout!r}")
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"pool.truncation must be one of {TRUNCATIONS}, got {self.truncation!r}")


class SourceFailed(Exception):
    """A source this retriever reads failed for the question (raised inside the pool only)."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


class QuestionError(ValueError):
    """A question the pool refuses (empty, too long)."""


def check_question(question: str, max_chars: int = MAX_QUESTION_CHARS) -> str:
    """The one question check (the CLI, the pool, the service's requests): not empty, not too long."""
    q = question.strip() if isinstance(question, str) else ""
    if not q:
        raise QuestionError("empty question")
    if len(q) > max_chars:
        raise QuestionError(f"question too long: {len(q)} characters (limit {max_chars})")
    return q


@dataclass
class _Work:
    """One run's scratch, per question index: its groundwork as it grows, what this run added
    (`found`), and the views the retrievers read (hits or given documents, failures, PK)."""

    ground: list[Groundwork]
    found: list[Groundwork]
    pk_docs: dict[str, list[str]] = field(default_factory=dict)  # reader name -> per question
    pk_tokens: dict[str, list[ReaderTokens]] = field(default_factory=dict)
    hits: dict[str, list[list[Passage]]] = field(default_factory=dict)
    source_errors: dict[tuple[int, str], Failure] = field(default_factory=dict)  # (question, source) -> why
    rerank_errors: dict[tuple[int, str], Failure] = field(default_factory=dict)  # (question, @RR key) -> why

    def add(self, qi: int, found: Groundwork) -> None:
        self.ground[qi] = self.ground[qi].plus(found)
        self.found[qi] = self.found[qi].plus(found)


class RetrieverPool:
    """The pool's members over its sources and readers: `reader` is the default reader (specs
    without `~READER`), `readers` the others by the name specs give them (retrievers/spec.py)."""

    def __init__(self, config: PoolConfig, sources: Mapping[str, KnowledgeSource],
                 reranker: Encoder, reader: PromptReader, readers: Mapping[str, PromptReader] | None = None):
        self.config = config
        self.readers = {DEFAULT_READER_NAME: reader, **(readers or {})}
        # only the sources and readers it has
        self.plans = {p.spec: p for p in parse_pool(config.specs, sources=sources, readers=self.readers)}
        self.sources = dict(sources)
        self.shapes = {name: src.shape for name, src in self.sources.items()}
        self.reranker = reranker

    @property
    def reader(self) -> PromptReader:
        """The default reader (specs without `~READER`; the run log's key)."""
        return self.readers[DEFAULT_READER_NAME]

    def part(self, reader: str) -> "RetrieverPool":
        """The members `reader` reads, as plain specs of a pool read by it as its default reader:
        what runs that reader's share of this pool (serve/offline/reader_runs.py)."""
        specs = tuple(split_reader(s)[0] for s, p in self.plans.items() if p.reader == reader)
        return RetrieverPool(replace(self.config, specs=specs), self.sources, self.reranker, self.readers[reader])

    def subset(self, specs: Sequence[str]) -> "RetrieverPool":
        """These members only (as this pool names them), over the same sources and readers: one
        round of a cascade read on its own, with a run log of its own (serve/offline/cascade_reads.py)."""
        missing = [s for s in specs if s not in self.plans]
        if missing:
            raise KeyError(f"retriever(s) {missing} not in the pool; pool: {', '.join(self.plans)}")
        readers = {k: v for k, v in self.readers.items() if k != DEFAULT_READER_NAME}
        return RetrieverPool(replace(self.config, specs=tuple(s for s in self.plans if s in set(specs))), self.sources,
                             self.reranker, self.reader, readers)

    @property
    def specs(self) -> list[str]:
        return list(self.plans)

    def load(self) -> "RetrieverPool":
        """Every source ready now, and the reranker; a source whose index is still being built
        (`building()`) loads on its first search, which waits for the build."""
        for src in self.sources.values():
            if not getattr(src, "building", lambda: False)():
                src.load()
        self.reranker.load()
        return self

    # ---- stages -------------------------------------------------------------------------
    def run(self, questions: Sequence[str], specs: Sequence[str] | None = None,
            documents: Sequence[Sequence[Passage] | None] | None = None) -> list[QuestionResult]:
        """`documents`: per question, grounding passages that replace what Wiki and SE would
        return (None or empty: search as usual); every spec processes them as its own."""
        return self.run_round(questions, specs, documents=documents).results

    def run_round(self, questions: Sequence[str], specs: Sequence[str] | None = None,
                  work: Sequence[Groundwork] | None = None,
                  documents: Sequence[Sequence[Passage] | None] | None = None,
                  plan_specs: Sequence[str] | None = None) -> RoundRun:
        """One round of an Ask: `work`, per question, what its earlier rounds found (read, never
        changed); `plan_specs`, every retriever the question may run (each source is searched
        once, at the deepest k any of them needs). Returns the results and what it found."""
        if isinstance(questions, str):
            raise TypeError("run() takes a list of questions, not one string")
        qs = [check_question(q, self.config.max_question_chars) for q in questions]
        if documents is not None and len(documents) != len(qs):
            raise ValueError(f"{len(qs)} questions but {len(documents)} document lists")
        if work is not None and len(work) != len(qs):
            raise ValueError(f"{len(qs)} questions but {len(work)} groundwork records")
        plans = [self._plan(s) for s in (self.specs if specs is None else specs)]
        run = _Work(list(work) if work is not None else [Groundwork() for _ in qs], [Groundwork() for _ in qs])
        given = {qi: list(d) for qi, d in enumerate(documents or ()) if d}
        pk_readers = sorted({p.reader for p in plans if p.sources & {"PK", "HB"}})
        if pk_readers:
            self._pk(qs, pk_readers, run)
        depth_plans = plans + [self._plan(s) for s in plan_specs or () if s in self.plans]
        self._search(qs, plans, run, given, search_depths(depth_plans, self.config, self.shapes))
        self._rerank(qs, plans, run)  # @RR: one encoder call for the round
        # per question and spec: a Context, or why there is none
        contexts = [[self._context(qi, q, p, run) for p in plans] for qi, q in enumerate(qs)]
        cp_tokens = self._compress(qs, plans, contexts, run)
        return RoundRun(self._answer(qs, plans, contexts, cp_tokens, run), run.found)

    def search(self, src: str, queries: Sequence[str], k: int) -> list[list[Passage]] | Failure:
        """One source's hits for `queries`, or why it has none (a broken source fails only the
        retrievers that read it)."""
        try:
            return self.sources[src].search(list(queries), k)
        except Exception as exc:
            log.exception("source %s failed", src)
            return Failure(TIMEOUT if isinstance(exc, TimeoutError) else ERROR, f"{src} search failed: {exc}")

    def _long_form(self, max_tokens: int) -> SamplingParams:
        return SamplingParams(max_tokens=max_tokens, repetition_penalty=self.config.long_form_repetition_penalty)

    def _plan(self, spec: str) -> RetrieverPlan:
        if spec not in self.plans:
            parse_spec(spec)  # a malformed spec: SpecError naming the bad token
            raise KeyError(f"retriever {spec!r} is not in the pool; pool: {', '.join(self.plans)}")
        return self.plans[spec]

    def _generate(self, readers: Sequence[str], prompts: Sequence[PromptText],
                  params: SamplingParams) -> list[Generation]:
        """Each prompt read by its reader (`readers[i]`, by name): one batched call per reader."""
        outs: list[Generation | None] = [None] * len(prompts)
        for name in dict.fromkeys(readers):
            idx = [i for i, r in enumerate(readers) if r == name]
            for i, o in zip(idx, self.readers[name].generate_counted([prompts[i] for i in idx], params)):
                outs[i] = o
        return outs  # type: ignore[return-value]

    def _pk(self, qs: list[str], pk_readers: Sequence[str], work: _Work) -> None:
        """Each question's PK document by each reader that needs one: written once, reused by
        every later round."""
        todo = [(qi, r) for r in pk_readers for qi in range(len(qs)) if r not in work.ground[qi].pk]
        if todo:
            prompts = [pk_prompt(qs[qi]) for qi, _ in todo]
            outs = self._generate([r for _, r in todo], prompts, self._long_form(self.config.pk_tokens))
            for (qi, r), prompt, o in zip(todo, prompts, outs):
                # its prefix-cache hits, if any, come from other questions' prompts: not this question's
                work.add(qi, Groundwork(pk={r: PKDocument(o.text.strip(), replace(o.tokens, cached=0))},
                                        read=((prompt.body, with_reader("PK", r)),)))
        for r in pk_readers:
            pks = [work.ground[qi].pk[r] for qi in range(len(qs))]
            work.pk_docs[r] = [pk.text for pk in pks]
            work.pk_tokens[r] = [pk.tokens for pk in pks]

    def _search(self, qs: list[str], plans: list[RetrieverPlan], work: _Work,
                given: Mapping[int, list[Passage]], plan_depth: Mapping[str, int]) -> None:
        """Each source the round reads, searched once per question unless an earlier round did
        (`pending_searches`). Given documents replace the search."""
        need = search_depths(plans, self.config, self.shapes)
        for src, todo, k in pending_searches(work.ground, need, plan_depth, skip=given.keys()):
            for qi, found in search_found(src, todo, k, self.search(src, [qs[qi] for qi in todo], k)).items():
                work.add(qi, found)
        for src in need:
            work.hits[src] = [list(given[qi]) if qi in given else list(work.ground[qi].hits.get(src, ()))
                              for qi in range(len(qs))]
            work.source_errors.update({(qi, src): work.ground[qi].failed[src] for qi in range(len(qs))
                                       if qi not in given and src in work.ground[qi].failed})

    def _term_passages(self, qi: int, q: str, t: Term, work: _Work, reader: str) -> list[Passage]:
        c = self.config
        self._check_sources(qi, t, work)
        if t.source == "PK":
            return [Passage(f"pk:{qi}", "", work.pk_docs[reader][qi], "PK")]
        if t.rerank:  # ordered by the round's one @RR step (`_rerank`), whichever round asked first
            if (qi, t.source) in work.rerank_errors:
                raise SourceFailed(work.rerank_errors[(qi, t.source)])
            if t.source not in work.ground[qi].reranked:
                self._rerank_input(qi, t, work, reader)  # what kept the step from ordering it, raised here
            return list(work.ground[qi].reranked[t.source])[: t.k or c.default_k]
        if t.source == "HB":
            return self._rerank_input(qi, t, work, reader)[: t.k or c.default_k]
        hits = work.hits[t.source][qi]
        if self.shapes[t.source] == PAGES:  # whole pages (SE), cut
            words = c.se_top1_words if (t.k or 1) == 1 else c.se_page_words
            return [Passage(p.pid, p.title, truncate_words(p.text, words, c.truncation), p.source, p.score)
                    for p in hits[: t.k or 1]]
        return hits[: t.k or c.default_k]

    def _check_sources(self, qi: int, t: Term, work: _Work) -> None:
        for src in self.shapes if t.source == "HB" else [t.source]:
            if (qi, src) in work.source_errors:
                raise SourceFailed(work.source_errors[(qi, src)])

    def _rerank_input(self, qi: int, t: Term, work: _Work, reader: str) -> list[Passage]:
        """What a term reads before @k (and @RR orders): SE's pages in chunks, Wiki's hits, HB's pool
        (every source's chunks together: the pages' chunks, PK's, then the top passages)."""
        c = self.config
        if t.source == "HB":
            pk = [Passage(f"pk:{qi}#{i}", "", text, "PK")
                  for i, text in enumerate(split_words(work.pk_docs[reader][qi], c.chunk_words))]
            pages = [x for src, shape in self.shapes.items() if shape == PAGES for x in self._chunks(work.hits[src][qi])]
            passages = [x for src, shape in self.shapes.items() if shape != PAGES
                        for x in work.hits[src][qi][: c.hb_wiki_k]]
            return pages + pk + passages
        hits = work.hits[t.source][qi]
        return self._chunks(hits) if self.shapes[t.source] == PAGES else hits

    def _chunks(self, pages: list[Passage]) -> list[Passage]:
        out = []
        for p in pages:
            parts = split_words(p.text, self.config.chunk_words)
            out += [Passage(f"{p.pid}#{i}", p.title, part, p.source, p.score) for i, part in enumerate(parts)]
        return out

    def _rerank(self, qs: list[str], plans: list[RetrieverPlan], work: _Work) -> None:
        """@RR as one step of the round: every (question, key: SE, Wiki, HB) no earlier round ordered,
        its query and candidates embedded in one encoder call for the whole batch, then ordered by
        cosine (the key's order is kept in the question's Groundwork, reused by later rounds). A term
        that cannot be read (its source failed) is left to report that when it is read."""
        todo: dict[tuple[int, str], list[Passage]] = {}
        for qi in range(len(qs)):
            for plan in plans:
                for t in plan.terms:
                    if not t.rerank or t.source in work.ground[qi].reranked or (qi, t.source) in todo:
                        continue
                    try:
                        self._check_sources(qi, t, work)
                        todo[(qi, t.source)] = self._rerank_input(qi, t, work, plan.reader)
                    except Exception:  # noqa: BLE001 - raised again, for this retriever only, when it is read
                        continue
        for (qi, key), ps in todo.items():
            if not ps:
                work.add(qi, Groundwork(reranked={key: ()}))
        todo = {slot: ps for slot, ps in todo.items() if ps}
        if not todo:
            return
        try:
            vectors = self.reranker.encode([qs[qi] for qi, _ in todo] + [x.render() for ps in todo.values() for x in ps])
        except Exception as exc:  # the encoder failed: the @RR retrievers fail, the rest answer
            log.exception("@RR encoder failed")
            work.rerank_errors.update({slot: Failure(ERROR, f"@RR failed: {type(exc).__name__}: {exc}") for slot in todo})
            return
        at = len(todo)
        for j, ((qi, key), ps) in enumerate(todo.items()):
            work.add(qi, Groundwork(reranked={key: tuple(ranked_by_similarity(ps, vectors[at:at + len(ps)] @ vectors[j]))}))
            at += len(ps)

    def _context(self, qi: int, q: str, plan: RetrieverPlan, work: _Work) -> Context | Failure:
        if plan.retrieval_free:
            return Context(plan.spec)
        try:
            passages: list[Passage] = []
            for t in plan.terms:
                passages += self._term_passages(qi, q, t, work, plan.reader)
            if plan.terms == (Term("PK"),) and not plan.compress:
                return Context(plan.spec, (), work.pk_docs[plan.reader][qi])  # PK alone: the document, no passages
            return Context(plan.spec, tuple(passages))
        except SourceFailed as exc:
            return exc.failure
        except Exception as exc:  # a processing op failed: this retriever only
            log.exception("retriever %s failed", plan.spec)
            return Failure(ERROR, f"{type(exc).__name__}: {exc}")

    def _document(self, ctx: Context) -> str:
        return truncate_words(ctx.render(), self.config.max_context_words, self.config.truncation)

    def _counted(self, slots: list[tuple[int, int]], prompts: list[PromptText], outs: list[Generation],
                 work: _Work, plans: list[RetrieverPlan]) -> dict[tuple[int, int], PromptCost]:
        """What each slot's prompt cost (retrievers/prompt_cost.py), after the question's prompts
        its reader read so far, those of this call before it included (readers share no cache)."""
        tokens = {}
        for slot, prompt, out in zip(slots, prompts, outs):
            reader = plans[slot[1]].reader
            same = tuple(r for r in work.ground[slot[0]].read if split_reader(r[1])[1] == reader)
            tokens[slot] = prompt_cost(prompt.body, out, same)
            work.add(slot[0], Groundwork(read=((prompt.body, plans[slot[1]].spec),)))
        return tokens

    def _compress(self, qs: list[str], plans: list[RetrieverPlan], contexts: list[list[Context | Failure]],
                  work: _Work) -> dict[tuple[int, int], PromptCost]:
        """Replace each @CP context by its summary; the tokens each summary cost."""
        slots = [(qi, pi) for qi in range(len(qs)) for pi, p in enumerate(plans)
                 if p.compress and isinstance(contexts[qi][pi], Context)]
        if not slots:
            return {}
        prompts = [compress_prompt(qs[qi], self._document(contexts[qi][pi]), self.config.prompt_layout)
                   for qi, pi in slots]
        outs = self._generate([plans[pi].reader for _, pi in slots], prompts, self._long_form(self.config.cp_tokens))
        for (qi, pi), out in zip(slots, outs):
            ctx = contexts[qi][pi]
            contexts[qi][pi] = Context(ctx.spec, ctx.passages, out.text.strip())
        return self._counted(slots, prompts, outs, work, plans)

    def _answer(self, qs: list[str], plans: list[RetrieverPlan], contexts: list[list[Context | Failure]],
                cp_tokens: dict[tuple[int, int], PromptCost],
                work: _Work) -> list[QuestionResult]:
        slots = [(qi, pi) for qi in range(len(qs)) for pi in range(len(plans))
                 if isinstance(contexts[qi][pi], Context)]
        prompts = []
        for qi, pi in slots:
            ctx = contexts[qi][pi]
            prompts.append(answer_prompt(qs[qi], None if plans[pi].retrieval_free else self._document(ctx)))
        outs = self._generate([plans[pi].reader for _, pi in slots], prompts,
                              SamplingParams(max_tokens=self.config.answer_tokens))
        answers = dict(zip(slots, outs))
        tokens = {slot: with_summary(cost, cp_tokens.get(slot, (ReaderTokens(), None)))
                  for slot, cost in self._counted(slots, prompts, outs, work, plans).items()}
        results = []
        for qi, q in enumerate(qs):
            cands = []
            for pi, plan in enumerate(plans):
                ctx = contexts[qi][pi]
                if isinstance(ctx, Context):
                    shared = (with_reader("PK", plan.reader),) if plan.sources & {"PK", "HB"} else ()
                    t, owner = tokens[(qi, pi)]
                    out = answers[(qi, pi)]
                    cands.append(Candidate(plan.spec, clean_answer(out.text), ctx, tokens=t, shared=shared,
                                           cached_from=owner, logprobs=out.logprobs))
                else:
                    cands.append(Candidate.failed(plan.spec, ctx))
            results.append(QuestionResult(q, tuple(cands), {with_reader("PK", r): t[qi] for r, t in work.pk_tokens.items()}))
        return results
