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
    t = time.time()
    query_model = prepare_query_encoder()
    if query_model:  # the questions' encoder in onnxruntime, exported once here rather than at the first ask
        done["query encoder"] = {"path": query_model, "seconds": round(time.time() - t, 1)}
        if not args.json:
            print(f"query encoder: {query_model} ({time.time() - t:.0f} s)")
    if args.json:
        print(json.dumps(done))
    return 0


def prepare_query_encoder() -> str:
    """The file the question encoder runs where it runs on onnxruntime (made once into the encoder cache); ""
    where it runs on torch."""
    from retrievers.encoder import Encoder

    encoder = Encoder()
    if encoder.query_kind != "onnx":
        return ""
    from retrievers.onnx_encoder import OnnxFp32Encoder

    return str(OnnxFp32Encoder(encoder.path).made_model())


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
    """Build or resume every configured source's index over a corpus streamed from its file."""
    import shutil

    from retrievers.corpus import Corpus
    from retrievers.encoder import Encoder
    from retrievers.sources.dense_build import as_recorded
    from serve.builder import build_indexes, describe_index, index_path
    from serve.cli.console import Console

    config = _config(args)
    if args.action != "build":
        return cmd_index_change(args, config)
    corpus = Corpus(args.corpus)
    if next(iter(corpus), None) is None:
        raise ValueError(f"corpus {args.corpus or '(embedded)'} has no documents")
    if args.fresh:
        shutil.rmtree(index_path(config.index.name), ignore_errors=True)
    encoder = Encoder(config.index.encoder)
    dense = [name for name, conf in config.index.sources.items() if conf.backend == "dense"]
    if dense:  # a resume embeds with the corpus backend the index began with; a new build on GPUs, with torch
        from serve.indexing import cluster_encoder

        folder = index_path(config.index.name) / dense[0].lower()
        encoder = (cluster_encoder(encoder, args.ray_address, folder) if args.ray_address
                   else as_recorded(encoder, folder))
    embedder = index_parts = None
    if args.ray_address:  # the embedding and the index files, each spread over the cluster
        from serve.indexing import ray_embedder, ray_index_parts

        embedder = ray_embedder(config.index.encoder, encoder.corpus_kind,
                                address=args.ray_address, actors=args.encoder_actors)
        index_parts = ray_index_parts(args.ray_address)
    t = time.time()
    sources = config.index.sources
    if args.sources:
        only = [s.strip() for s in args.sources.split(",") if s.strip()]
        unknown = [s for s in only if s not in sources]
        if unknown:
            raise ValueError(f"--sources: {', '.join(unknown)} not configured; index.sources: {', '.join(sources)}")
        sources = {name: conf for name, conf in sources.items() if name in only}
    with Console(verbose=args.verbose and not args.json) as con:  # --json: stdout carries only the JSON
        info = build_indexes(corpus, config.index.name, encoder, progress=con.out,
                             sources=sources, corpus_id=corpus.identity(), embedder=embedder, index_parts=index_parts,
                             complete=sources == config.index.sources)
    if args.json:
        print(json.dumps({"index": config.index.name, "path": str(index_path(config.index.name)), **info,
                          "seconds": round(time.time() - t, 1)}))
        return 0
    print(f"index {config.index.name!r} at {index_path(config.index.name)}: {describe_index(info)} "
          f"({time.time() - t:.0f} s)")
    return 0


def cmd_index_change(args, config) -> int:
    """`eor index add FILE...` / `eor index delete ID...`: a new generation of the index;
    `eor index merge`: the serving generation folded into a new base."""
    from retrievers.corpus import read_jsonl
    from retrievers.encoder import Encoder
    from serve.builder import update_index
    from serve.cli.console import Console

    if args.action == "merge":
        from serve.builder import merge_index

        t = time.time()
        info = merge_index(config.index.name, Encoder(config.index.encoder), config.index.sources)
        info["seconds"] = round(time.time() - t, 1)
        print(json.dumps({"index": config.index.name, **info}) if args.json else
              f"index {config.index.name!r}: generation {info['generation']} serves"
              + (f" (merged into a new base; {info['seconds']:.0f} s)" if info["sources"] else " (nothing to merge)"))
        return 0
    if not args.items:
        raise ValueError(f"eor index {args.action} needs {'a JSONL file' if args.action == 'add' else 'document ids'}")
    t = time.time()
    added = [d for path in args.items for d in read_jsonl(path)] if args.action == "add" else []
    deleted = args.items if args.action == "delete" else []
    with Console(verbose=args.verbose and not args.json):
        info = update_index(config.index.name, Encoder(config.index.encoder), added, deleted, config.index.sources,
                            merge_above=config.index.merge_above)
    info["seconds"] = round(time.time() - t, 1)
    if args.json:
        print(json.dumps({"index": config.index.name, **info}))
    else:
        print(f"index {config.index.name!r}: generation {info['generation']} serves "
              f"({len(added) or len(deleted)} {'added' if added else 'deleted'}; {info['documents_added']} documents "
              f"added and {info['ids_hidden']} ids hidden since the base; {info['seconds']:.0f} s)"
              + (f"; merged into a new base as generation {info['merged']['generation']}" if "merged" in info else ""))
    return 0
