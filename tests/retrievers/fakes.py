"""Test doubles: a recording reader engine, canned knowledge sources, and the toy source of the
open-source-set tests (`KeywordSource`)."""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

from retrievers.engine import ReaderEngine
from retrievers.reader import Generation, PromptText, SamplingParams
from retrievers.sources.base import PAGES, PASSAGES, KnowledgeSource
from retrievers.types import Passage, ReaderTokens

QUESTION = "Who painted the Mona Lisa?"

MONA = ("Mona Lisa", "The Mona Lisa is a half-length portrait painting by the Italian artist "
        "Leonardo da Vinci, painted in Florence in the sixteenth century.")
TOPICS = [
    ("Volcano", "A volcano is a rupture in the crust of a planet through which lava, ash and gases escape."),
    ("Photosynthesis", "Photosynthesis is the process by which green plants turn sunlight, water and "
                       "carbon dioxide into sugar and oxygen."),
    ("Jupiter", "Jupiter is the fifth planet from the Sun and the largest gas giant in the Solar System."),
    ("Jazz", "Jazz is a music genre that originated in the African-American communities of New Orleans."),
    ("Chess", "Chess is a board game for two players played on a checkered board of sixty-four squares."),
    ("Glacier", "A glacier is a persistent body of dense ice that moves slowly under its own weight."),
    ("Railway", "A railway carries passengers and freight on wheeled vehicles running on steel rails."),
    ("Honey bee", "The honey bee is a flying insect that collects nectar and makes honey and beeswax."),
    ("Submarine", "A submarine is a watercraft that can operate independently under water."),
    ("Rice", "Rice is the seed of a grass species and the staple food of half of the world's people."),
]


def fill(sentence: str, words: int) -> str:
    """`sentence` repeated until exactly `words` words."""
    tokens = sentence.split()
    return " ".join(tokens[i % len(tokens)] for i in range(words))


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


# SE: 10 pages, the Mona Lisa page ranked 7th by the "search engine"; pages 0-3 are long enough
# for SE@1's 1000-word and SE@k's 250-word truncations to bite.
SE_LAYOUT = [(TOPICS[0], 1200), (TOPICS[1], 300), (TOPICS[2], 300), (TOPICS[3], 300),
             (TOPICS[4], 120), (TOPICS[5], 120), (MONA, 300), (TOPICS[6], 120),
             (TOPICS[7], 120), (TOPICS[8], 120)]
SE_PAGES = [Passage(f"se-{i}", title, fill(sent, n), "SE", float(10 - i))
            for i, ((title, sent), n) in enumerate(SE_LAYOUT)]

# Wiki: 25 passages of 60 words; Mona Lisa passages at ranks 5 and 16 (HB takes the top 20).
WIKI_PASSAGES = []
for _i in range(25):
    _title, _sent = MONA if _i in (4, 15) else TOPICS[_i % len(TOPICS)]
    WIKI_PASSAGES.append(Passage(f"wiki-{_i}", _title, fill(_sent, 60), "Wiki", float(100 - _i)))

PK_WORDS = 230  # a PK document of 230 words splits into two ~100-word chunks for HB


