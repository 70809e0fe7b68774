"""Each reader's prefill and decode speed on this machine: what the cascade fit prices a round with.

A run log times whole questions, and every whole-pool question decodes about the same (one PK
document and short answers), so prefill and decode cannot be told apart from it; on the 1.5B a
200-token PK document alone costs more than every passage it reads. One short probe per reader
measures them apart: a batch of answer prompts over the embedded corpus read with max_tokens=1
(prefill), then one PK document of up to 200 tokens, one sequence (the longest decode of a round,
which the round waits for). Kept in $EOR_HOME/reader-speed.json by reader model id (model, weights,
dtype) and CPU kind, for `eor fit`:

    eor models speed           (every reader of the config: ~1 min each once started)
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fitting.pricing import ReaderSpeed

PROBE_PROMPTS = 8  # answer prompts of 3 embedded documents each (~600 tokens)
PROBE_DECODE = 200  # PK's document length (retrievers/processing.py)


def speed_path() -> Path:
    from serve.paths import eor_home

    return eor_home() / "reader-speed.json"


def speed_key(model_id: str) -> str:
    """A measurement holds for one model on one kind of CPU (a copied $EOR_HOME keeps its own)."""
    from retrievers.hardware import cpu_signature

    return f"{model_id}@cpu-{cpu_signature()}"


def _read(path: Path, what: str = "reader speeds", remedy: str = "`eor models speed`") -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return raw
    except ValueError as e:
        raise ValueError(f"{what} {path} do not parse ({e}); remove it and run {remedy}") from None


def _write(path: Path, raw: dict[str, Any]) -> None:
    """Whole or not at all: a reader of the file never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(raw, indent=1, sort_keys=True))
    tmp.replace(path)


def load_speeds(path: Path | None = None) -> dict[str, ReaderSpeed]:
    """speed_key -> its measured speed; {} when never measured (a file that does not parse, or a
    speed that is not a positive number: an error that names it)."""
    path = path or speed_path()
    raw = _read(path)  # a file that is not a JSON object: its own one-line error
    try:
        out = {key: ReaderSpeed(float(v["prefill_tok_s"]), float(v["decode_tok_s"])) for key, v in raw.items()}
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"reader speeds {path} do not parse ({e}); remove it and run `eor models speed`") from None
    bad = sorted(k for k, v in out.items() if not (v.prefill_tok_s > 0 and v.decode_tok_s > 0))
    if bad:
        raise ValueError(f"reader speeds {path}: {', '.join(bad)} not a positive speed; run `eor models speed`")
    return out


def save_speed(model_id: str, speed: ReaderSpeed, path: Path | None = None) -> None:
    path = path or speed_path()
    raw = _read(path)
    raw[speed_key(model_id)] = {**{k: round(v, 3) for k, v in asdict(speed).items()},
                                "measured": time.strftime("%Y-%m-%d")}
    _write(path, raw)


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
    if prefill <= 0 or prefill_s <= 0:
        raise RuntimeError(f"the speed probe computed no prompt token ({prefill}): the engine reported none")
    prefill_rate = prefill / prefill_s
    t = time.perf_counter()
    (doc,) = engine.generate([engine.format(pk)], SamplingParams(max_tokens=PROBE_DECODE, repetition_penalty=1.1))
    elapsed = time.perf_counter() - t
    decode_s = elapsed - (doc.tokens.prompt - doc.tokens.cached) / prefill_rate
    if doc.tokens.generated < 2 or decode_s <= 0.1 * elapsed:
        raise RuntimeError(f"the speed probe could not time the decode ({doc.tokens.generated} tokens in "
                           f"{elapsed:.2f} s, {decode_s:.2f} s of it decoding): run it again on an idle machine")
    return ReaderSpeed(prefill_rate, doc.tokens.generated / decode_s)


def pool_speeds(pool: Any, path: Path | None = None) -> dict[str, ReaderSpeed]:
    """reader name -> its measured speed, for the pool's readers measured on this kind of CPU."""
    measured = load_speeds(path)
    keys = {name: speed_key(r.model_id) for name, r in pool.readers.items()}
    return {name: measured[k] for name, k in keys.items() if k in measured}


# ---- the service's round overhead ---------------------------------------------------------
# A round costs its reader work at the readers' speeds plus what the service adds around it
# (retrieval, the Ray hops, the batch window, the vote). `bench.load_test compare` measures it
# from its one-retriever row (one round per Ask: the mean latency less the reader work priced
# by the default reader's speed) and keeps it here, so `eor fit` prices a round as the service
# pays it, not by a constant.

@dataclass(frozen=True)
class RoundOverhead:
    """Seconds a service round adds beyond its reader work, measured on this kind of CPU."""

    seconds: float
    measured: str  # the date it was measured
    by: str  # what measured it


_OVERHEAD_FILE = ("round overheads", "`python -m bench.load_test compare`")  # its errors' words


def overhead_path() -> Path:
    from serve.paths import eor_home

    return eor_home() / "round-overhead.json"


def _overhead_key() -> str:
    from retrievers.hardware import cpu_signature

    return f"cpu-{cpu_signature()}"


def _checked_seconds(seconds: float, what: str) -> float:
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"{what} {seconds!r}: not a non-negative number of seconds")
    return seconds


def measured_overhead(mean_s: float, computed_tokens: float, decode_steps: float, speed: ReaderSpeed) -> float:
    """A one-round Ask's latency less its reader work at `speed` (never below 0: a reader faster
    than its probe measured leaves nothing to add)."""
    return max(0.0, mean_s - speed.seconds(computed_tokens, decode_steps))


def save_overhead(seconds: float, by: str, path: Path | None = None) -> None:
    _checked_seconds(seconds, "round overhead")
    path = path or overhead_path()
    raw = _read(path, *_OVERHEAD_FILE)
    raw[_overhead_key()] = {"round_overhead_s": round(seconds, 3), "measured": time.strftime("%Y-%m-%d"), "by": by}
    _write(path, raw)


def load_overhead(path: Path | None = None) -> RoundOverhead | None:
    """This CPU kind's measured round overhead; None when never measured here (a file that does
    not parse, or a value that is not a non-negative number: an error that names it)."""
    path = path or overhead_path()
    entry = _read(path, *_OVERHEAD_FILE).get(_overhead_key())
    if entry is None:
        return None
    try:
        out = RoundOverhead(float(entry["round_overhead_s"]), str(entry.get("measured", "")), str(entry.get("by", "")))
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"{_OVERHEAD_FILE[0]} {path} do not parse ({e}); remove it and run "
                         f"{_OVERHEAD_FILE[1]}") from None
    _checked_seconds(out.seconds, f"round overhead in {path}:")
    return out


def round_overhead(given: float | None) -> tuple[float, str]:
    """(seconds a round adds beyond its reader work, where that figure comes from): `given`, else
    what the service measured on this CPU (save_overhead), else the default."""
    from fitting.pricing import DEFAULT_ROUND_OVERHEAD_S

    if given is not None:
        return _checked_seconds(given, "--round-overhead"), "--round-overhead"
    measured = load_overhead()
    if measured is not None:
        return measured.seconds, f"measured {measured.measured} by {measured.by}"
    return DEFAULT_ROUND_OVERHEAD_S, "the default: never measured on this CPU (python -m bench.load_test compare)"
