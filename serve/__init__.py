"""Running EoR: the one config loader (`config.py`), `$EOR_HOME` (`paths.py`), wiring of the
configured components (`builder.py`) and the stage orchestration the CLI and the service share
(`ensemble.py`); by job below it: `engine/` (vLLM), `app/` (Ray Serve and gRPC), `cli/` (`eor`),
`offline/` (run logs, fit, eval, reports)."""
