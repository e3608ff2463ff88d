"""The paper's closed forms, each against an independent computation."""
import numpy as np
import pytest

import speculative_decoding_from_scratch as sd


def geometric(alpha, k):
    """Eq. 1 written as the sum it is: 1 + alpha + ... + alpha^k."""
    return sum(alpha**i for i in range(k + 1))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.75, 0.999, 1.0])
@pytest.mark.parametrize("k", [1, 4, 10])
def test_expected_tokens_is_the_geometric_sum(alpha, k):
    assert sd.expected_tokens(alpha, k) == pytest.approx(geometric(alpha, k))


def test_expected_tokens_facts_example():
    # alpha = .75, k = 4: 3.05 tokens per call, not the 4 that 1 + k*alpha claims
    assert round(sd.expected_tokens(0.75, 4), 2) == 3.05


def constant_alpha_pair():
    """Every row identical: beta is the same in every context, so eq. 1 is exact."""
    p, q = np.array([0.5, 0.3, 0.1, 0.1]), np.array([0.2, 0.3, 0.4, 0.1])
    return np.tile(p, (4, 1)), np.tile(q, (4, 1)), float(np.minimum(p, q).sum())  # beta = .6


def test_expected_tokens_matches_a_simulation_where_it_is_exact():
    P, Q, beta = constant_alpha_pair()
    m = sd.measure(P, Q, 3, 4000, seed=7)
    assert abs(m.per_call - sd.expected_tokens(beta, 3)) < 4 * m.se  # the batch-means standard error
    assert m.rate == pytest.approx(beta, abs=0.02)


def test_exact_tokens_per_call_reduces_to_eq1_when_alpha_is_constant():
    P, Q, beta = constant_alpha_pair()
    for k in (1, 2, 5):
        assert sd.exact_tokens_per_call(P, Q, k) == pytest.approx(sd.expected_tokens(beta, k), abs=1e-12)


def test_exact_tokens_per_call_extremes():
    P = sd.random_table(30)
    assert sd.exact_tokens_per_call(P, P, 4) == pytest.approx(5.0)
    one_hot = sd.temper(P, 0)
    assert sd.exact_tokens_per_call(one_hot, (1 - one_hot) / 5, 4) == pytest.approx(1.0)


@pytest.mark.parametrize("seeds, sharpness, weight, k, n_rounds", [
    ((31, 32), 2.0, 0.5, 1, 4_000),
    ((31, 32), 2.0, 0.5, 4, 4_000),
    ((31, 32), 2.0, 0.0, 3, 4_000),
    # peaky and unrelated: rounds start far from the target's typical contexts,
    # so getting the chain of round starts wrong moves the answer by 0.04
    # (4 standard errors here are 0.029)
    ((9, 10), 4.0, 0.0, 2, 10_000),
])
def test_exact_tokens_per_call_matches_a_long_simulation(seeds, sharpness, weight, k, n_rounds):
    P = sd.random_table(seeds[0], sharpness)
    Q = sd.blend(P, sd.random_table(seeds[1], sharpness), weight)
    measured = sd.measure(P, Q, k, n_rounds, seed=k)
    exact = sd.exact_tokens_per_call(P, Q, k)
    # the batch-means standard error: the rounds chain, so their spread alone would understate it
    assert abs(measured.per_call - exact) < 4 * measured.se


def test_eq1_is_only_an_approximation_when_rows_differ():
    # the same peaky pair: eq. 1 with the paper's alpha is off by 0.03 tokens
    P, Q = sd.random_table(9, 4.0), sd.random_table(10, 4.0)
    exact, eq1 = sd.exact_tokens_per_call(P, Q, 2), sd.expected_tokens(sd.pair_alpha(P, Q), 2)
    assert abs(exact - eq1) > 0.02


def test_operations_factor_by_hand():
    # alpha .5, k 1, c_hat 0: the target scores 2 positions for 1.5 tokens
    assert sd.operations_factor(0.5, 1, 0.0) == pytest.approx(2 / 1.5)
    # a perfect draft: k+1 positions and k draft steps for k+1 tokens
    assert sd.operations_factor(1.0, 3, 0.1) == pytest.approx((0.3 + 4) / 4)


@pytest.mark.parametrize("alpha, k, ops, speed", [
    (0.6, 2, 1.53, 1.96), (0.7, 3, 1.58, 2.53), (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69), (0.9, 2, 1.11, 2.71), (0.9, 10, 1.60, 6.86),
])
def test_paper_table_1(alpha, k, ops, speed):
    assert round(sd.operations_factor(alpha, k, 0), 2) == ops
    assert round(sd.speedup(sd.expected_tokens(alpha, k), k, 0), 2) == speed


@pytest.mark.parametrize("alpha", [i / 10 for i in range(11)])
@pytest.mark.parametrize("c", [0.0, 0.02, 0.1, 0.3, 0.6, 1.0])
def test_best_k_against_brute_force(alpha, c):
    speeds = {k: geometric(alpha, k) / (1 + k * c) for k in range(1, 33)}
    k_bf = max(speeds, key=speeds.get)
    expected = (k_bf, speeds[k_bf]) if speeds[k_bf] > 1 else (0, 1.0)
    k, s = sd.best_k(alpha, c)
    assert s == pytest.approx(expected[1], abs=1e-12)
    if k:  # a k whose speedup ties the best to rounding (alpha^k ~ 1e-16) is fine
        assert speeds[k] == pytest.approx(expected[1], abs=1e-12)
    # Corollary 3.9: a gain exactly when alpha > c, and at least (1 + alpha)/(1 + c)
    assert (k > 0) == (alpha > c)
    if k:
        assert s >= (1 + alpha) / (1 + c) - 1e-12


def test_best_k_respects_k_max():
    assert sd.best_k(1.0, 0.01, k_max=5) == (5, pytest.approx(6 / 1.05))


def test_fastest_k_by_hand():
    assert sd.fastest_k([1.2, 1.5, 1.4]) == (2, 1.5)
    assert sd.fastest_k([0.9, 0.9, 0.9]) == (0, 1.0)
    assert sd.fastest_k([1.5, 1.5]) == (1, 1.5)  # a tie goes to the smaller k


def test_solve_increasing_for_reals_and_integers():
    assert sd.solve_increasing(lambda x: x * x, 0.25, 0.0, 1.0) == pytest.approx(0.5, abs=1e-12)
    assert sd.solve_increasing(lambda x: x, 3.0, 0.0, 10.0) == pytest.approx(3.0, abs=1e-12)
    # the smallest integer in [lo, hi] where f reaches the target
    assert sd.solve_increasing(lambda b: b >= 37, 1, 0, 64, integer=True) == 37
    assert sd.solve_increasing(lambda b: b >= 64, 1, 32, 64, integer=True) == 64
