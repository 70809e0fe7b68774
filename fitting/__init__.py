"""Fitting and judging voters offline: what `eor fit`, `eor eval` and `eor calibrate` compute, apart
from what the service runs (voter/). Pure Python (numpy, SciPy, scikit-learn) over the arrays and
results a run log holds (correctness: Match on whole tokens, `questions.right`); it imports retrievers/ and voter/, never serve/, Ray or vLLM, and nothing
on the serving path imports it (tests/test_house.py).

- `questions`: what the fit reads (questions with gold answers, their results; correctness is Match)
- `pricing`: what a round costs (reader speeds, the latency model)
- `pool_run`: the whole pool's run as arrays, and each question's view after each round
- `layout_fit`, `layout_choice`, `search`: the confidence-aware fit: one layout cross-validated,
  the layouts compared and chosen, the search that ties them together
- `thresholds`: the stop thresholds (confidence rounds and the margin cascade)
- `held_out`: a fitted model on questions it never saw, and its calibration fitted again
- `load_bar`: the lower P(right) bar of depth that follows the load, by cross-validation
- `weights`: the EoR weights and margin cascade (`eor fit`'s first part)
- `replay`, `evaluation`: the voter's ensembles replayed on a run, and the tables of `eor eval`
- `measures`, `paired`: calibration measures and proper scores; the paired sign test
- `nested`: the whole fit judged by nested cross-validation grouped by passage, beside the pair the
  same folds chose (`eor fit --nested-cv K`)
"""
