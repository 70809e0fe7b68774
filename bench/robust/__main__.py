"""`python -m bench.robust {sure,rare,query} --server HOST:PORT ...` (see bench.robust.cli)."""
from bench.robust.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
