"""Block verification (stage 5c): scripted rounds worked by hand, the paper's
example, exactness by enumeration, the two breakages, and the gain.

Every exact check here uses tables whose rows differ from context to context,
so the distribution at position i+1 is not the one at position i. A verifier
that reads the wrong position passes every check on a table that repeats one
row, which is what most upstream distribution tests use; the last test shows
it. Write your own checks on tables that differ by position."""
import math

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import ScriptedRng
from test_demos import printed
from test_exact import fit, random_pair, sampled_joint
from test_stages import P3, Q3

# A pair where the weighted and the token-wise residual differ. From context 2,
# drafting 0: p_1 = min(1, .25 / .5) = .5. At context 0, p = [.5, .3, .2] and
# q = [.2, .2, .6]: Z_1 = max(0, .25 - .2) = .05, h_1 = .05 / (.05 + .5) = 1/11.
P_W = np.array([[0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3], [0.25, 0.25, 0.5]])
Q_W = np.array([[0.2, 0.2, 0.6], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.25, 0.25]])


def test_block_residual_by_hand():
    # .5 * [.5, .3, .2] - [.2, .2, .6] = [.05, -.05, -.5] -> [1, 0, 0];
    # at weight 1 it is the token-wise residual [.3, .1, 0] / .4
    assert np.allclose(sd.block_residual(0.5, P_W[0], Q_W[0]), [1, 0, 0])
    assert np.allclose(sd.block_residual(1.0, P_W[0], Q_W[0]), [0.75, 0.25, 0])


def test_block_threshold_by_hand():
    assert sd.block_threshold(0.5, P_W[0], Q_W[0]) == pytest.approx(1 / 11)
    assert sd.block_threshold(1.0, P3[1], Q3[1]) == 1.0   # Z = .5, and 1 - w_i = 0
    assert sd.block_threshold(0.5, P3[0], Q3[0]) == 0.0   # Z = 0: no residual to cut to


def rows(Q, *contexts):
    return [Q[c] for c in contexts]


def test_all_kept_gives_the_bonus_token():
    # ctx 0, drafts [1, 1]: p_1 = min(1, .5/.4) = 1, Z_1 = .5 so h_1 = 1;
    # p_2 = .1/.6 = 1/6 = h_2. eta = .99, .1: both kept; bonus from P3[1]
    # = [.1, .1, .8] with u = .5 -> 2
    assert sd.verify_block(P3, [0], [1, 1], rows(Q3, 0, 1), ScriptedRng([0.99, 0.1, 0.5])) == [1, 1, 2]


def test_a_kept_block_can_pass_over_a_position_whose_own_test_failed():
    # ctx 0, drafts [0, 1]: p_1 = .2/.4 = .5 and Z_1 = 0, so h_1 = 0 and
    # eta_1 = .3 fails; p_2 = min(1, .5 * .5/.4) = .625 = h_2 and eta_2 = .5
    # passes, so tau = 2: both drafts are kept, then the bonus from P3[1]
    # with u = .5 -> 2
    assert sd.verify_block(P3, [0], [0, 1], rows(Q3, 0, 0), ScriptedRng([0.3, 0.5, 0.5])) == [0, 1, 2]


def test_tau_zero_replaces_the_first_draft_from_the_plain_residual():
    # as above but eta_2 = .9 fails too: tau = 0, a token from
    # norm(max(0, P3[0] - Q3[0])) = [0, .5, .5] with u = .2 -> 1
    assert sd.verify_block(P3, [0], [0, 1], rows(Q3, 0, 0), ScriptedRng([0.3, 0.9, 0.2])) == [1]


def test_the_replacement_is_weighted_by_p_tau():
    # P_W from context 2, drafts [0, 2]: h_1 = 1/11, and p_2 = h_2 = .5 * .2/.6 = 1/6.
    # eta_1 = .05 keeps position 1, eta_2 = .5 does not: tau = 1. The replacement
    # is from norm(max(0, .5 * [.5, .3, .2] - [.2, .2, .6])) = [1, 0, 0] -> 0;
    # the token-wise residual norm(max(0, p - q)) = [.75, .25, 0] gives 1 at u = .9
    uniforms = [0.05, 0.5, 0.9]
    assert sd.verify_block(P_W, [2], [0, 2], rows(Q_W, 2, 0), ScriptedRng(uniforms)) == [0, 0]
    tokenwise = sd.bugged("tokenwise_residual", sd.BLOCK_BUGS)
    assert tokenwise.verify_block(P_W, [2], [0, 2], rows(Q_W, 2, 0), ScriptedRng(uniforms)) == [0, 1]


