"""Each reader's prefill and decode speed on this machine: what the cascade fit prices a round with.

A run log times whole questions, and every whole-pool question decodes about the same (one PK
document and short answers), so prefill and decode cannot be told apart from it; on the 1.5B a
200-token PK document alone costs more than every passage it reads. One short probe per reader
measures them apart: a batch of answer prompts over the embedded corpus read with max_tokens=1
(prefill), then one PK document of up to 200 tokens, one sequence (the longest decode of a round,
which the round waits for). Kept in $EOR_HOME/reader-speed.json by reader model id (model, weights,
dtype), for `eor fit`:

    eor models speed           (every reader of the config: ~1 min each once started)
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

PROBE_PROMPTS = 8  # answer prompts of 3 embedded documents each (~600 tokens)
PROBE_DECODE = 200  # PK's document length (retrievers/processing.py)


@dataclass(frozen=True)
class ReaderSpeed:
    """Tokens per second of one reader on this machine: prompt tokens it computes (prefix-cache
    hits excluded), and decode steps of one sequence."""

    prefill_tok_s: float
    decode_tok_s: float

    def seconds(self, prefill: float, steps: float) -> float:
        return prefill / self.prefill_tok_s + steps / self.decode_tok_s


def speed_path() -> Path:
    from serve.paths import eor_home

    return eor_home() / "reader-speed.json"


def load_speeds(path: Path | None = None) -> dict[str, ReaderSpeed]:
    """model id -> its measured speed; {} when never measured (a file that does not parse: an error
    that names it)."""
    path = path or speed_path()
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        return {model: ReaderSpeed(float(v["prefill_tok_s"]), float(v["decode_tok_s"])) for model, v in raw.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"reader speeds {path} do not parse ({e}); remove it and run `eor models speed`") from None


def save_speed(model_id: str, speed: ReaderSpeed, path: Path | None = None) -> None:
    path = path or speed_path()
    raw = json.loads(path.read_text()) if path.exists() else {}
    raw[model_id] = {**{k: round(v, 1) for k, v in asdict(speed).items()}, "measured": time.strftime("%Y-%m-%d")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(raw, indent=1, sort_keys=True))
    tmp.replace(path)


def probe_prompts(n: int = PROBE_PROMPTS) -> tuple[list[Any], Any]:
    """(answer prompts, one PK prompt) over the embedded corpus: the same probe on every machine."""
    from retrievers.corpus import read_corpus
    from retrievers.prompts import answer_prompt, pk_prompt

    docs = []
    for d in read_corpus(None):
        docs.append(d)
        if len(docs) >= 3 * n:
            break
    rag = [answer_prompt(f"What is {docs[3 * i].title} known for?",
                         "\n\n".join(f"{d.title}\n{d.text}" for d in docs[3 * i:3 * i + 3])) for i in range(n)]
    return rag, pk_prompt(f"What is {docs[0].title} known for?")


def measure(engine: Any, n: int = PROBE_PROMPTS) -> ReaderSpeed:
    """Prefill tokens/s over a batch read with max_tokens=1, then decode steps/s of one PK document
    (its prompt's prefill taken out at the prefill rate). The engine is warmed first."""
    from retrievers.reader import SamplingParams

    rag, pk = probe_prompts(n)
    engine.generate([engine.format(rag[-1])], SamplingParams(max_tokens=2))  # warm: first-call work left out
    t = time.perf_counter()
    outs = engine.generate([engine.format(p) for p in rag[:-1]], SamplingParams(max_tokens=1))
    prefill_s = time.perf_counter() - t
    prefill = sum(g.tokens.prompt - g.tokens.cached for g in outs)
    prefill_rate = prefill / prefill_s
    t = time.perf_counter()
    (doc,) = engine.generate([engine.format(pk)], SamplingParams(max_tokens=PROBE_DECODE, repetition_penalty=1.1))
    decode_s = time.perf_counter() - t - (doc.tokens.prompt - doc.tokens.cached) / prefill_rate
    return ReaderSpeed(prefill_rate, max(doc.tokens.generated, 1) / max(decode_s, 1e-3))


def pool_speeds(pool: Any, path: Path | None = None) -> dict[str, ReaderSpeed]:
    """reader name -> its measured speed, for the pool's readers measured on this machine (by model id)."""
    measured = load_speeds(path)
    return {name: measured[r.model_id] for name, r in pool.readers.items() if r.model_id in measured}


def round_work(result: Any, rounds: Sequence[frozenset]) -> dict[str, tuple[float, float]]:
    """reader name -> (prompt tokens computed, decode steps) of running `rounds` in order. Prefill:
    every prompt that ran, each shared document once, prefix-cache hits as the run counted them
    (QuestionResult.reader_tokens). Decode: per round, the longest sequence of each reader's batch
    -- a member's own answer plus the shared document it waits for (PK's), counted in the first
    round that needs it: a round's batch decodes side by side and ends with its longest."""
    from retrievers.spec import by_reader

    ran = frozenset().union(*rounds) if rounds else frozenset()
    cands = {c.retriever: c for c in result.candidates}
    out = {}
    for reader, members in by_reader(sorted(ran)).items():
        t = result.reader_tokens(set(members))
        out[reader] = [float(t.prompt - t.cached), 0.0]
    made: set[str] = set()
    for rnd in rounds:
        longest: dict[str, float] = {}
        new: set[str] = set()
        for reader, members in by_reader(sorted(rnd)).items():
            for s in members:
                c = cands.get(s)
                if c is None:
                    continue
                wait = sum(result.shared_tokens[d].generated for d in c.shared
                           if d not in made and d in result.shared_tokens)
                new |= set(c.shared)
                longest[reader] = max(longest.get(reader, 0.0), float(c.tokens.generated + wait))
        made |= new
        for reader, steps in longest.items():
            out[reader][1] += steps
    return {r: (p, s) for r, (p, s) in out.items()}


def priced_seconds(result: Any, rounds: Sequence[frozenset], speeds: dict[str, ReaderSpeed]) -> float:
    """Reader seconds of running `rounds` on this machine (round_work at each reader's speed)."""
    return sum(speeds[r].seconds(p, s) for r, (p, s) in round_work(result, rounds).items())
