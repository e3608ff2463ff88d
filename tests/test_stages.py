"""Unit tests, one stage at a time, each against a value worked out by hand."""
import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import ScriptedRng

# Three-token tables small enough to verify by hand.
P3 = np.array([[0.2, 0.5, 0.3],
               [0.1, 0.1, 0.8],
               [0.6, 0.2, 0.2]])
Q3 = np.array([[0.4, 0.4, 0.2],
               [0.1, 0.6, 0.3],
               [0.2, 0.2, 0.6]])


# --- 0. models -----------------------------------------------------------------

@pytest.mark.parametrize("order", [1, 2])
def test_random_table_is_row_stochastic_and_seeded(order):
    T = sd.random_table(7, order=order)
    assert T.shape == (sd.VOCAB,) * (order + 1)
    assert np.allclose(T.sum(axis=-1), 1) and (T > 0).all()
    assert np.array_equal(T, sd.random_table(7, order=order))
    assert not np.array_equal(T, sd.random_table(8, order=order))


def test_softmax_by_hand():
    assert np.allclose(sd.softmax(np.array([0.0, np.log(3)])), [0.25, 0.75])
    assert np.allclose(sd.softmax(np.array([[1000.0, 1000.0], [0.0, 0.0]])), 0.5)  # no overflow


def test_sharpness_makes_rows_peakier():
    assert sd.random_table(3, 3.0).max(axis=1).mean() > sd.random_table(3, 1.0).max(axis=1).mean()


def test_blend_endpoints_and_midpoint():
    A, B = sd.random_table(1), sd.random_table(2)
    assert np.array_equal(sd.blend(A, B, 1.0), A)
    assert np.array_equal(sd.blend(A, B, 0.0), B)
    assert np.allclose(sd.blend(A, B, 0.25), 0.25 * A + 0.75 * B)


@pytest.mark.parametrize("w", [-0.1, 1.5, float("nan")])
def test_blend_rejects_weight_outside_unit_interval(w):
    with pytest.raises(ValueError, match="weight"):
        sd.blend(P3, Q3, w)


def test_temper_by_hand():
    # [.5, .3, .2] at T = 0.5 squares then renormalises: [.25, .09, .04] / .38
    assert np.allclose(sd.temper([0.5, 0.3, 0.2], 0.5), np.array([0.25, 0.09, 0.04]) / 0.38)
    assert np.allclose(sd.temper(P3, 1.0), P3)
    flat = sd.temper(P3, 1e6)
    assert np.allclose(flat, 1 / 3, atol=1e-5)