def test_the_cumulative_test_alone_keeps_too_much():
    # the tau = 0 round above: with h_1 = p_1 = .5, eta_1 = .3 now keeps draft 0;
    # its replacement row .5 * P3[0] - Q3[0] has no positive part, so residual
    # hands back .5 * P3[0] itself: u = .2 -> 1
    cumulative = sd.bugged("cumulative", sd.BLOCK_BUGS)
    assert cumulative.verify_block(P3, [0], [0, 1], rows(Q3, 0, 0), ScriptedRng([0.3, 0.9, 0.2])) == [0, 1]


def test_a_zero_weight_is_never_kept_even_at_eta_zero():
    # a drafted token the target forbids: p_1 = 0, so h_1 = p_1 = 0 and eta = 0
    # must not keep it (strict <, as in verify_round)
    P, Q = np.array([[0.0, 1.0], [0.5, 0.5]]), np.array([[0.5, 0.5], [0.5, 0.5]])
    assert sd.verify_block(P, [0], [0], rows(Q, 0), ScriptedRng([0.0, 0.0])) == [1]


def test_bad_input_as_for_verify_round():
    with pytest.raises(ValueError, match="could not have proposed"):
        sd.verify_block(P3, [0], [1], [np.array([1.0, 0, 0])], np.random.default_rng(0))


# --- the paper's example: 10/9, 11/9 ----------------------------------------------

def test_the_papers_motivating_example():
    P, Q = np.array([[1 / 3, 2 / 3]] * 2), np.array([[2 / 3, 1 / 3]] * 2)
    assert sd.exact_tokens_per_call(P, Q, 2) - 1 == pytest.approx(10 / 9, abs=1e-12)
    assert sd.exact_block_tokens_per_call(P, Q, 2) - 1 == pytest.approx(11 / 9, abs=1e-12)
    m = sd.measure(P, Q, 2, 3000, seed=1, verify=sd.verify_block)
    assert abs(m.per_call - 1 - 11 / 9) < 4 * m.se


# --- exactness, by enumeration --------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_block_verification_is_the_target_exactly(seed, k):
    P, Q = random_pair(seed)
    n = 3 if k <= 3 else 2
    exact = sd.exact_block_first_tokens(P, Q, seed, n, k)
    assert sd.tv_distance(exact, sd.target_first_tokens(P, seed, n)) < 1e-12


def test_the_token_wise_residual_is_exact_for_one_token_and_biased_after():
    P, Q = random_pair(0)
    truth = sd.target_first_tokens(P, 0, 2)
    exact = sd.bugged("tokenwise_residual", sd.BLOCK_BUGS).exact_block_first_tokens(P, Q, 0, 2, 2)
    assert sd.tv_distance(exact.sum(axis=1), truth.sum(axis=1)) < 1e-12
    assert sd.tv_distance(exact, truth) > 5e-3


def test_the_cumulative_test_is_biased_from_the_first_token():
    P, Q = random_pair(1)
    exact = sd.bugged("cumulative", sd.BLOCK_BUGS).exact_block_first_tokens(P, Q, 0, 1, 2)
    assert sd.tv_distance(exact, P[0]) > 0.02


@pytest.mark.parametrize("bug", [None, *sd.BLOCK_BUGS])
def test_the_enumeration_agrees_with_verify_block_for_every_edit(bug):
    P, Q = random_pair(3)
    module = sd.bugged(bug, sd.BLOCK_BUGS) if bug else sd
    counts = sampled_joint(module, P, Q, 2, 2, 3, 1200, seed=4, verify=module.verify_block)
    assert sd.chi2_sf(*sd.pearson(counts, module.exact_block_first_tokens(P, Q, 2, 2, 3))) > 1e-4


