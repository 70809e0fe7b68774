"""Where the in-process `eor ask` gets its pool and what happens to it after the answer: a
one-shot ask builds one and stops its engine; the warm reader keeps one between asks."""
from __future__ import annotations

from typing import Any


def close_engine(pool) -> None:
    """Stop the pool's reader engines now (their worker processes), not at interpreter exit."""
    from serve.builder import close_engines

    close_engines(pool)


class OneShot:
    """Today's `eor ask`: a pool for this ask alone, its engine stopped after the answer."""

    def get(self, config) -> Any:
        from serve.builder import make_pool

        return make_pool(config)

    def metrics(self, options, reader) -> list:
        from voter.question_vote import build_metrics

        return build_metrics(options, reader)

    def release(self, pool) -> None:
        close_engine(pool)  # its shutdown messages go to the log too, not after the answer


class Kept(OneShot):
    """The warm reader's: one pool kept loaded between asks (reader engine, encoder, indexes)
    and the voter's metric models (BERTScore), so the next ask starts at its first retriever.
    A config other than the kept pool's gets a new pool (the old one's engine stopped first)."""

    def __init__(self) -> None:
        self._config = None
        self._pool = None
        self._metrics: dict = {}
        self.warm = False  # a pool has answered and is kept

    def get(self, config) -> Any:
        if self._pool is not None and self._config != config:
            self.close()
        if self._pool is None:
            self._pool = super().get(config)
            self._config = config
        stats = self._pool.reader.stats
        self._pool.reader.stats = type(stats)()  # the ask prints its own reader counts, not the total
        return self._pool

    def metrics(self, options, reader) -> list:
        key = (options, id(reader))
        if key not in self._metrics:
            self._metrics[key] = super().metrics(options, reader)
        return self._metrics[key]

    def release(self, pool) -> None:
        self.warm = True

    def close(self) -> None:
        pool, self._pool, self._config, self._metrics, self.warm = self._pool, None, None, {}, False
        if pool is not None:
            close_engine(pool)


ONE_SHOT = OneShot()
