"""`eor models prepare` and `eor index`: what the first answer needs, built once."""
from __future__ import annotations

import json
import time

from serve.cli.common import _config


def cmd_models(args) -> int:
    from serve.engine.models import PACKAGED_MODELS, prepare_model

    names = list(PACKAGED_MODELS) if args.all or not args.names else args.names
    done = {}
    for name in names:
        t = time.time()
        path = prepare_model(name, force=args.force)
        done[name] = {"path": str(path), "seconds": round(time.time() - t, 1)}
        if not args.json:
            print(f"{name}: {path} ({time.time() - t:.0f} s)")
    if args.json:
        print(json.dumps(done))
    return 0


def cmd_index(args) -> int:
    from retrievers.corpus import read_corpus
    from retrievers.encoder import Encoder
    from serve.builder import build_indexes, index_path
    from serve.cli.console import Console

    config = _config(args)
    t = time.time()
    with Console(verbose=args.verbose and not args.json) as con:  # --json: stdout carries only the JSON
        con.step("reading the corpus")
        docs = list(read_corpus(args.corpus))
        if not docs:
            raise ValueError(f"corpus {args.corpus or '(embedded)'} has no documents")
        con.step("loading the encoder")
        encoder = Encoder(config.index.encoder).load()
        con.done()
        info = build_indexes(docs, config.index.name, encoder, progress=con.out)
    if args.json:
        print(json.dumps({"index": config.index.name, "path": str(index_path(config.index.name)), **info,
                          "seconds": round(time.time() - t, 1)}))
        return 0
    print(f"index {config.index.name!r} at {index_path(config.index.name)}: {info['documents']} documents, "
          f"{info['wiki_passages']} Wiki passages, {info['se_pages']} SE pages ({time.time() - t:.0f} s)")
    return 0