def test_temper_zero_is_one_hot_argmax_with_ties_to_lowest_index():
    assert np.array_equal(sd.temper(P3, 0), [[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    assert np.array_equal(sd.temper([0.4, 0.4, 0.2], 0), [1, 0, 0])
    assert np.array_equal(sd.temper([0.2, 0.4, 0.4], 0), [0, 1, 0])


def test_temper_keeps_zeros_and_survives_tiny_temperature():
    assert np.array_equal(sd.temper([0.0, 0.7, 0.3], 0.5) == 0, [True, False, False])
    assert np.allclose(sd.temper([0.2, 0.5, 0.3], 1e-300), [0, 1, 0])


@pytest.mark.parametrize("T", [-1.0, float("inf"), float("nan")])
def test_temper_rejects_bad_temperature(T):
    with pytest.raises(ValueError, match="temperature"):
        sd.temper(P3, T)


# --- 1. sampling ---------------------------------------------------------------

def test_sample_from_is_the_inverse_cdf():
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    cdf = np.cumsum(probs)
    for u in np.linspace(0, 1, 1001, endpoint=False):
        assert sd.sample_from(probs, u) == np.searchsorted(cdf, u, side="right")


def test_sample_from_on_a_grid_of_uniforms_reproduces_probs():
    probs = P3[0]
    n = 10_000
    counts = np.bincount([sd.sample_from(probs, (i + 0.5) / n) for i in range(n)], minlength=3)
    assert np.allclose(counts / n, probs, atol=1 / n)


def test_sample_from_never_picks_a_zero_probability_token():
    # u == 0 must not select the leading zero (a `<=`-style bug would)
    assert sd.sample_from([0.0, 0.0, 1.0], 0.0) == 2
    assert sd.sample_from([0.5, 0.0, 0.5], 0.5) == 2


def test_sample_from_when_the_cumulative_sum_ends_below_one():
    # sums to 1 - 1e-9: u just under 1 must still land on the last real token
    assert sd.sample_from([0.3, 0.7 - 1e-9, 0.0, 0.0], 0.9999999999) == 1


def test_sample_from_stays_on_real_tokens_for_rows_that_miss_one():
    rng = np.random.default_rng(3)
    top = np.nextafter(1.0, 0.0)
    for _ in range(2000):
        probs = rng.dirichlet(np.ones(6)) * (1 + rng.uniform(-1e-7, 1e-7))
        probs[rng.integers(6, size=2)] = 0.0
        for u in (0.0, top, rng.random()):
            assert probs[sd.sample_from(probs, u)] > 0


@pytest.mark.parametrize("u", [-1e-9, 1.0, 1.5, float("nan")])
def test_sample_from_rejects_u_outside_unit_interval(u):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        sd.sample_from(P3[0], u)


# --- 2. acceptance -------------------------------------------------------------

def test_accept_prob_by_hand():
    p, q = np.array([0.2, 0.5, 0.3]), np.array([0.4, 0.4, 0.2])
    assert sd.accept_prob(p, q, 0) == pytest.approx(0.5)  # over-proposed: p/q
    assert sd.accept_prob(p, q, 1) == 1.0                 # under-proposed: keep
    assert sd.accept_prob(np.array([0.0, 1.0]), np.array([0.5, 0.5]), 0) == 0.0


def test_accept_prob_rejects_a_token_the_draft_could_not_propose():
    with pytest.raises(ValueError, match="could not have proposed"):
        sd.accept_prob(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 1)


# --- 3. residual ---------------------------------------------------------------

def test_residual_by_hand():
    # max(0, p - q) = [.3, 0, 0]  ->  [1, 0, 0]
    assert np.allclose(sd.residual(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.6, 0.2])), [1, 0, 0])
    # max(0, p - q) = [.1, .3, 0]  ->  [.25, .75, 0]
    assert np.allclose(sd.residual(np.array([0.3, 0.5, 0.2]), np.array([0.2, 0.2, 0.6])),
                       [0.25, 0.75, 0])


def test_residual_when_q_covers_p_is_p_not_nan():
    p = np.array([0.2, 0.5, 0.3])
    r = sd.residual(p, p.copy())
    assert np.array_equal(r, p) and not np.isnan(r).any()


def test_accepted_plus_rejected_mass_is_p_for_random_rows():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p, q = rng.dirichlet(np.ones(6) * 0.5), rng.dirichlet(np.ones(6) * 0.5)
        kept = q * np.array([sd.accept_prob(p, q, x) for x in range(6)])
        assert np.allclose(kept + (1 - np.minimum(p, q).sum()) * sd.residual(p, q), p)


# --- 4. drafting ---------------------------------------------------------------

def test_draft_tokens_samples_autoregressively_and_hands_back_each_q():
    # u = .5 in Q3[0] -> 1; in Q3[1] -> 1; u = .9 in Q3[1] -> 2; u = .1 in Q3[2] -> 0
    drafted, q_rows = sd.draft_tokens(Q3, [0], 4, ScriptedRng([0.5, 0.5, 0.9, 0.1]))
    assert drafted == [1, 1, 2, 0]
    assert [list(q) for q in q_rows] == [list(Q3[c]) for c in (0, 1, 1, 2)]  # the row each was drawn from


def test_draft_tokens_first_token_follows_q():
    rng = np.random.default_rng(1)
    firsts = [sd.draft_tokens(Q3, [0], 1, rng)[0][0] for _ in range(20_000)]
    assert np.allclose(np.bincount(firsts, minlength=3) / 20_000, Q3[0], atol=0.015)


# --- 5. verification, one scripted round at a time -----------------------------
# With P3, Q3 from ctx 0: draft 1 has p/q = .5/.4 (kept whatever u is);
# after it, draft 2 has p/q = .8/.3 (kept); draft 1 again has p/q = .1/.6 = 1/6.

def rows(*contexts):
    """The q rows a draft from Q3 hands verification, one per drafted position."""
    return [Q3[c] for c in contexts]


def test_all_accepted_gives_k_plus_one_tokens_with_a_bonus_from_the_last_context():
    # bonus drawn from P3[2] = [.6, .2, .2] with u = .7 -> token 1
    # (P3[1] would give 2, Q3[2] would give 2, the residual there would give 0)
    assert sd.verify_round(P3, [0], [1, 2], rows(0, 1), ScriptedRng([0.99, 0.99, 0.7])) == [1, 2, 1]


def test_rejection_replaces_from_the_residual_and_ends_the_round():
    # draft 1 at context 1: u = .5 >= 1/6 rejects it. residual(P3[1], Q3[1]) =
    # norm([0, 0, .5]) = token 2 for any u; p itself with u = .15 would give 1.
    rng = ScriptedRng([0.0, 0.5, 0.15])  # nothing left for the third draft
    assert sd.verify_round(P3, [0], [1, 1, 2], rows(0, 1, 1), rng) == [1, 2]


def test_acceptance_is_strictly_below_the_ratio():
    # draft 1 at context 1 is kept when u < p/q = 1/6, rejected at u = p/q exactly
    ratio = sd.accept_prob(P3[1], Q3[1], 1)
    assert ratio == pytest.approx(1 / 6)
    assert sd.verify_round(P3, [1], [1], rows(1), ScriptedRng([np.nextafter(ratio, 0), 0.7])) == [1, 2]
    assert sd.verify_round(P3, [1], [1], rows(1), ScriptedRng([ratio, 0.7])) == [2]


def test_a_draft_the_target_forbids_is_never_accepted_even_at_u_zero():
    P = np.array([[0.0, 1.0], [0.5, 0.5]])
    assert sd.verify_round(P, [0], [0], [np.array([0.5, 0.5])], ScriptedRng([0.0, 0.0])) == [1]


def test_rejection_at_the_first_draft():
    # draft 0 at context 0: p/q = .2/.4 = .5; u = .6 rejects; residual = norm([0,.1,.1])
    assert sd.verify_round(P3, [0], [0, 1], rows(0, 0), ScriptedRng([0.6, 0.4])) == [1]


def test_verification_uses_the_q_it_is_handed():
    # the same draft 0 after context 0, handed q = [.2, .4, .4] (p/q = 1) is kept,
    # handed Q3[0] (p/q = .5) it is rejected at u = .6
    handed = [np.array([0.2, 0.4, 0.4])]
    assert sd.verify_round(P3, [0], [0], handed, ScriptedRng([0.6, 0.5])) == [0, 1]
    assert sd.verify_round(P3, [0], [0], rows(0), ScriptedRng([0.6, 0.5])) == [2]  # residual [0, .5, .5]


def test_spec_round_drafts_then_verifies_on_one_stream():
    # drafts: u = .5 -> 1, u = .5 -> 1 (from Q3[1]); checks: u = .99 keeps 1 (ratio
    # 1.25), u = .1 keeps 1 at context 1 (1/6 > .1); bonus from P3[1] with u = .5 -> 2
    assert sd.spec_round(P3, Q3, [0], 2, ScriptedRng([0.5, 0.5, 0.99, 0.1, 0.5])) == [1, 1, 2]


def test_plain_decode_is_the_target_alone():
    # u = .5 in P3[0] = [.2, .5, .3] -> 1; in P3[1] = [.1, .1, .8] -> 2
    assert sd.plain_decode(P3, [0], 2, ScriptedRng([0.5, 0.5])) == [1, 2]


def test_strict_matching_by_hand():
    # strict: q seen is one-hot at the draft, so draft 1 at context 0 is kept with
    # p(1) = .5 only (the probabilistic rule keeps it always); rejected at u = .6,
    # then p with 1 removed: [.2, 0, .3] / .5, u = .5 -> 2
    assert np.array_equal(sd.strict_seen(Q3[0], 1), [0, 1, 0])
    assert sd.verify_strict(P3, [0], [1], rows(0), ScriptedRng([0.6, 0.5])) == [2]
    assert sd.verify_round(P3, [0], [1], rows(0), ScriptedRng([0.6, 0.5])) == [1, 2]


# --- 6-8. cost model, TV, MACs ------------------------------------------------

def test_speedup_and_break_even_by_hand():
    assert sd.speedup(3.0, 4, 0.25) == pytest.approx(1.5)  # 3 / (1 + 1)
    assert sd.speedup(1.0, 0, 0.7) == 1.0
    assert sd.break_even_c(3.0, 4) == pytest.approx(0.5)
    assert sd.speedup(3.0, 4, sd.break_even_c(3.0, 4)) == pytest.approx(1.0)


def test_tv_distance_by_hand():
    assert sd.tv_distance([1, 0], [0.5, 0.5]) == 0.5
    assert sd.tv_distance([0.2, 0.8], [0.2, 0.8]) == 0.0
    assert sd.tv_distance([1, 0, 0], [0, 0, 1]) == 1.0


def test_alpha_is_one_minus_tv():
    p, q = P3[0], Q3[0]
    assert np.minimum(p, q).sum() == pytest.approx(1 - sd.tv_distance(p, q))


def test_stationary_of_a_greedy_table_with_two_cycles():
    # 0 -> 1 -> 0 is a cycle, 2 -> 2 a fixed point: a uniform start lands in
    # the cycle 2/3 of the time, split evenly over its two states
    P = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]], float)
    assert np.allclose(sd.stationary(P), [1 / 3, 1 / 3, 1 / 3])
    P = np.array([[0, 1, 0], [1, 0, 0], [1, 0, 0]], float)  # 2 falls into the cycle
    assert np.allclose(sd.stationary(P), [0.5, 0.5, 0])


