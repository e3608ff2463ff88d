"""The exact first-token distribution and the goodness-of-fit test, each against
something independent: a hand-worked value, a closed form, a simulation."""
import math

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_stages import P3, Q3


def random_pair(seed, n=6):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(n) * 0.7, size=n), rng.dirichlet(np.ones(n) * 0.7, size=n)


# --- the target's own joint ---------------------------------------------------

def test_target_first_tokens_by_hand():
    # from context 0: p(1 | 0) p(2 | 1) = .5 * .8
    joint = sd.target_first_tokens(P3, 0, 2)
    assert joint.shape == (3, 3) and joint[1, 2] == pytest.approx(0.4)
    three = sd.target_first_tokens(P3, 0, 3)
    assert three[1, 2, 0] == pytest.approx(0.5 * 0.8 * 0.6) and three.sum() == pytest.approx(1)
    assert np.array_equal(sd.target_first_tokens(P3, 2, 1), P3[2])


# --- exact_first_tokens ---------------------------------------------------------

def test_exact_first_tokens_of_one_round_by_hand():
    # P3, Q3 from context 0, k = 1, first token only: draft 1 (q .4) is kept
    # (p/q > 1); draft 0 (q .4) is kept with .5, else replaced from
    # norm(max(0, p - q)) = [0, .5, .5]; draft 2 (q .2): p/q > 1, kept.
    # token 0: .4 * .5 = .2; token 1: .4 + .4 * .5 * .5 = .5; token 2: .2 + .1 = .3
    assert np.allclose(sd.exact_first_tokens(P3, Q3, 0, 1, 1), [0.2, 0.5, 0.3])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_correct_rule_is_the_target_exactly(seed, k):
    P, Q = random_pair(seed)
    n = 3 if k <= 2 else 2
    tv = sd.tv_distance(sd.exact_first_tokens(P, Q, seed % 6, n, k), sd.target_first_tokens(P, seed % 6, n))
    assert tv < 1e-12


@pytest.mark.parametrize("rule", sd.RULES[1:])
def test_each_broken_rule_has_a_real_bias(rule):
    P, Q = random_pair(1)
    tv = sd.tv_distance(sd.exact_first_tokens(P, Q, 0, 2, 2, rule), sd.target_first_tokens(P, 0, 2))
    assert tv > 0.01


def test_perfect_draft_and_zero_rows_are_handled():
    P = sd.random_table(3)
    assert sd.tv_distance(sd.exact_first_tokens(P, P, 1, 3, 4), sd.target_first_tokens(P, 1, 3)) < 1e-12
    # a draft with zeros: only the tokens it can propose are enumerated
    Q = sd.temper(sd.random_table(4), 0)
    assert sd.exact_first_tokens(P, Q, 2, 2, 3).sum() == pytest.approx(1)


@pytest.mark.parametrize("rule", sd.RULES)
def test_exact_first_tokens_agrees_with_verify_round_for_every_rule(rule):
    # the exact enumeration mirrors verify_round's cases: a sample drawn through
    # the real spec_generate must fit it, rule by rule
    P, Q = random_pair(2)
    rng, counts = np.random.default_rng(3), np.zeros((6, 6))
    for _ in range(1200):
        x1, x2 = sd.spec_generate(P, Q, 4, 2, 2, rng, rule)[0]
        counts[x1, x2] += 1
    assert sd.chi2_sf(*sd.pearson(counts, sd.exact_first_tokens(P, Q, 4, 2, 2, rule))) > 1e-4


def test_exact_first_tokens_with_a_draft_that_samples_elsewhere():
    # drafting from D but checking against Q: exact only when D == Q
    P, Q = random_pair(4)
    D = sd.temper(Q, 0.5)
    truth = sd.target_first_tokens(P, 0, 2)
    assert sd.tv_distance(sd.exact_first_tokens(P, Q, 0, 2, 2, draft_from=Q), truth) < 1e-12
    assert sd.tv_distance(sd.exact_first_tokens(P, Q, 0, 2, 2, draft_from=D), truth) > 0.01


def test_exact_first_tokens_moves_when_the_residual_is_broken(monkeypatch):
    P, Q = random_pair(5)
    truth = sd.target_first_tokens(P, 0, 2)
    monkeypatch.setattr(sd, "residual", lambda p, q: p)
    assert sd.tv_distance(sd.exact_first_tokens(P, Q, 0, 2, 2), truth) > 0.01


def test_exact_first_tokens_rejects_an_unknown_rule():
    with pytest.raises(ValueError, match="unknown rule"):
        sd.exact_first_tokens(P3, Q3, 0, 2, 2, rule="exact")


# --- Pearson's chi-square and its p-value ---------------------------------------