def test_exact_block_tokens_per_call_matches_a_simulation():
    P, Q = random_pair(5)
    m = sd.measure(P, Q, 3, 3000, seed=2, verify=sd.verify_block)
    assert abs(m.per_call - sd.exact_block_tokens_per_call(P, Q, 3)) < 4 * m.se


# --- the gain ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_block_never_keeps_fewer_tokens_than_token_wise(seed):
    P, Q = random_pair(10 + seed)
    assert sd.exact_block_tokens_per_call(P, Q, 1) == pytest.approx(sd.exact_tokens_per_call(P, Q, 1), abs=1e-12)
    for k in (2, 3):
        assert sd.exact_block_tokens_per_call(P, Q, k) >= sd.exact_tokens_per_call(P, Q, k) - 1e-12


def test_at_temperature_zero_block_and_token_wise_coincide():
    P0 = sd.temper(sd.random_table(20), 0)
    Q0 = sd.temper(sd.blend(sd.random_table(20), sd.random_table(21), 0.8), 0)
    assert sd.exact_block_tokens_per_call(P0, Q0, 4) == pytest.approx(sd.exact_tokens_per_call(P0, Q0, 4), abs=1e-12)
    tw = sd.spec_generate(P0, Q0, [0], 300, 4, np.random.default_rng(1))
    bl = sd.spec_generate(P0, Q0, [0], 300, 4, np.random.default_rng(1), verify=sd.verify_block)
    assert tw[0] == bl[0]


def test_block_round_outcomes_by_hand():
    # the paper's example at k = 1 is the token-wise rule: from either context,
    # draft a (q 2/3) is kept with (1/3)/(2/3) = 1/2, draft b (q 1/3) always.
    # Ends: [a] kept (1/3), [b] kept (1/3), none kept (1/3) -> the residual [0, 1]
    P, Q = np.array([[1 / 3, 2 / 3]] * 2), np.array([[2 / 3, 1 / 3]] * 2)
    ends = {tuple(kept): (prob, tuple(np.round(row / row.sum(), 12)))
            for kept, row, prob in sd.block_round_outcomes(P, Q, 0, 1)}
    assert ends[(0,)][0] == pytest.approx(1 / 3) and ends[(1,)][0] == pytest.approx(1 / 3)
    assert ends[()] == (pytest.approx(1 / 3), (0.0, 1.0))
    assert ends[(0,)][1] == tuple(np.round(P[0], 12))  # all k kept: the bonus row


def test_chain_rounds_by_hand():
    # a round from 0 always keeps [1] then draws from [0, 1]; from 1 it keeps
    # nothing and draws from [1, 0]. First three tokens from 0: 1, 1, then a
    # round from 1 draws 0
    rounds = {0: [([1], np.array([0.0, 1.0]), 1.0)], 1: [([], np.array([1.0, 0.0]), 1.0)]}
    joint = sd.chain_rounds(rounds.get, 0, 3, 2)
    assert joint[1, 1, 0] == 1.0 and joint.sum() == 1.0
    assert sd.chain_rounds(rounds.get, 1, 1, 2)[0] == 1.0


# --- the block path vllm-ascend shipped (before PR #7808) -------------------------

def test_the_shipped_path_by_hand():
    # P3, Q3 from 0, drafts [1, 1]: running ratios W = 1 (.5/.4 capped), then
    # 1 * (.1/.6) = 1/6. Uniforms .5 and .5: products .5, .25. Position 1 passes
    # (1 >= .5), position 2 does not (1/6 < .25): last = 1, so keep draft 1 and
    # draw from the token-wise residual at context 1: norm(max(0, [.1, .1, .8] -
    # [.1, .6, .3])) = [0, 0, 1] -> 2
    assert sd.verify_block_shipped(P3, [0], [1, 1], rows(Q3, 0, 1), ScriptedRng([0.5, 0.5, 0.3])) == [1, 2]
    # uniforms .9 then .1: products .9 (1 >= .9 passes) and .09 (1/6 >= .09 passes):
    # the last passing position is 2, so the bonus from P3[1] with u = .95 -> 2
    assert sd.verify_block_shipped(P3, [0], [1, 1], rows(Q3, 0, 1), ScriptedRng([0.9, 0.1, 0.95])) == [1, 1, 2]
    # and a later position passing after an earlier one failed: ratios .5 (draft 0 at 0)
    # then .5 * 1 = .5; uniforms .6 (fails) then .6 * .5 = .3 (passes): keep both
    assert sd.verify_block_shipped(P3, [0], [0, 1], rows(Q3, 0, 0), ScriptedRng([0.6, 0.5, 0.5])) == [0, 1, 2]


