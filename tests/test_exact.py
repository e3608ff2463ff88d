"""The exact enumerations and the goodness-of-fit test, each against something
independent: a hand-worked value, a closed form, a simulation."""
import math

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_stages import P3, Q3


def random_pair(seed, n=6):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(n) * 0.7, size=n), rng.dirichlet(np.ones(n) * 0.7, size=n)


def sampled_joint(module, P, Q, ctx, n, k, runs, seed, verify=None):
    """counts of the first n tokens, run through a module's own spec_generate."""
    rng, counts = np.random.default_rng(seed), np.zeros((len(P),) * n)
    for _ in range(runs):
        tokens = module.spec_generate(P, Q, [ctx], n, k, rng, verify or module.verify_round)[0]
        counts[tuple(tokens)] += 1
    return counts


def fit(counts, probs):
    return sd.chi2_sf(*sd.pearson(counts, probs))


# --- the target's own joint ---------------------------------------------------

def test_target_first_tokens_by_hand():
    # from context 0: p(1 | 0) p(2 | 1) = .5 * .8
    joint = sd.target_first_tokens(P3, 0, 2)
    assert joint.shape == (3, 3) and joint[1, 2] == pytest.approx(0.4)
    three = sd.target_first_tokens(P3, 0, 3)
    assert three[1, 2, 0] == pytest.approx(0.5 * 0.8 * 0.6) and three.sum() == pytest.approx(1)


# --- kept_and_replaced: one position, weighed through the stages ------------------

def test_kept_and_replaced_by_hand():
    # P3[0] = [.2, .5, .3] against Q3[0] = [.4, .4, .2]: draft 0 kept with .5, 1 and 2
    # always; a rejection (mass .4 * .5 = .2) draws from norm(max(0, p - q)) = [0, .5, .5]
    A, R = sd.kept_and_replaced(P3, Q3)
    assert np.allclose(A[0], [0.2, 0.4, 0.2]) and np.allclose(R[0], [0, 0.1, 0.1])
    assert np.allclose(A.sum(axis=1) + R.sum(axis=1), 1)  # every draft is kept or replaced


def test_kept_and_replaced_for_strict_matching_and_a_draft_that_samples_elsewhere():
    # strict: keep x with p(x): A[0] = q * p = [.08, .2, .06]
    A, _ = sd.kept_and_replaced(P3, Q3, seen=sd.strict_seen)
    assert np.allclose(A[0], Q3[0] * P3[0])
    # drafts drawn from D but checked against Q: kept mass D(x) min(1, p/q)
    D = sd.temper(Q3, 0)  # [1, 0, 0] after context 0
    A, R = sd.kept_and_replaced(P3, Q3, draft_from=D)
    assert np.allclose(A[0], [0.5, 0, 0]) and np.allclose(R[0], [0, 0.25, 0.25])


# --- exact_first_tokens ---------------------------------------------------------

def test_exact_first_tokens_of_one_round_by_hand():
    # P3, Q3 from context 0, k = 1, first token only: token 0: .4 * .5 = .2;
    # token 1: .4 + .4 * .5 * .5 = .5; token 2: .2 + .1 = .3
    assert np.allclose(sd.exact_first_tokens(P3, Q3, 0, 1, 1), [0.2, 0.5, 0.3])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_correct_rule_is_the_target_exactly(seed, k):
    P, Q = random_pair(seed)
    n = 3 if k <= 2 else 2
    exact = sd.exact_first_tokens(P, Q, seed % 6, n, k)
    assert sd.tv_distance(exact, sd.target_first_tokens(P, seed % 6, n)) < 1e-12


@pytest.mark.parametrize("how", [{}, {"seen": sd.strict_seen}, {"draft_from": "hot"}])
@pytest.mark.parametrize("n, k", [(1, 3), (3, 1), (4, 2)])
def test_every_enumerated_joint_sums_to_one(how, n, k):
    P, Q = random_pair(7)
    how = {"draft_from": sd.temper(Q, 2.0)} if how.get("draft_from") == "hot" else how
    assert sd.exact_first_tokens(P, Q, 1, n, k, **how).sum() == pytest.approx(1, abs=1e-12)
    assert sd.exact_block_first_tokens(P, Q, 1, min(n, 3), min(k, 2)).sum() == pytest.approx(1, abs=1e-12)


@pytest.mark.parametrize("bug", ["argmax", "no_resample", "uniform_q"])
def test_each_stage_bug_has_a_real_exact_bias(bug):
    P, Q = random_pair(1)
    tv = sd.tv_distance(sd.bugged(bug).exact_first_tokens(P, Q, 0, 2, 2), sd.target_first_tokens(P, 0, 2))
    assert tv > 0.01


