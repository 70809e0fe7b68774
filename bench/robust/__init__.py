"""Robustness benchmarking of the live ensemble (SURE, RARE, query-level), as a gRPC client.

Runs in its own environment (`.venv-bench`: TextAttack needs transformers < 5) and imports
only `protos` from this repository, never the server's packages (`serve`, `retrievers`,
`voter`): it sees the system exactly as a user does.
"""
