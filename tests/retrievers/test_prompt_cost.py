"""What a prompt cost: the engine's counts, its prefix-cache hits kept only where an earlier
prompt of the question shares the prefix, and whose prompt that was."""
from retrievers.prompt_cost import prefix_owner, prompt_cost, with_summary
from retrievers.reader import Generation
from retrievers.types import ReaderTokens


def test_prefix_owner_is_the_earlier_prompt_sharing_the_longest_prefix():
    earlier = [("Docs A then ask X", "A"), ("Docs AB then summarise", "AB"), ("Other", "O")]
    assert prefix_owner("Docs AB then answer", earlier) == "AB"
    assert prefix_owner("Docs A then ask Y", earlier) == "A"
    assert prefix_owner("Nothing alike", earlier) is None and prefix_owner("x", []) is None
    assert prefix_owner("Docs A", [("Docs A 1", "first"), ("Docs A 2", "second")]) == "first"  # ties: the earliest


def test_hits_count_only_where_an_earlier_prompt_of_the_question_shares_the_prefix():
    out = Generation("Paris", None, ReaderTokens(300, 2, 256))
    assert prompt_cost("Docs A then ask", out, [("Docs A then summarise", "SE@1")]) == (ReaderTokens(300, 2, 256), "SE@1")
    assert prompt_cost("Docs A then ask", out, [("Unrelated", "PK")]) == (ReaderTokens(300, 2, 0), None)  # another question's
    cold = Generation("Paris", None, ReaderTokens(300, 2, 0))
    assert prompt_cost("Docs A then ask", cold, [("Docs A then summarise", "SE@1")]) == (ReaderTokens(300, 2, 0), None)


def test_a_compressed_retriever_costs_its_answer_and_its_summary_prompt():
    answer, summary = (ReaderTokens(100, 5, 0), None), (ReaderTokens(700, 40, 512), "SE@1")
    assert with_summary(answer, summary) == (ReaderTokens(800, 45, 512), "SE@1")  # hits: the summary's
    assert with_summary((ReaderTokens(100, 5, 64), "PK"), summary) == (ReaderTokens(800, 45, 576), "PK")