@pytest.mark.parametrize("bug", ["no_resample", "uniform_q"])
def test_a_bugs_exact_joint_past_one_round_matches_its_own_sample(bug):
    # n = 3 tokens with k = 1: the joint spans rounds, so a round that does not
    # hand its last token to the next, or a residual read from the wrong row,
    # moves this exact value away from the bug's own sample
    P, Q = random_pair(2, n=3)
    module = sd.bugged(bug)
    exact = module.exact_first_tokens(P, Q, 2, 3, 1)
    assert fit(sampled_joint(module, P, Q, 2, 3, 1, 3000, seed=3), exact) > 1e-4


def test_exact_first_tokens_past_one_round_matches_a_sample():
    P, Q = random_pair(4, n=3)
    exact = sd.exact_first_tokens(P, Q, 0, 4, 2)
    assert fit(sampled_joint(sd, P, Q, 0, 4, 2, 3000, seed=5), exact) > 1e-4


def test_exact_first_tokens_with_a_draft_that_samples_elsewhere_matches_its_sample():
    # drafting from D but verification handed Q's rows (demo 3's bug): exact only when D == Q
    P, Q = random_pair(5, n=3)
    D = sd.temper(Q, 0.4)
    truth = sd.target_first_tokens(P, 0, 3)
    assert sd.tv_distance(sd.exact_first_tokens(P, Q, 0, 3, 2, draft_from=Q), truth) < 1e-12
    exact = sd.exact_first_tokens(P, Q, 0, 3, 2, draft_from=D)
    assert sd.tv_distance(exact, truth) > 0.01
    counts = sampled_joint(sd, P, D, 0, 3, 2, 3000, seed=6, verify=sd.hand_q_rows(Q))
    assert fit(counts, exact) > 1e-4 and fit(counts, truth) < 1e-6


def test_exact_first_tokens_follows_an_edit_of_the_residual():
    P, Q = random_pair(5)
    edited = sd.edited((("residual", "return d / total if total > 0 else p", "return p"),))
    truth = sd.target_first_tokens(P, 0, 2)
    assert sd.tv_distance(edited.exact_first_tokens(P, Q, 0, 2, 2), truth) > 0.01
    assert sd.tv_distance(sd.exact_first_tokens(P, Q, 0, 2, 2), truth) < 1e-12  # the script itself is untouched


def test_continue_is_seen_by_the_sample_and_not_by_the_enumeration():
    # an edit of verify_round's own lines: the enumeration weighs the correct loop
    P, Q = random_pair(2)
    module, truth = sd.bugged("continue"), sd.target_first_tokens(P, 4, 2)
    assert sd.tv_distance(module.exact_first_tokens(P, Q, 4, 2, 2), truth) < 1e-12
    assert fit(sampled_joint(module, P, Q, 4, 2, 2, 1500, seed=3), truth) < 1e-6


# --- exact tokens per call and the round table --------------------------------------

def test_round_table_by_hand():
    # k = 1 from context 0 with P3, Q3: rejected (a = 0) with mass .2, y from [0, .5, .5];
    # kept x (A[0] = [.2, .4, .2]), then the bonus y ~ P3[x]
    ends = sd.round_table(P3, Q3, 1)
    assert np.allclose(ends[0, 0], [0, 0.1, 0.1])
    assert np.allclose(ends[0, 1], np.array([0.2, 0.4, 0.2]) @ P3)
    assert np.allclose(ends.sum(axis=(1, 2)), 1)
    assert np.allclose(sd.round_tokens(ends), 1 + ends[:, 1].sum(axis=1))


def test_exact_tokens_per_call_follows_an_edit_of_accept_prob():
    P, Q = random_pair(8)
    edited = sd.edited((("accept_prob", "return min(1.0, float(p[x] / q[x]))", "return min(1.0, float(q[x] / p[x]))"),))
    assert abs(edited.exact_tokens_per_call(P, Q, 3) - sd.exact_tokens_per_call(P, Q, 3)) > 0.05


# --- Pearson's chi-square and its p-value ---------------------------------------

def test_pearson_by_hand():
    assert sd.pearson([3, 7], [0.5, 0.5]) == (pytest.approx(1.6), 1)
    # cells expected below 5 are pooled: expected 50, 40, 6, 4 of 100 -> the
    # last two pooled into one cell of 10 (observed 9 + 2 = 11)
    stat, dof = sd.pearson([50, 39, 9, 2], [0.5, 0.4, 0.06, 0.04])
    assert dof == 3 and stat == pytest.approx(0 + 1 / 40 + 3**2 / 6 + 2**2 / 4)


