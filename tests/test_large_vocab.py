"""Bad input is refused by name at any vocabulary size, and cheaply: a drafted
id outside 0..V-1, a NaN or negative entry, a row that cannot be sampled. A
one-hot row is built without a V x V matrix, and no error message embeds a
whole row. Tested at a 100,000-token vocabulary, where a V x V matrix would
take 80 GB.

Where this project differs from some engines on purpose: a draft is kept when
u < min(1, p/q), strictly, so a uniform of exactly 0 cannot keep a token the
target gives probability 0; and a NaN is refused, not mapped to -inf."""
import time
import tracemalloc

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import ScriptedRng

V = 100_000


class Rows:
    """A model over V tokens that returns given rows, the same at every position."""

    def __init__(self, row):
        self.row = row

    def __len__(self):
        return len(self.row)

    def __call__(self, text, new, cached):
        return [self.row] * (len(new) + 1 - cached)


@pytest.fixture(scope="module")
def p():
    row = np.full(V, 0.5 / (V - 2))
    row[[7, 99_999]] = 0.25
    return row


def test_one_strict_round_at_100000_tokens_is_fast_and_small(p):
    q = p[::-1].copy()
    tracemalloc.start()
    start = time.perf_counter()
    out = sd.verify_strict(Rows(p), [1], [7, 99_999, 3], [q, q, q], ScriptedRng([0.1, 0.1, 0.9, 0.5]))
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out[:2] == [7, 99_999] and len(out) == 3
    assert peak < 20 * 2**20 and seconds < 0.5  # a V x V identity would be 80 GB


def test_one_hot_rows_without_a_v_by_v_matrix(p):
    tracemalloc.start()
    rows = sd.one_hot([3, 99_999], V)
    strict = sd.strict_seen(p, 12)
    greedy = sd.temper(np.stack([p, p[::-1]]), 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rows.shape == (2, V) and rows[1, 99_999] == 1 and rows.sum() == 2
    assert strict[12] == 1 and strict.sum() == 1 and greedy.argmax(axis=1).tolist() == [7, 0]
    assert peak < 20 * 2**20


@pytest.mark.parametrize("x, message", [(-1, "position 1 of the pass .* holds -1, not a token id 0..99999"),
                                        (V, "holds 100000, not a token id"),
                                        (V + 1, "holds 100001"), (2.0, "holds 2.0"), (True, "holds True")])
def test_a_drafted_id_outside_the_vocabulary_is_refused_by_position(p, x, message):
    with pytest.raises(ValueError, match=message):
        sd.verify_round(Rows(p), [1], [x], [p], ScriptedRng([0.5, 0.5]))
    with pytest.raises(ValueError, match=message.replace("1 of", "2 of")):
        sd.verify_block(Rows(p), [1], [7, x], [p, p], ScriptedRng([0.5] * 4))


@pytest.mark.parametrize("x, message", [(-1, "drafted token -1 is not a token id in 0..99999"),
                                        (V + 1, "drafted token 100001 is not a token id")])
def test_accept_prob_refuses_an_id_it_cannot_read(p, x, message):
    with pytest.raises(ValueError, match=message):
        sd.accept_prob(p, p, x)


def test_accept_prob_refuses_nan_negative_and_inf_entries_it_reads(p):
    bad = p.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match=r"p\[7\] = nan is not a probability"):
        sd.accept_prob(bad, p, 7)
    with pytest.raises(ValueError, match="q\\[7\\] = nan: the draft could not have proposed it"):
        sd.accept_prob(p, bad, 7)
    bad[7] = -0.1
    with pytest.raises(ValueError, match=r"p\[7\] = -0.1 is not a probability"):
        sd.accept_prob(bad, p, 7)
    with pytest.raises(ValueError, match="q\\[7\\] = 0.0"):
        sd.accept_prob(p, np.zeros(V), 7)
    all_nan = np.full(V, np.nan)
    with pytest.raises(ValueError):  # a NaN target row at position 0 no longer passes a direct call
        sd.verify_round(Rows(all_nan), [1], [7], [p], ScriptedRng([0.5, 0.5]))


def test_an_error_message_names_the_first_bad_entry_never_the_whole_row():
    row = np.full(20_000, 1 / 20_000)
    row[[123, 456]] = np.nan
    with pytest.raises(ValueError) as caught:
        sd.sample_from(row, 0.5)
    message = str(caught.value)
    assert len(message) < 120 and "20000 entries" in message and "entry 123 is NaN" in message
    row[[123, 456]] = [0.1, -0.3]
    assert "entry 456 is negative (-0.3)" in sd.row_flaw(row)


def test_a_long_row_samples_as_a_short_one_does():
    rng = np.random.default_rng(0)
    short = rng.random(40)
    long_ = np.concatenate([short, np.zeros(100)])  # past the 64-entry switch to numpy
    for u in rng.random(200):
        assert sd.sample_from(short, u) == sd.sample_from(long_, u)
    nearly = np.full(V, 1 / V) * (1 - 1e-9)  # sums a hair below 1: never an id past the vocabulary
    assert sd.sample_from(nearly, np.nextafter(1, 0)) == V - 1


@pytest.mark.parametrize("x", [V, V + 1, -1])
def test_strict_matching_and_one_hot_refuse_a_bad_id_by_name(p, x):
    with pytest.raises(ValueError, match=f"the drafted token is {x}, not a token id in 0..{V - 1}"):
        sd.strict_seen(p, x)
    with pytest.raises(ValueError, match=f"drafted token 1 is {x}, not a token id in 0..{V - 1}"):
        sd.verify_strict(Rows(p), [1], [7, x], [p, p], ScriptedRng([0.1] * 4))
    with pytest.raises(ValueError, match=f"token 1 is {x}, not a token id"):
        sd.one_hot([3, x], V)


def test_qwen_vocabulary_ids_are_refused_without_a_large_allocation():
    # vLLM's tests use Qwen's vocabulary, 151,936 tokens: the checks allocate no V x V matrix
    V_qwen = 151_936
    q = np.zeros(V_qwen)
    q[5] = 1.0
    tracemalloc.start()
    for bad in (V_qwen, V_qwen + 1, -1):
        with pytest.raises(ValueError, match=f"is {bad}, not a token id in 0..{V_qwen - 1}"):
            sd.strict_seen(q, bad)
        with pytest.raises(ValueError, match="not a token id"):
            sd.accept_prob(q, q, bad)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20


def test_an_unknown_bug_name_lists_the_bugs():
    with pytest.raises(ValueError, match="there is no bug named 'nope'; the bugs are 'argmax', 'no_resample'"):
        sd.bugged("nope")
    with pytest.raises(ValueError, match="the bugs are 'no_update'"):
        sd.bugged("argmax", sd.TREE_BUGS)