def test_stationary_distribution_is_invariant():
    P = sd.random_table(5)
    pi = sd.stationary(P)
    assert np.allclose(pi @ P, pi) and pi.sum() == pytest.approx(1) and (pi > 0).all()
    # brute force: the distribution after many steps
    assert np.allclose(np.linalg.matrix_power(P, 200)[0], pi)


def test_pair_alpha_by_hand():
    # both rows identical, so every context has beta = .4 + .2 + .2 = .8
    P = np.array([[0.5, 0.3, 0.2]] * 3)
    Q = np.array([[0.4, 0.2, 0.4]] * 3)
    assert sd.pair_alpha(P, Q) == pytest.approx(0.8)
    assert sd.pair_alpha(P3, P3) == pytest.approx(1.0)
    # rows differ: pi = (5/6, 1/6), beta = (.6, 1), alpha = .5 + 1/6 (not the plain mean .8)
    P = np.array([[0.9, 0.1], [0.5, 0.5]])
    assert sd.pair_alpha(P, np.full((2, 2), 0.5)) == pytest.approx(2 / 3)


def test_macs_per_token_by_hand():
    # 2 layers of (4*4 + 2*2*3 + 3*2*5) = 2 * 58, plus a head of 2*7
    assert sd.macs_per_token(d_model=2, d_ff=5, layers=2, n_ctx=3, vocab=7) == 2 * 58 + 14


def test_llama2_7b_shape_has_6_74e9_parameters():
    assert round(sd.weight_count(4096, 11008, 32, 32000) / 1e9, 2) == 6.74


def test_take_cuts_the_last_round_but_counts_its_accepted_drafts():
    # rounds emit 3 then 3 tokens (2 accepted drafts + 1 each); 4 wanted
    tokens, calls, accepted = sd.take(iter([[1, 2, 3], [4, 5, 6], [7]]), 4)
    assert tokens == [1, 2, 3, 4] and calls == 2 and accepted == 4


def test_a_round_that_emits_nothing_is_an_error_not_an_endless_loop():
    with pytest.raises(ValueError, match="round 2 emitted no token"):
        sd.take(iter([[1, 2], [], [3]]), 5)
