"""Benchmarks, each a `python -m bench.<name>` command that writes a JSON report: the service's
load, latency and faults (`load_test`, `faults`, `service_calls`, `fuzz`, `cluster`), the reader
and retrieval (`reader_batching`, `engine_settings`, `retrieval_recall`, `model_compare`), cost
models (`scale_model`, `voter_objective`); `robust/` holds the robustness suites (a gRPC client in
`.venv-bench`). Modules outside `IN_PROCESS` of tests/bench/test_bench_imports.py never import
the server packages."""