def test_pearson_by_hand():
    assert sd.pearson([3, 7], [0.5, 0.5]) == (pytest.approx(1.6), 1)
    # cells expected below 5 are pooled: expected 50, 40, 6, 4 of 100 -> the
    # last two pooled into one cell of 10 (observed 9 + 2 = 11)
    stat, dof = sd.pearson([50, 39, 9, 2], [0.5, 0.4, 0.06, 0.04])
    assert dof == 3 and stat == pytest.approx(0 + 1 / 40 + 3**2 / 6 + 2**2 / 4)
    stat, dof = sd.pearson([40, 39, 10, 11], [0.5, 0.4, 0.06, 0.04], min_expected=20)
    assert dof == 2 and stat == pytest.approx(100 / 50 + 1 / 40 + 11**2 / 10)


def test_pearson_a_count_the_target_forbids_is_an_infinite_misfit():
    stat, _ = sd.pearson([5, 1], [1.0, 0.0])
    assert stat == math.inf and sd.chi2_sf(stat, 1) == 0.0


@pytest.mark.parametrize("x", [0.01, 0.5, 1.0, 3.0, 10.0, 40.0])
def test_chi2_sf_against_closed_forms(x):
    assert sd.chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10)
    assert sd.chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-10)
    assert sd.chi2_sf(x, 4) == pytest.approx(math.exp(-x / 2) * (1 + x / 2), rel=1e-10)
    assert sd.chi2_sf(x, 6) == pytest.approx(math.exp(-x / 2) * (1 + x / 2 + x * x / 8), rel=1e-10)


def test_chi2_sf_known_quantiles_and_edges():
    assert sd.chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)
    assert sd.chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, rel=1e-9)  # both series sides
    assert sd.chi2_sf(0, 5) == 1.0 and sd.chi2_sf(math.inf, 5) == 0.0


def test_chi2_sf_is_uniform_under_the_null():
    # p-values of a correct sample are uniform: about 1% of them below 0.01
    rng = np.random.default_rng(0)
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    ps = [sd.chi2_sf(*sd.pearson(rng.multinomial(500, probs), probs)) for _ in range(2000)]
    assert 0.005 < np.mean(np.array(ps) < 0.01) < 0.02
    assert 0.45 < np.mean(np.array(ps) < 0.5) < 0.55


def test_fit_p_value_adds_statistics_and_dofs():
    assert sd.fit_p_value([(1.0, 1), (1.0, 1)]) == pytest.approx(math.exp(-1))


def test_transition_p_value_by_hand():
    P = np.array([[0.5, 0.5], [0.5, 0.5]])
    # transitions 0->0, 0->1, 1->0, 0->0: rows [2, 1] and [1, 0]; every cell is
    # expected below 5 times, so each row pools into one cell: statistic 0
    assert sd.transition_p_value([0, 0, 1, 0, 0], P) == 1.0
    tokens = [0] * 50 + [1] * 50
    assert sd.transition_p_value(tokens, P) < 1e-12


def test_verdict_texts():
    assert sd.p_text(0.4321) == "p = 0.43" and sd.p_text(0.004) == "p = 4e-03"
    assert sd.p_text(1e-13) == "p < 1e-12"
    assert sd.fit_verdict(0.5) == "consistent with the target (p = 0.50)"
    assert sd.fit_verdict(1e-5) == "NOT the target (p = 1e-05)"
    assert sd.exact_text(1e-16) == "1.0e-16" and sd.exact_text(0.01234) == "0.0123"


@pytest.mark.parametrize("p_value, tv, verdict", [
    (0.5, 1e-16, "the target"), (1e-9, 0.2, "NOT the target"),
    (1e-9, 1e-16, "NOT (sampled)"), (0.5, 1e-3, "NOT (exact)"),
])
def test_both_checks(p_value, tv, verdict):
    assert sd.both_checks(p_value, tv) == verdict


def test_fits_exact():
    assert sd.fits_exact(2.80, 0.02, 2.77) and not sd.fits_exact(2.90, 0.02, 2.77)
    assert sd.fits_exact(5.0, 0.0, 5.0) and not sd.fits_exact(4.0, 0.0, 5.0)


def test_position_weights_by_hand():
    # P3[0] = [.2, .5, .3] against Q3[0] = [.4, .4, .2]: draft 0 kept with .5,
    # 1 and 2 always; a rejection draws from norm(max(0, p - q)) = [0, .5, .5]
    weights = sd.position_weights(P3[0], Q3[0], Q3[0])
    assert [(x, d, a) for x, d, a, _ in weights] == [(0, 0.4, 0.5), (1, 0.4, 1.0), (2, 0.2, 1.0)]
    assert np.allclose(weights[0][3], [0, 0.5, 0.5])
    greedy = sd.position_weights(P3[0], Q3[0], Q3[0], "greedy")
    assert [a for _, _, a, _ in greedy] == [0.0, 1.0, 0.0]  # only p's argmax is kept
