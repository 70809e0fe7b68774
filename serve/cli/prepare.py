"""`eor models prepare` and `eor index`: what the first answer needs, built once."""
from __future__ import annotations

import json
import sys
import time

from serve.cli.common import _config


def cmd_models(args) -> int:
    from serve.engine.models import PACKAGED_MODELS, prepare_model

    if args.action == "speed":
        return cmd_speed(args)
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


def cmd_speed(args) -> int:
    """Each reader's prefill and decode tokens/s on this machine, kept for `eor fit`."""
    from serve.builder import make_engine, runnable_config
    from serve.cli.console import Console
    from serve.config_readers import reader_names, used_readers
    from serve.offline.reader_speed import measure, save_speed, speed_path

    config, notes = runnable_config(_config(args))
    for line in notes:
        print(line, file=sys.stderr)
    names = ["" if n == "default" else n for n in args.names] or used_readers(config)
    unknown = sorted(set(names) - set(reader_names(config)))
    if unknown:
        raise ValueError(f"no reader named {', '.join(map(repr, unknown))} in the config "
                         f"(readers: {', '.join(repr(n) for n in reader_names(config))})")
    done, lines = {}, []
    with Console(verbose=False) as con:  # the engines' logs go to $EOR_HOME/logs/eor.log
        for name in names:
            con.step(f"measuring reader {name or 'default'}")
            engine = make_engine(config, reader=name)
            try:
                speed = measure(engine.load())
            finally:
                engine.close()
            con.done()
            save_speed(engine.model_id, speed)
            done[name or "default"] = {"model": engine.model_id, "prefill_tok_s": round(speed.prefill_tok_s, 1),
                                       "decode_tok_s": round(speed.decode_tok_s, 1)}
            lines.append(f"reader {name or 'default'} ({engine.model_id}): prefill {speed.prefill_tok_s:.0f} tok/s, "
                         f"decode {speed.decode_tok_s:.1f} tok/s")
    print(json.dumps(done) if args.json else "\n".join([*lines, f"kept in {speed_path()}"]))
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

