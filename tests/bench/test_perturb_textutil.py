"""The perturbations' text helpers: sentence splitting, cleaning of the reader's rewrites."""
from __future__ import annotations

from bench.robust.perturb.textutil import (candidate_lines, clean_passage, is_question, query_rewrites, similarity,
                                          split_sentences)


def test_sentences_split_at_ends_not_at_abbreviations_initials_or_decimals():
    text = ("Mr. Smith went to Washington. He arrived at 3.5 p.m. on Jan. 5. J. R. R. Tolkien wrote it! "
            '"Is it?" she asked. The U.S. Army was there.')
    assert split_sentences(text) == ["Mr. Smith went to Washington.", "He arrived at 3.5 p.m. on Jan. 5.",
                                     "J. R. R. Tolkien wrote it!", '"Is it?" she asked.', "The U.S. Army was there."]
    assert split_sentences("no end mark") == ["no end mark"]
    assert split_sentences("  ") == []


def test_candidate_lines_strip_numbering_labels_quotes_and_the_original():
    out = ('Here are 3 paraphrases:\n1. "When is the Cannes film festival held?"\n'
           "2) Rewritten question: When does Cannes take place?\n\n- when does the cannes film festival take place\n"
           "Output:\n3. When is the Cannes film festival held?")
    assert candidate_lines(out, "when does the cannes film festival take place") == [
        "When is the Cannes film festival held?", "When does Cannes take place?"]
    assert candidate_lines("", "q") == [] and candidate_lines("...\n", "q") == []


def test_clean_passage_drops_a_leading_label_line():
    assert clean_passage('Here is the simplified text:\n\n"Paris is the capital. It is big."') == \
        "Paris is the capital. It is big."
    assert clean_passage("Simplified passage: Paris is big.\nIt has museums.") == "Paris is big.\nIt has museums."
    assert clean_passage("  \n") == ""


def test_similarity_is_one_for_the_same_text_and_falls_with_edits():
    q = "when does the cannes film festival take place"
    assert similarity(q, q) == 1.0
    assert 0.8 < similarity(q, "when does the canes film festival take place") < 1.0
    assert similarity(q, "what is the capital of france") < 0.5


def test_query_rewrites_must_stay_questions_and_not_answer():
    assert is_question("who wrote hamlet") and is_question("Hamlet's author?") and not is_question("Paris.")
    out = "Shakespeare wrote it.\nThe answer is Shakespeare.\nI'm curious who the author of Hamlet was.\nWho penned Hamlet?"
    assert query_rewrites(out, "who wrote hamlet") == ["I'm curious who the author of Hamlet was.", "Who penned Hamlet?"]
    assert query_rewrites("Cast of the show, listed.", "cast of the office") == ["Cast of the show, listed."]