def test_chapter34_step3_alone_is_the_shipped_path_with_the_blocks_residual():
    # every row p, every q row q; drafts [0, 0]: ratios .5 and .5, so w_1 = .5 and w_2 = .25 (Triton's weight).
    # Uniforms .3 (.5 >= .3: a cut at 1) then .9 (.27 > .25: none at 2): the last cut is 1, where the shipped path
    # draws from norm(max(0, p - q)) = [0, 8/9, 1/9, 0] and the block's step 5 from norm(max(0, .5 p - q)) = [0, 1,
    # 0, 0]; the draw's u = .95 tells the two apart
    p, q = np.array([0.1, 0.5, 0.3, 0.1]), np.array([0.2, 0.1, 0.25, 0.45])
    P, q_rows = np.array([p] * 4), [q, q]
    triton = sd.bugged("Triton kernel", sd.SHIPPED_BUGS)
    step3 = sd.bugged("shared_uniforms", sd.ONE_CHANGE_BUGS)
    assert triton.verify_block_shipped(P, [0], [0, 0], q_rows, ScriptedRng([0.3, 0.9, 0.95])) == [0, 2]
    assert step3.verify_block_shipped(P, [0], [0, 0], q_rows, ScriptedRng([0.3, 0.9, 0.95])) == [0, 1]
    # and its exact outcomes draw from the same residual: the rows after a cut at 1 are the block's
    ends = step3.shipped_block_outcomes(P, np.array([q] * 4), 0, 2)
    after_cut_at_1 = [row for kept, row, _ in ends if kept == [0]]
    assert after_cut_at_1 and all(np.allclose(row, sd.block_residual(0.5, p, q)) for row in after_cut_at_1)


@pytest.mark.parametrize("W", [[0.9, 0.5, 0.4], [0.3, 0.3, 0.2], [1.0, 1.0, 0.1], [0.5, 0.25, 0.0],
                               [0.99, 0.7, 0.6, 0.2], [1.0], [0.0, 0.0]])
def test_last_passing_against_a_monte_carlo_of_products_of_uniforms(W):
    # independent of the Poisson argument: draw the uniforms, multiply, compare
    k, n = len(W), 400_000
    products = np.cumprod(np.random.default_rng(0).random((n, k)), axis=1)
    passing = np.array(W)[None, :] >= products
    tau = np.where(passing.any(axis=1), k - np.argmax(passing[:, ::-1], axis=1), 0)
    sampled = np.bincount(tau, minlength=k + 1) / n
    exact = sd.last_passing(W)
    assert sum(exact) == pytest.approx(1, abs=1e-12)
    assert np.abs(np.array(exact) - sampled).max() < 5 * np.sqrt(0.25 / n) + 1e-12


def test_last_passing_by_hand():
    # one position: it passes when u <= W, so P(tau = 1) = W
    assert sd.last_passing([0.3]) == pytest.approx([0.7, 0.3])
    # two positions with W = (1, w): position 1 always passes; position 2 passes when
    # u1 u2 <= w, which has probability w (1 - ln w)
    w = 0.2
    assert sd.last_passing([1.0, w]) == pytest.approx([0, 1 - w * (1 - math.log(w)), w * (1 - math.log(w))])


def test_the_shipped_paths_exact_outcomes_match_its_sample():
    P, Q = random_pair(6, n=4)
    exact = sd.chain_rounds(lambda d: sd.shipped_block_outcomes(P, Q, d, 3), 1, 2, 4)
    assert exact.sum() == pytest.approx(1, abs=1e-12)
    assert sd.tv_distance(exact, sd.target_first_tokens(P, 1, 2)) > 0.02  # a real bias
    counts = sampled_joint(sd, P, Q, 1, 2, 3, 3000, seed=7, verify=sd.verify_block_shipped)
    assert sd.chi2_sf(*sd.pearson(counts, exact)) > 1e-4


