"""The warm reader: the next `eor ask` in seconds, not an engine start.

An in-process `eor ask` loads its whole pool (vLLM reader engine, encoder, indexes, the voter's
metric models) and stops it again: ~45 s per question on 2 cores. Instead the first `eor ask`
starts a background process, the warm reader (`worker.py`), hands it the question and its own
stdout and stderr (`client.py`, `wire.py`), and the reader answers with the in-process code
(`serve/cli/ask.py: answer_here`) over a pool it keeps (`pools.py: Kept`): the same lines, the
same JSON. The ask's last line says the reader stays warm, for how long, and that `eor stop`
ends it; `eor status` shows it (pid, reader, idle time left, memory). Later asks go to it.

Bounded: one per $EOR_HOME (`place.py`: its lock; two asks at once start one), for one pool
(`identity.py`: an ask for another config, index, reader or code replaces it); it ends after
--keep-warm idle (default 5 min), on `eor stop`, SIGTERM or SIGINT, and when its pool did not
load; a killed one's socket, state file and engine process are removed by the next command.
`--local`, `--no-warm`, `--keep-warm 0` and `--verbose` answer in the asking process as before.
"""
