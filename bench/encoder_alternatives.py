"""Ways to run the corpus encoder on a CPU, against onnxruntime's int8 (the default without VNNI): speed
(interleaved rounds, one run) and how far each moves the vectors from the torch fp32 model the queries use.

    python -m bench.encoder_alternatives [--texts 256] [--threads 1] [--out F.json]

- `onnx-int8`: the shipped corpus encoder (retrievers/onnx_encoder.py: onnxruntime, dynamic int8);
- `onnx-int8-fused`: the same after onnxruntime's transformer optimizer (fused GELU, skip layer norms);
- `openvino-fp32`, `openvino-int8`: OpenVINO on the fp32 export, and the shipped static int8 model
  (retrievers/openvino_encoder.py: NNCF, calibrated on the embedded corpus; "auto" on CPUs with VNNI).
Passages: the corpus's (default the shared one), after `--skip` (a scale corpus's distractors lie past
its first 14,434), tokenized once and batched as the shipped encoder batches them (32, sorted by length).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_CORPUS, emit_json
from retrievers.corpus import read_jsonl, to_passages
from retrievers.encoder import Encoder
from retrievers.onnx_encoder import OnnxInt8Encoder, export_fp32, length_sorted_batches, mean_pooled
from retrievers.sources.dense_build import passage_text

BATCH = 32  # the shipped int8 encoder's batch (retrievers/encoder.py: min(batch_size, 32))


def batches(tokenizer, texts: list[str], size: int = BATCH) -> list[tuple[np.ndarray, dict, np.ndarray]]:
    """The shipped encoder's batches, tokenized ahead so that the timing is the model's alone."""
    return list(length_sorted_batches(tokenizer, texts, size))


def embed(run, prepared, n: int) -> np.ndarray:
    out = np.zeros((n, 0), dtype=np.float32)
    for rows, feeds, mask in prepared:
        vecs = mean_pooled(run(feeds), mask)
        if out.shape[1] == 0:
            out = np.zeros((n, vecs.shape[1]), dtype=np.float32)
        out[rows] = vecs
    return out


def closeness(vecs: np.ndarray, reference: np.ndarray) -> dict:
    cos = (vecs * reference).sum(1)
    return {"cosine_to_fp32_min": round(float(cos.min()), 4), "cosine_to_fp32_mean": round(float(cos.mean()), 5)}


def onnx_runners(folder: str, fp32: Path, work: Path, threads: int) -> dict:
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    shipped = OnnxInt8Encoder(folder, threads=threads).load()
    fused, path = work / "fused-fp32.onnx", work / "fused-int8.onnx"
    optimize_model(str(fp32), model_type="bert", num_heads=0, hidden_size=0, opt_level=1).save_model_to_file(str(fused))
    # DefaultTensorType: the fused graph's custom ops defeat the quantizer's shape inference
    quantize_dynamic(str(fused), str(path), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": 1})
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return {"onnx-int8": shipped.hidden, "onnx-int8-fused": lambda feeds: session.run(None, feeds)[0]}


def openvino_runners(folder: str, fp32: Path, threads: int) -> dict:
    """OpenVINO on the fp32 export, and the shipped static int8 model (retrievers/openvino_encoder.py)."""
    try:
        import openvino as ov

        from retrievers.openvino_encoder import OpenVinoInt8Encoder, available
    except ImportError as exc:
        return {"openvino": f"not installed here ({exc.name}): requirements/cpu.in installs it"}
    if not available():
        return {"openvino": "not installed here (nncf): requirements/cpu.in installs it"}
    settings = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": "f32"}  # else bf16 on CPUs that have it: not the fp32 row
    request = ov.Core().compile_model(str(fp32), "CPU", settings).create_infer_request()
    return {"openvino-fp32": lambda feeds: request.infer(feeds)[0],
            "openvino-int8": OpenVinoInt8Encoder(folder, threads=threads).load().hidden}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--skip", type=int, default=0, help="passages of the corpus passed over first")
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-sizes", default="1,4,32", help="the shipped model's vectors at these batch sizes too")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    passages = itertools.islice(to_passages(read_jsonl(args.corpus)), args.skip,
                                args.skip + args.texts)
    texts = [passage_text(p) for p in passages]
    encoder = Encoder(memo_size=0, query_backend="torch").load()
    reference = encoder.encode(texts)  # torch fp32 (a query's vectors): what a corpus vector is compared with
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder.path)
    prepared = batches(tokenizer, texts)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = export_fp32(encoder.path, Path(tmp) / "fp32.onnx")
        runners = onnx_runners(encoder.path, fp32, Path(tmp), args.threads)
        runners.update(openvino_runners(encoder.path, fp32, args.threads))
        missing = {k: v for k, v in runners.items() if isinstance(v, str)}
        runners = {k: v for k, v in runners.items() if not isinstance(v, str)}
        times: dict[str, list[float]] = {k: [] for k in runners}
        vecs = {}
        for _ in range(args.rounds):
            for name, run in runners.items():
                t = time.perf_counter()
                vecs[name] = embed(run, prepared, len(texts))
                times[name].append(time.perf_counter() - t)
    base = sum(times["onnx-int8"])
    report = {"corpus": str(args.corpus), "skip": args.skip, "texts": len(texts), "threads": args.threads,
              "rounds": args.rounds, "backends": {}, "not_run": missing}
    for name in runners:
        report["backends"][name] = {"passages_per_s": [round(len(texts) / t, 1) for t in times[name]],
                                    "speed_vs_onnx_int8": round(base / sum(times[name]), 2),
                                    **closeness(vecs[name], reference)}
    # dynamic int8 scales activations per batch: the same passage in another batch gets another vector
    report["onnx_int8_by_batch"] = {size: closeness(embed(runners["onnx-int8"], batches(tokenizer, texts, size),
                                                          len(texts)), reference)
                                    for size in (int(b) for b in args.batch_sizes.split(",") if b)}
    emit_json(report, args.out)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