def test_pearson_pools_by_expected_counts_not_observed_ones():
    # cell 0 is expected 10 times of 100 and observed 0: it stays its own cell.
    # Pooling cells OBSERVED fewer than 5 times would fold it away and hide the
    # misfit: by hand (0 - 10)^2 / 10 + 2 * (50 - 45)^2 / 45 = 10 + 10/9, 2 dof
    stat, dof = sd.pearson([0, 50, 50], [0.1, 0.45, 0.45])
    assert dof == 2 and stat == pytest.approx(10 + 10 / 9)
    # and the other way: cells expected 1 and 1 (observed 9 and 0) pool into one
    # cell expected 2, observed 9: 3^2/49 + 4^2/49 + 7^2/2, 2 dof
    stat, dof = sd.pearson([9, 0, 46, 45], [0.01, 0.01, 0.49, 0.49])
    assert dof == 2 and stat == pytest.approx(25 / 49 + 49 / 2)


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


def test_gamma_fraction_is_the_upper_tail_above_a_plus_one():
    # Q(1, x) = exp(-x) = exp(-x) x^1 / Gamma(1) * fraction -> 1 / x
    assert sd.gamma_fraction(1.0, 5.0) == pytest.approx(1 / 5)
    # Q(2, x) = exp(-x) (1 + x) = exp(-x) x^2 / Gamma(2) * fraction -> (1 + x) / x^2
    assert sd.gamma_fraction(2.0, 6.0) == pytest.approx(7 / 36)


def test_fit_p_value_adds_statistics_and_dofs():
    assert sd.fit_p_value([(1.0, 1), (1.0, 1)]) == pytest.approx(math.exp(-1))


def test_transition_p_value_by_hand():
    P = np.array([[0.5, 0.5], [0.5, 0.5]])
    # transitions 0->0, 0->1, 1->0, 0->0: rows [2, 1] and [1, 0]; every cell is
    # expected below 5 times, so each row pools into one cell: statistic 0
    assert sd.transition_p_value([0, 0, 1, 0, 0], P) == 1.0
    assert sd.transition_p_value([0] * 50 + [1] * 50, P) < 1e-12


def test_verdict_texts():
    assert sd.p_text(0.4321) == "0.43" and sd.p_text(0.004) == "0.004" and sd.p_text(0.0004) == "4e-04"
    assert sd.p_text(1e-13) == "< 1e-12"
    # below the rounding line one stable token, whatever the digits; above it the bias itself
    assert sd.exact_text(1e-16) == sd.exact_text(1.5e-16) == sd.exact_text(9.99e-10) == "< 1e-9"
    assert sd.exact_text(3.5e-4) == "3.5e-04" and sd.exact_text(0.01234) == "0.0123"
    assert sd.plural(1, "round") == "1 round" and sd.plural(2, "round") == "2 rounds"
    assert sd.plural(1, "entry", "entries") == "1 entry" and sd.plural(1000, "run") == "1,000 runs"
    assert sd.about(1974584) == "2.0 million" and sd.about(245.7) == "250"


@pytest.mark.parametrize("p_value, tv, verdict", [
    (0.5, 1e-16, "the target"), (1e-9, 0.2, "NOT the target"), (0.001, 9.9e-10, "the target"),
    (1e-9, 1e-16, "NOT (fit only)"), (0.5, 1e-3, "NOT (exact only)"),
])
def test_both_checks(p_value, tv, verdict):
    assert sd.both_checks(p_value, tv) == verdict


def test_fits_exact_and_mean_se():
    assert sd.fits_exact(2.80, 0.02, 2.77) and not sd.fits_exact(2.90, 0.02, 2.77)
    assert sd.fits_exact(5.0, 0.0, 5.0) and not sd.fits_exact(4.0, 0.0, 5.0)
    # 20 batches of 5: batch means 0..19 -> their sd / sqrt(20)
    mean, se = sd.mean_se(np.repeat(np.arange(20.0), 5))
    assert mean == pytest.approx(9.5) and se == pytest.approx(np.std(np.arange(20.0), ddof=1) / np.sqrt(20))


def test_samples_to_see_by_hand():
    # truth [.5, .5], exact [.6, .4]: delta^2 = 2 * .01 / .5 = .04, one dof; the
    # p = .001 critical value is 10.828, so about (10.828 - 1) / .04 = 245.7 runs
    assert sd.samples_to_see(np.array([0.6, 0.4]), np.array([0.5, 0.5])) == pytest.approx(245.7, abs=0.1)
    assert sd.samples_to_see(np.array([0.5, 0.5]), np.array([0.5, 0.5])) == math.inf


def test_a_replicated_fit_fails_only_when_a_fresh_sample_fails_too():
    seen = []
    def fit_of(ps):
        return lambda seed: seen.append(seed) or ps[seed]
    assert sd.replicated(fit_of({7: 0.3}), 7) == 0.3 and seen == [7]  # a pass needs no second sample
    assert sd.replicated(fit_of({7: 1e-4, 1007: 0.5}), 7) == 0.5  # a fluke: the fresh sample passes
    assert sd.replicated(fit_of({7: 1e-9, 1007: 1e-5}), 7) == 1e-5 < sd.P_REJECT  # a bias fails both
