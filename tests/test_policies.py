"""Stage 10, draft lengths that adapt: each policy's exact chain against a
hand-worked case, a brute force, and a simulation through the real stages."""
from itertools import product

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_exact import random_pair

# context-free rows: every draft is kept with beta = min(.75, .25) + min(.25, .75) = 1/2,
# independently of the others
P2 = np.array([[0.75, 0.25]] * 2)
Q2 = np.array([[0.25, 0.75]] * 2)


def test_a_fixed_policy_is_exact_tokens_per_call():
    P, Q = random_pair(3)
    for k in (1, 3, 5):
        tokens, drafts, speed = sd.policy_value(P, Q, sd.fixed_policy(k), 0.1)
        assert tokens == pytest.approx(sd.exact_tokens_per_call(P, Q, k), abs=1e-12)
        assert drafts == k and speed == pytest.approx(tokens / (1 + 0.1 * k))


def test_the_heuristic_chain_on_a_two_token_table_by_hand():
    """With beta = 1/2 everywhere and k capped at 3, k goes 1 -> 3 (all passed,
    1/2) or 1 (1/2); 2 -> 3 (1/4) or 1 (3/4); 3 -> 3 (1/8) or 2 (7/8). The
    stationary distribution solves pi1 = pi1/2 + 3 pi2/4, pi2 = 7 pi3/8:
    pi = (21, 14, 16) / 51. A round of k emits 1 + 1/2 + ... + (1/2)^k tokens
    (1.5, 1.75, 1.875), so tokens per call = (21 * 1.5 + 14 * 1.75 + 16 * 1.875)
    / 51 = 86/51, and drafts per round (21 + 28 + 48) / 51 = 97/51."""
    tokens, drafts, speed = sd.policy_value(P2, Q2, sd.heuristic_policy(start=1, k_max=3), c=0.2)
    assert tokens == pytest.approx(86 / 51, abs=1e-12) and drafts == pytest.approx(97 / 51, abs=1e-12)
    assert speed == pytest.approx((86 / 51) / (1 + 0.2 * 97 / 51), abs=1e-12)


def test_the_heuristic_step_by_hand():
    policy = sd.heuristic_policy(start=5, k_max=8)
    assert policy.step(5, 5) == 7 and policy.step(7, 7) == 8  # +2, capped
    assert policy.step(5, 2) == 4 and policy.step(1, 0) == 1  # -1, never below 1


def test_k_stays_at_its_cap_when_every_draft_passes():
    P, _ = random_pair(4)
    tokens, drafts, _ = sd.policy_value(P, P, sd.heuristic_policy(start=1, k_max=6), 0.1)
    assert tokens == pytest.approx(7) and drafts == pytest.approx(6)
    tokens, drafts, _ = sd.policy_value(P, P, sd.tiered_policy(), 0.1)
    assert tokens == pytest.approx(8) and drafts == pytest.approx(7)  # the top tier, 7


def test_the_tiered_step_by_hand():
    policy = sd.tiered_policy(tiers=(1, 3, 5, 7), window=2)
    # average of 3 and 3 is 3 > 3 - 0.5: up from tier 3 to 5, and not past 5 - 0.5
    assert policy.step((1, (3,)), 3) == (2, (3,))
    # average 0 <= 1 - 0.5 - 0.25: down from 3 to 1
    assert policy.step((1, (0,)), 0) == (0, (0,))
    # average 2 <= 3 - 0.5 - 0.25 from tier 5: down to 3, and no further (2 > 0.25)
    assert policy.step((2, (1,)), 3) == (1, (3,))
    assert policy.k_of((3, (0,))) == 7


def test_confidence_stop_edge_cases():
    P, Q = random_pair(5)
    # a threshold of 0 never stops drafting: k_max drafts, the fixed policy's value
    assert sd.confidence_value(P, Q, 0.0, 4, 0.1)[:2] == pytest.approx(sd.policy_value(P, Q, sd.fixed_policy(4), 0.1)[:2])
    # a threshold above every q stops after the first draft
    assert sd.confidence_value(P, Q, 1.01, 4, 0.1)[:2] == pytest.approx(sd.policy_value(P, Q, sd.fixed_policy(1), 0.1)[:2])


