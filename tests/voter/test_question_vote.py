import pytest

from retrievers.types import Candidate, Context, QuestionResult
from tests.voter.conftest import ONE_READER_POOL, SMALL, STRONG, TWO_READER_POOL, reader_voter
from voter.question_vote import answer_grid, choose_voter
from voter.weights_io import save_weights


def test_echoes_failures_and_empty_answers_do_not_take_part():
    q = "who painted the mona lisa"
    cands = (Candidate("A", "Leonardo da Vinci", Context("A")),
             Candidate("B", "Who painted the Mona Lisa?", Context("B")),  # echo
             Candidate("C", "", Context("C"), error="SE search failed"),
             Candidate("D", "  ", Context("D")))
    assert answer_grid([QuestionResult(q, cands)], ["A", "B", "C", "D", "E"]) == [
        ["Leonardo da Vinci", None, None, None, None]]


def test_a_voter_naming_a_reader_the_system_lacks_is_refused_in_one_line(tmp_path):
    path = save_weights(tmp_path / "v.json", reader_voter())
    with pytest.raises(ValueError) as e:
        choose_voter(ONE_READER_POOL, {"": SMALL}, weights=str(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"voter {reader_voter().digest} [{path}]: ")
    assert "this system does not run reader 1.5B (qwen2.5-coder-1.5b)" in msg
    assert "`readers: {1.5B: qwen2.5-coder-1.5b}`" in msg and "eor models prepare qwen2.5-coder-1.5b" in msg
    with pytest.raises(ValueError, match="this system does not run reader 1.5B"):  # whatever the system's pool
        choose_voter(TWO_READER_POOL, {"": SMALL}, weights=str(path))


def test_with_a_fallback_the_fallback_runs_and_the_choice_says_why(tmp_path):
    fallback = reader_voter(ONE_READER_POOL, readers={})
    saved = reader_voter(fallback=fallback)
    path = save_weights(tmp_path / "v.json", saved)
    choice = choose_voter(ONE_READER_POOL, {"": SMALL}, weights=str(path))
    assert choice.saved == fallback and choice.source == f"{path}, single-reader fallback"
    assert choice.warnings == (f"voter {saved.digest} [{path}]: this system does not run reader 1.5B "
                               "(qwen2.5-coder-1.5b): running its single-reader fallback",)
    assert "single-reader fallback" in choice.describe()
    with pytest.raises(ValueError, match="different retriever pool"):  # the fallback must fit the pool too
        choose_voter(("Wiki@10", "PK"), {"": SMALL}, weights=str(path))
    full = choose_voter(TWO_READER_POOL, {"": SMALL, "1.5B": STRONG}, weights=str(path))
    assert full.saved == saved and full.source == str(path) and full.warnings == ()


def test_readers_compare_by_model_name_and_only_the_default_reader_may_differ(tmp_path):
    path = str(save_weights(tmp_path / "v.json", reader_voter()))
    same = choose_voter(TWO_READER_POOL, {"": "qwen2.5-coder-0.5b", "1.5B": "qwen2.5-coder-1.5b"}, weights=path)
    assert same.warnings == ()  # the config's model names are the engines' model ids before ':'
    with pytest.raises(ValueError) as e:
        choose_voter(TWO_READER_POOL, {"": SMALL, "1.5B": "qwen2.5-coder-3b"}, weights=path)
    assert "reader 1.5B is qwen2.5-coder-3b here, the voter was fitted with qwen2.5-coder-1.5b" in str(e.value)
    other = choose_voter(TWO_READER_POOL, {"": "smollm2-135m", "1.5B": STRONG}, weights=path)
    assert other.saved.digest == reader_voter().digest  # a warning, not a refusal
    assert other.warnings == (f"the voter was fitted with reader {SMALL!r}, this system reads with 'smollm2-135m': "
                              "refit it (eor fit) for this reader",)
