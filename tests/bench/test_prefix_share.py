"""bench/prefix_share.py's count of what a prefix cache can reuse (the pool run itself is the bench's)."""
from bench.prefix_share import common_prefix, shared_tokens


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([7, 8], [7, 8]) == 2


def test_each_prompt_shares_its_longest_prefix_with_an_earlier_one_in_whole_blocks():
    a = list(range(70))
    b = a[:65] + [-1] * 10  # 65 shared with a
    c = a[:40] + [-2]  # 40 shared with a and b
    assert shared_tokens([a, b, c], 32) == 64 + 32
    assert shared_tokens([a, b, c], 128) == 0
    assert shared_tokens([b, a], 16) == 64  # order matters only in who pays first
    assert shared_tokens([a], 32) == 0