def test_confidence_stop_by_hand():
    # context-free, q = (.25, .75), threshold .5: a draft of token 0 (q .25) stops
    # drafting, token 1 (q .75) goes on; k_max 2. Draft calls: 1 + P(first is 1) = 1.75.
    # Tokens: the first draft is kept with min(1, p/q): token 0 always (.75/.25), token
    # 1 with 1/3; kept 0 (prob .25) then stops: bonus, 2 tokens. Kept 1 (prob .75 * 1/3
    # = .25) then a second draft: kept with beta = 1/2, so 2 or 3 tokens. Else 1 token.
    # E = .25 * 2 + .25 * (2 * .5 + 3 * .5) + .5 * 1 = 1.625
    tokens, drafts, _ = sd.confidence_value(P2, Q2, 0.5, 2, 0.1)
    assert tokens == pytest.approx(1.625) and drafts == pytest.approx(1.75)


@pytest.mark.parametrize("seed", [6, 7])
def test_the_per_context_oracle_against_a_brute_force_over_every_choice(seed):
    rng = np.random.default_rng(seed)
    P, Q = rng.dirichlet(np.ones(3) * 0.8, size=3), rng.dirichlet(np.ones(3) * 0.8, size=3)
    c, k_max = 0.15, 4
    ends = [sd.round_table(P, Q, k) for k in range(1, k_max + 1)]
    best = 0.0
    for ks in product(range(1, k_max + 1), repeat=3):  # every k for every context
        T = np.array([ends[k - 1].sum(axis=1)[d] for d, k in enumerate(ks)])
        tokens = np.array([sd.round_tokens(ends[k - 1])[d] for d, k in enumerate(ks)])
        pi = sd.stationary(T)
        best = max(best, (pi @ tokens) / (pi @ (1 + c * np.array(ks))))
    speed, ks = sd.best_per_context(P, Q, c, k_max)
    assert speed == pytest.approx(best, abs=1e-12)
    fixed = max(sd.policy_value(P, Q, sd.fixed_policy(k), c)[2] for k in range(1, k_max + 1))
    assert speed >= fixed - 1e-12


def test_the_oracle_is_the_best_fixed_k_when_contexts_do_not_differ():
    speed, ks = sd.best_per_context(P2, Q2, 0.1, k_max=8)
    assert ks[0] == ks[1] and speed == pytest.approx(sd.best_k(0.5, 0.1, 8)[1], abs=1e-12)


@pytest.mark.parametrize("policy, threshold", [(sd.heuristic_policy(), None), (sd.tiered_policy(), None),
                                               (None, 0.3)])
def test_each_policy_exact_against_its_simulation(policy, threshold):
    P, Q = sd.TARGET, sd.MIDDLING
    value = (sd.policy_value(P, Q, policy, 0.1) if policy else sd.confidence_value(P, Q, threshold, 12, 0.1))
    run = sd.run_policy(P, Q, 2000, seed=1, policy=policy, threshold=threshold, k_max=12)
    for column, exact in ((0, value[0]), (1, value[1])):
        mean, se = sd.mean_se(run[:, column])
        assert abs(mean - exact) < 4 * se


def test_draft_confident_stops_after_an_unconfident_token():
    # Q2 after any context: u = .1 -> token 0 (q .25 < .5): stop after it
    from helpers import ScriptedRng
    assert sd.draft_confident(Q2, [0], 5, 0.5, ScriptedRng([0.1]))[0] == [0]
    # u = .5 -> token 1 (q .75): go on; then .1 -> 0: stop
    assert sd.draft_confident(Q2, [0], 5, 0.5, ScriptedRng([0.5, 0.1]))[0] == [1, 0]
    assert sd.draft_confident(Q2, [0], 2, 0.5, ScriptedRng([0.5, 0.5]))[0] == [1, 1]  # k_max
