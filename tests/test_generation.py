"""spec_generate end to end: the output distribution, the counts, greedy, bad input."""
import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import chi2_excess

TARGET = sd.random_table(11, sharpness=2.0)
PAIRS = {  # name -> (draft table, context to start from)
    "middling": (sd.blend(TARGET, sd.random_table(12, sharpness=2.0), 0.5), 0),
    "unrelated": (sd.random_table(13, sharpness=2.0), 3),
    "hot draft": (sd.temper(TARGET, 2.0), 5),
}
RUNS = 2000
# A fit 6 standard deviations above the mean has a p-value near 1e-6; a broken
# rule must land far past it, the correct one well inside it.
LIMIT = 6.0


def first_two_counts(Q, ctx, k, seed=0, P=TARGET):
    rng, counts = np.random.default_rng(seed), np.zeros((len(P), len(P)))
    for _ in range(RUNS):
        (x1, x2), _, _ = sd.spec_generate(P, Q, [ctx], 2, k, rng)
        counts[x1, x2] += 1
    return counts


def truth(ctx, P=TARGET):
    return P[ctx][:, None] * P


# exact_first_tokens proves the rule on many pairs (test_exact.py); these
# samples run verify_round's own lines, which the enumeration does not
@pytest.mark.parametrize("pair, k", [("middling", 1), ("unrelated", 2), ("hot draft", 4)])
def test_correct_rule_emits_the_target_joint(pair, k):
    Q, ctx = PAIRS[pair]
    assert chi2_excess(first_two_counts(Q, ctx, k), truth(ctx)) < LIMIT


def test_continue_is_biased_even_at_k_1():
    # with one draft there is nothing left to check, but the bonus token then
    # follows the rejected draft instead of its replacement
    Q, ctx = PAIRS["unrelated"]
    module, rng, counts = sd.bugged("continue"), np.random.default_rng(0), np.zeros((6, 6))
    for _ in range(RUNS):
        counts[tuple(module.spec_generate(TARGET, Q, [ctx], 2, 1, rng)[0])] += 1
    assert chi2_excess(counts, truth(ctx)) > 5 * LIMIT
    assert chi2_excess(counts.sum(axis=1), TARGET[ctx]) < LIMIT  # the first token is right


def test_long_run_transitions_are_the_targets():
    # rounds chain on the last emitted token: every bigram of a long output,
    # across round boundaries, must follow P
    Q, _ = PAIRS["middling"]
    tokens, _, _ = sd.spec_generate(TARGET, Q, [0], 12_000, 3, np.random.default_rng(4))
    counts = np.zeros((6, 6))
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    for prev in range(6):
        assert chi2_excess(counts[prev], TARGET[prev]) < LIMIT, f"context {prev}"


@pytest.mark.parametrize("T", [0.5, 2.0])
def test_both_models_tempered_alike_emit_the_tempered_target(T):
    Q, ctx = PAIRS["middling"]
    P_T = sd.temper(TARGET, T)
    counts = first_two_counts(sd.temper(Q, T), ctx, 3, P=P_T)
    assert chi2_excess(counts, truth(ctx, P_T)) < LIMIT


def transition_misfit(tokens, P):
    """The worst per-context chi-square excess of a text's transitions against P."""
    counts = np.zeros_like(P)
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    return max(chi2_excess(counts[c], P[c]) for c in range(len(P)) if counts[c].sum() > 0)


def test_temperature_on_one_side_only_is_detected():
    # the draft samples at T = .5, verification is handed its T = 1 table
    Q, _ = PAIRS["middling"]
    P_T, Q_T = sd.temper(TARGET, 0.5), sd.temper(Q, 0.5)
    honest = sd.measure(P_T, Q_T, 3, 3000, seed=8).tokens
    buggy = sd.measure(P_T, Q_T, 3, 3000, seed=8, verify=sd.hand_q_rows(Q)).tokens
    assert transition_misfit(honest, P_T) < LIMIT
    assert transition_misfit(buggy, P_T) > 5 * LIMIT


def test_transition_tv_is_zero_for_a_text_that_follows_p_exactly():
    P = sd.temper(TARGET, 0)  # deterministic: the text is its own expectation
    tokens = sd.plain_decode(P, [0], 200, np.random.default_rng(0))
    assert sd.transition_tv(tokens, P) == 0.0
    # by hand: after 'a' the text goes a, b (1/2 each) where P[0] says b always
    P2 = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert sd.transition_tv([0, 0, 1, 0], P2) == pytest.approx((2 * 0.5 + 1 * 0.0) / 3)


# --- counts ------------------------------------------------------------------

def test_perfect_draft_accepts_everything_and_earns_k_plus_one_per_call():
    tokens, calls, accepted = sd.spec_generate(TARGET, TARGET, [0], 500, 4, np.random.default_rng(0))
    assert len(tokens) == 500
    assert calls == 100 and accepted == 400


