from voter.normalize import normalize_answer, normalize_tokens


def test_squad_normalisation():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("  U.S.A.  ") == "usa"
    assert normalize_answer("") == ""


def test_articles_only_as_words():
    assert normalize_answer("Theodore the Great") == "theodore great"
    assert normalize_tokens("A man, a plan") == ["man", "plan"]


def test_non_answers_are_empty_or_the_question_echoed():
    from voter.normalize import is_non_answer

    q = "who painted the mona lisa"
    assert is_non_answer("Who painted the Mona Lisa?", q)
    assert is_non_answer("  ", q)
    assert not is_non_answer("who painted the mona lisa was Leonardo da Vinci", q)
    assert not is_non_answer("Leonardo da Vinci", q)
