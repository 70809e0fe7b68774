"""The EoR voter: similarity metrics, pooling, the fitted voter, QA metrics (paper §2.1, §4).

Pure Python + numpy at import time; models (bert_score, transformers) load lazily and
SciPy is imported by `EoRVoter.fit`. Never imports Ray or vLLM.
"""
from voter.estimator import EoRVoter, VoterConfig, VoteObjective
from voter.normalize import normalize_answer
from voter.pooling import available_poolings, get_pooling, register_pooling
from voter.qa_metrics import exact_match, match, mrlr, mrwr, oracle_upper_bound, rwr_matrix, token_f1
from voter.similarity import (
    AnswerPair,
    EMSimilarity,
    PairSimilarity,
    available_metrics,
    create_metric,
    register_metric,
    similarity_tensor,
)
from voter.voting import VoteRule, VoterWeights, choose, decision_scores, vote_margin
from voter.weights_io import Provenance, SavedWeights, check_compatible, load_weights, save_weights

__all__ = [
    "AnswerPair", "EMSimilarity", "EoRVoter", "PairSimilarity", "Provenance", "SavedWeights",
    "VoteObjective", "VoteRule", "VoterConfig", "VoterWeights", "available_metrics",
    "available_poolings", "check_compatible", "choose", "create_metric", "decision_scores",
    "exact_match", "get_pooling", "load_weights", "match", "mrlr", "mrwr", "normalize_answer",
    "oracle_upper_bound", "register_metric", "register_pooling", "rwr_matrix", "save_weights",
    "similarity_tensor", "token_f1", "vote_margin",
]
