"""Offline jobs over run logs (no service, no Ray): fitting and evaluating voters and the
confidence-aware adaptive model. They read what `eor run` / `eor fit` / `eor eval` recorded
under $EOR_HOME/runs and never start the reader engine unless asked to run questions."""