def test_a_draft_the_target_never_agrees_with_accepts_nothing():
    P = sd.temper(TARGET, 0)       # one-hot rows
    Q = (1 - P) / 5                # never proposes the target's token
    tokens, calls, accepted = sd.spec_generate(P, Q, [0], 300, 3, np.random.default_rng(0))
    assert (calls, accepted) == (300, 0)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_each_round_emits_accepted_plus_one(k):
    # each round yields its accepted drafts plus one token (replacement or
    # bonus); only the last round may run past n_tokens, by at most k
    Q, ctx = PAIRS["middling"]
    n = 1000
    tokens, calls, accepted = sd.spec_generate(TARGET, Q, [ctx], n, k, np.random.default_rng(k))
    assert len(tokens) == n
    assert n <= accepted + calls <= n + k
    assert 0 < accepted < calls * k


def test_measured_alpha_and_tokens_per_call_track_the_pair():
    Q, _ = PAIRS["middling"]
    m = sd.measure(TARGET, Q, 4, 3000, seed=1)
    assert m.rate == pytest.approx(sd.pair_alpha(TARGET, Q), abs=0.03)
    assert m.per_call == pytest.approx(sd.exact_tokens_per_call(TARGET, Q, 4), abs=4 * m.se)
    assert len(m.sizes) == 3000 and sum(m.sizes) == len(m.tokens)


def test_measure_by_hand():
    # P == Q: every round keeps all 2 drafts and adds a bonus: 3 tokens per call,
    # every draft checked and accepted
    m = sd.measure(TARGET, TARGET, 2, 40, seed=0)
    assert (m.rate, m.per_call, m.se, m.sizes) == (1.0, 3.0, 0.0, [3] * 40)


# --- greedy is sampling from temper(P, 0) -------------------------------------

@pytest.mark.parametrize("seed", [21, 22, 23])
@pytest.mark.parametrize("draft_T", [0, 1.0])
def test_greedy_speculation_equals_plain_argmax_decoding(seed, draft_T):
    # the draft may even sample (T = 1): a one-hot p accepts only its argmax,
    # and the residual of a one-hot p is that same one-hot row
    base = sd.random_table(seed)
    P = sd.temper(base, 0)
    Q = sd.temper(sd.blend(base, sd.random_table(seed + 50), 0.7), draft_T)
    ctx, expected = 2, []
    for _ in range(1000):
        ctx = int(np.argmax(base[ctx]))
        expected.append(ctx)
    tokens, calls, accepted = sd.spec_generate(P, Q, [2], 1000, 4, np.random.default_rng(seed))
    assert tokens == expected
    assert accepted > 0 and calls < 1000


# --- bad input ---------------------------------------------------------------

def call(P=TARGET, Q=TARGET, ctx=0, n=5, k=2):
    return sd.spec_generate(P, Q, [ctx], n, k, np.random.default_rng(0))


@pytest.mark.parametrize("kwargs, message", [
    (dict(P=np.ones(6) / 6), r"target P must be a square 2-D table.*\(6,\)"),
    (dict(Q=np.ones((6, 5)) / 5), r"draft Q must be a square"),
    (dict(Q=np.ones((5, 5)) / 5), r"target P is \(6, 6\) but draft Q is \(5, 5\)"),
    (dict(P=[["a"] * 6] * 6), r"target P must be a numeric array"),
    (dict(P=np.where(np.eye(6, dtype=bool), np.nan, TARGET)), r"target P\[0, 0\] = nan"),
    (dict(Q=np.where(np.eye(6, dtype=bool)[::-1], -0.1, TARGET)), r"draft Q\[0, 5\] = -0.1"),
    (dict(Q=np.where(np.eye(6, dtype=bool), np.inf, TARGET)), r"draft Q row 0 sums to inf"),
    (dict(P=TARGET * np.r_[1, 1, 1.001, 1, 1, 1][:, None]), r"target P row 2 sums to 1.001"),
    (dict(k=0), r"k must be an integer >= 1, got 0"),
    (dict(k=2.5), r"k must be an integer >= 1, got 2.5"),
    (dict(n=0), r"n_tokens must be an integer >= 1, got 0"),
    (dict(ctx=6), r"text\[0\] = 6 is not a token id in 0..5"),
    (dict(ctx=-1), r"text\[0\] = -1 is not a token id in 0..5"),
    (dict(ctx=True), r"text\[0\] = True is not a token id in 0..5"),
])
def test_spec_generate_names_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        call(**kwargs)


def test_spec_generate_accepts_nested_lists_rows_off_by_rounding_and_numpy_ids():
    P = (TARGET + 1e-9 * np.eye(6)).tolist()  # rows sum to 1 + 1e-9
    assert len(call(P=P)[0]) == 5
    # a context as numpy hands it out (argmax returns np.int64) is a token id
    ctx = np.argmax(TARGET[0])
    assert call(ctx=ctx) == call(ctx=int(ctx))