def test_the_shipped_paths_bias_on_the_demo_pair():
    # demo 9's pair: the middling draft from 'f' at k = 3
    exact = sd.chain_rounds(lambda d: sd.shipped_block_outcomes(sd.TARGET, sd.MIDDLING, d, 3), 5, 2, 6)
    truth = sd.target_first_tokens(sd.TARGET, 5, 2)
    assert sd.tv_distance(exact.sum(axis=1), truth.sum(axis=1)) == pytest.approx(0.0730, abs=5e-5)
    assert sd.tv_distance(exact, truth) == pytest.approx(0.2098, abs=5e-5)


WRONG_POSITION = (("verify_block", "h = weights[i] if i == k else block_threshold(weights[i], p_rows[i], q_rows[i])",
                   "h = weights[i] if i == k else block_threshold(weights[i], p_rows[i - 1], q_rows[i - 1])"),)


def test_a_verifier_that_reads_the_wrong_position_hides_on_a_table_that_repeats_one_row():
    """h_i from position i's distributions instead of position i+1's."""
    wrong = sd.edited(WRONG_POSITION)
    P, Q = random_pair(3)
    repeat_P, repeat_Q = np.tile(P[0], (6, 1)), np.tile(Q[0], (6, 1))
    for seed in range(100):  # one row everywhere: the wrong verifier emits what the right one does
        right = sd.spec_generate(repeat_P, repeat_Q, [0], 4, 3, np.random.default_rng(seed), verify=sd.verify_block)
        assert wrong.spec_generate(repeat_P, repeat_Q, [0], 4, 3, np.random.default_rng(seed),
                                   verify=wrong.verify_block) == right
    counts = sampled_joint(wrong, P, Q, 0, 2, 3, 2000, seed=5, verify=wrong.verify_block)
    truth = sd.target_first_tokens(P, 0, 2)
    assert sd.tv_distance(counts / 2000, truth) > 0.05 and fit(counts, truth) < 1e-9
    right = sampled_joint(sd, P, Q, 0, 2, 3, 2000, seed=5, verify=sd.verify_block)
    assert fit(right, truth) > 1e-3


def test_chapter14_names_the_summed_token_apart_from_the_drafts(in_process):
    # step 2 sums over a token y, so it reads apart from the drafts x_1..x_i
    text = " ".join(printed(sd.DETAILS["14"], in_process[0]["14"])[1].split())  # the detail gives the steps
    assert ("2. For i from 0 to k - 1, Z_i is the sum, over every token y, of max(0, w_i p(y) - q(y)), with p and q the"
            " rows after x_i. Z_i is the mass step 5's residual has") in text
    assert "3. Each position i, from 1 to k, flips a coin of its own. Heads makes i a cut point" in text
    assert "5. The next token comes from max(0, w_i p - q) / Z_i, or from p if i = k." in text  # Z_i normalises
    assert ("If no position is a cut point, i = 0: no draft is kept, and as w_0 = 1 the next token comes from demo 1's"
            " residual.") in text
    # by hand, on demo 1's row: with w_0 = 1, step 5's max(0, p - q) is demo 1's residual, and its sum, Z_0, is
    # 1 - sum min(p, q) = 0.441, the rejection chance
    p, q = sd.TARGET[0], sd.MIDDLING[0]
    assert np.maximum(1.0 * p - q, 0).sum() == pytest.approx(1 - np.minimum(p, q).sum())
    assert f"{1 - np.minimum(p, q).sum():.3f}" == "0.441"


def test_pytorchs_product_of_capped_ratios_is_never_above_w_k():
    # chapter 15 says so: through the stages, the shipped PyTorch weight (a product of capped ratios) stays at or
    # below the block's w_k (the capped running product), on random rows and drafts
    rng = np.random.default_rng(3)
    for _ in range(300):
        product, w = 1.0, 1.0
        for _ in range(4):
            p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
            x = int(rng.integers(6))
            product, w = sd.shipped_weight(product, p, q, x), sd.accept_prob(w * p, q, x)
            assert product <= w + 1e-12
