"""The wire contract: `eor.proto`, its generated stubs (`generate.py` regenerates them) and the
gRPC client (`client.py`) every caller uses (CLI, benches, robustness suites)."""
