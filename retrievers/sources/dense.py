"""Wiki: dense passage retrieval (sentence encoder + faiss) over ~100-word passages."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence, TextIO

import numpy as np

from retrievers.corpus import Document, to_passages
from retrievers.encoder import Encoder
from retrievers.sources.base import PASSAGES, KnowledgeSource, MissingIndexError, SourceSetting
from retrievers.types import Passage

INDEX_FILE = "faiss.index"
PASSAGES_FILE = "passages.jsonl"
META_FILE = "meta.json"


def build_dense_index(docs: Iterable[Document], out_dir: str | Path, encoder: Encoder,
                      passage_words: int = 100, show_progress: bool = False, progress: TextIO | None = None) -> int:
    """Split into passages, embed, write an exact inner-product faiss index. Returns the count.

    `progress`: a stream for one progress bar of the embedding (the long part), drawn in
    chunks, so the encoder's own bars and logs can go elsewhere."""
    import faiss

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    passages = list(to_passages(docs, passage_words))
    texts = [f"{p.title}. {p.text}" if p.title else p.text for p in passages]
    embed = getattr(encoder, "encode_corpus", encoder.encode)  # bulk embedding: bf16 where the CPU has it
    if progress is not None:
        from tqdm import tqdm

        chunk = 1024
        parts = []
        with tqdm(total=len(texts), desc="embedding passages", unit="passage", file=progress) as bar:
            for i in range(0, len(texts), chunk):
                parts.append(embed(texts[i : i + chunk]))
                bar.update(len(texts[i : i + chunk]))
        vecs = np.concatenate(parts) if parts else embed([])
    else:
        vecs = embed(texts, show_progress=show_progress)
    index = faiss.IndexFlatIP(vecs.shape[1])
    index.add(vecs)
    faiss.write_index(index, str(out / INDEX_FILE))
    with open(out / PASSAGES_FILE, "w", encoding="utf-8") as f:
        for p in passages:
            f.write(json.dumps({"id": p.doc_id, "title": p.title, "text": p.text}) + "\n")
    (out / META_FILE).write_text(json.dumps(
        {"encoder": encoder.name, "passages": len(passages), "passage_words": passage_words}))
    return len(passages)


@dataclass
class DenseSource(KnowledgeSource):
    """Search a dense index built by `eor index`."""

    index_dir: str
    encoder: Encoder
    name: str = "Wiki"
    shape = PASSAGES

    @classmethod
    def from_setting(cls, setting: SourceSetting) -> "DenseSource":
        return cls(setting.index_dir, setting.encoder, setting.name, **setting.options)

    def __post_init__(self) -> None:
        self._index = None
        self._passages: list[Passage] = []

    def load(self) -> "DenseSource":
        if self._index is not None:
            return self
        import faiss

        path = Path(self.index_dir)
        if not (path / INDEX_FILE).exists():
            raise MissingIndexError(f"no {self.name} (dense) index at {path}: build it with `eor index`")
        self._check_encoder(path)
        self._index = faiss.read_index(str(path / INDEX_FILE))
        with open(path / PASSAGES_FILE, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                self._passages.append(Passage(r["id"], r["title"], r["text"], self.name))
        self.encoder.load()
        return self

    def _check_encoder(self, path: Path) -> None:
        """Query vectors from another encoder than the index's are silently meaningless
        (or crash faiss on a dimension mismatch): refuse them, naming both encoders."""
        meta_path = path / META_FILE
        if not meta_path.exists():
            return  # an index from before meta.json: nothing to compare
        built_with = json.loads(meta_path.read_text(encoding="utf-8")).get("encoder")
        asked = getattr(self.encoder, "name", None)
        if built_with and asked and built_with != asked:
            raise ValueError(f"the {self.name} index at {path} was built with encoder {built_with!r} but this "
                             f"configuration encodes queries with {asked!r}: set index.encoder: {built_with} "
                             "or rebuild the index with `eor index`")

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.load()
        if not queries:
            return []
        scores, ids = self._index.search(self.encoder.encode(list(queries)), k)
        out = []
        for row_s, row_i in zip(scores, ids):
            out.append([Passage(self._passages[i].pid, self._passages[i].title, self._passages[i].text,
                                self.name, float(s)) for s, i in zip(row_s, row_i) if i >= 0])
        return out


def cosine_rerank(encoder: Encoder, query: str, passages: Sequence[Passage]) -> list[Passage]:
    """@RR: order passages by cosine similarity to the query (stable for ties)."""
    if not passages:
        return []
    q = encoder.encode([query])[0]
    p = encoder.encode([x.render() for x in passages])
    sims = p @ q
    order = np.argsort(-sims, kind="stable")
    return [Passage(passages[i].pid, passages[i].title, passages[i].text, passages[i].source,
                    float(sims[i])) for i in order]