class FakeEngine(ReaderEngine):
    """A ReaderEngine with deterministic outputs, every call recorded, counting as vLLM does:
    a word for a token, and a prefix cache that serves a prompt's leading whole blocks of
    BLOCK words that an earlier prompt already had (vLLM reuses only whole KV blocks)."""

    BLOCK = 128

    def __init__(self, model_id: str = "fake-reader"):
        self.model_id = model_id
        self.calls: list[tuple[list[str], SamplingParams]] = []
        self._blocks: set[str] = set()  # every whole-block prefix prefilled so far

    def _prefix_hits(self, prompt: str) -> int:
        words = prompt.split()
        prefixes = [" ".join(words[: (i + 1) * self.BLOCK]) for i in range(len(words) // self.BLOCK)]
        n = 0
        while n < len(prefixes) and prefixes[n] in self._blocks:
            n += 1
        self._blocks.update(prefixes)
        return n * self.BLOCK

    def format(self, prompt: PromptText) -> str:
        return f"{prompt.body}\n{prompt.cue}"

    @staticmethod
    def respond(prompt: str) -> str:
        if prompt.startswith("Generate a background document"):
            m = re.search(r"given question\. (.*)\.\nDocument:$", prompt, re.S)
            query = m.group(1) if m else "unknown"
            return f"  {fill(query, PK_WORDS)}  "
        if "Please truthfully summarize" in prompt:
            return f" summary-{digest(prompt)} of the document \n"
        return f" ans-{digest(prompt)}\nand then a second line"

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Generation]:
        self.calls.append((list(prompts), params))
        outs = []
        for p in prompts:
            text = self.respond(p)
            outs.append(Generation(text, None, ReaderTokens(len(p.split()), len(text.split()), self._prefix_hits(p))))
            self.add_tokens(outs[-1].tokens)
        return outs

    def calls_of(self, kind: str) -> list[tuple[list[str], SamplingParams]]:
        """Engine calls of one stage: "pk", "cp" or "answer"."""
        starts = {"pk": "Generate a background document", "cp": "Please truthfully summarize"}
        out = []
        for prompts, params in self.calls:
            first = prompts[0]
            stage = next((k for k, s in starts.items() if s in first), "answer")
            if stage == kind:
                out.append((prompts, params))
        return out


class FakeSource:
    """A knowledge source with canned results (the same ranked list for every query); its shape:
    pages for SE, passages for the others, unless told."""

    def __init__(self, name: str, rows: list[Passage], fail: Exception | None = None, shape: str | None = None):
        self.name = name
        self.rows = rows
        self.fail = fail
        self.shape = shape or (PAGES if name == "SE" else PASSAGES)
        self.loaded = False
        self.calls: list[tuple[list[str], int]] = []

    def load(self) -> "FakeSource":
        self.loaded = True
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls.append((list(queries), k))
        if self.fail is not None:
            raise self.fail
        return [list(self.rows[:k]) for _ in queries]


class MemoEncoder:
    """The real encoder behind a per-text memo: reruns over the same canned texts cost nothing,
    and a text always gets the very same vector (so cosine ties break the same way everywhere)."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.name = encoder.name
        self._memo: dict[str, "np.ndarray"] = {}

    def load(self) -> "MemoEncoder":
        self.encoder.load()
        return self

    @property
    def dim(self) -> int:
        return self.encoder.dim

    def encode(self, texts: Sequence[str], show_progress: bool = False):
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            self._memo.update(zip(todo, self.encoder.encode(todo)))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])


def recall_at(hit_ids: list[set[str]], questions) -> float:
    """Share of questions with a gold record among their retrieved record ids."""
    hits = [bool(set(q["gold_pids"]) & ids) for q, ids in zip(questions, hit_ids, strict=True)]
    return sum(hits) / len(hits)


TOY_PASSAGES = (
    ("Mona Lisa", "Leonardo da Vinci painted the Mona Lisa in Florence."),
    ("Louvre", "The Louvre in Paris shows the Mona Lisa behind glass."),
    ("Starry Night", "Vincent van Gogh painted The Starry Night in 1889."),
    ("Guernica", "Pablo Picasso painted Guernica in 1937."),
)


class KeywordSource(KnowledgeSource):
    """The toy knowledge source: a few in-memory passages ranked by the words they share with
    the query (ties in their order). One class; a config line (`Toy: toy`, or this class's
    module:Class) makes it a source every spec, the pool and the service can use."""

    def __init__(self, name: str = "Toy", passages: Sequence[Sequence[str]] = TOY_PASSAGES):
        self.name = name
        self.rows = [Passage(f"{name.lower()}-{i}", title, text, name) for i, (title, text) in enumerate(passages)]
        self.loaded = False

    def load(self) -> "KeywordSource":
        self.loaded = True
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        def words(text: str) -> set[str]:
            return set(re.findall(r"\w+", text.lower()))

        out = []
        for q in queries:
            shared = [len(words(q) & words(p.render())) for p in self.rows]
            order = sorted(range(len(self.rows)), key=lambda i: -shared[i])[:k]
            out.append([Passage(self.rows[i].pid, self.rows[i].title, self.rows[i].text, self.name, float(shared[i]))
                        for i in order])
        return out


class IndexedKeywordSource(KeywordSource):
    """The toy with an index of its own: `eor index` writes the corpus's records to its folder
    (`build_index`), and it searches them. One class and a config line, like the in-memory toy."""

    def __init__(self, index_dir: str, name: str = "Toy"):
        super().__init__(name, ())
        self.index_dir = index_dir

    @classmethod
    def from_setting(cls, setting) -> "IndexedKeywordSource":
        return cls(setting.index_dir, setting.name)

    @classmethod
    def build_index(cls, docs, setting, corpus_id: str = "", embedder=None, progress=None) -> dict:
        import json
        from pathlib import Path

        out = Path(setting.index_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "records.jsonl", "w", encoding="utf-8") as f:
            n = sum(f.write(json.dumps([d.title, d.text]) + "\n") > 0 for d in docs)
        return {"records": n}

    def load(self) -> "IndexedKeywordSource":
        import json
        from pathlib import Path

        with open(Path(self.index_dir) / "records.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        self.rows = [Passage(f"{self.name.lower()}-{i}", t, x, self.name) for i, (t, x) in enumerate(rows)]
        self.loaded = True
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        if not self.loaded:  # as the real sources: loaded on the first search where not before
            self.load()
        return super().search(queries, k)
