from voter.normalize import normalize_answer, normalize_tokens


def test_squad_normalisation():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("  U.S.A.  ") == "usa"
    assert normalize_answer("") == ""


def test_articles_only_as_words():
    assert normalize_answer("Theodore the Great") == "theodore great"
    assert normalize_tokens("A man, a plan") == ["man", "plan"]
