"""Running EoR: the one config loader (`config.py`), `$EOR_HOME` (`paths.py`), wiring of the
configured components (`builder.py`), an Ask's one deadline (`deadline.py`) and the rounds the
CLI and the service share (`orchestrator.py`, with the cascade loop in `ensemble.py`); by job
below it: `engine/` (vLLM), `app/` (Ray Serve and gRPC), `cli/` (`eor`),
`offline/` (run logs, fit, eval, reports)."""
