from retrievers.types import Candidate, Context, QuestionResult
from voter.question_vote import answer_grid


def test_echoes_failures_and_empty_answers_do_not_take_part():
    q = "who painted the mona lisa"
    cands = (Candidate("A", "Leonardo da Vinci", Context("A")),
             Candidate("B", "Who painted the Mona Lisa?", Context("B")),  # echo
             Candidate("C", "", Context("C"), error="SE search failed"),
             Candidate("D", "  ", Context("D")))
    assert answer_grid([QuestionResult(q, cands)], ["A", "B", "C", "D", "E"]) == [
        ["Leonardo da Vinci", None, None, None, None]]
