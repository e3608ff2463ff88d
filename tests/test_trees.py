"""Draft trees: the mask, the masked pass, multi-candidate verification."""
import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import ScriptedRng, chi2_excess
from test_stages import P3, Q3

TARGET = sd.random_table(11, sharpness=2.0)
UNRELATED = sd.random_table(13, sharpness=2.0)


def random_parents(rng, n):
    return [int(rng.integers(-1, i)) for i in range(n)]  # each parent earlier, or -1


def ancestors(parents, i):
    out = set()
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


def test_mask_against_a_brute_force_ancestor_walk():
    rng = np.random.default_rng(0)
    for n in [1, 2, 5, 12, 30] * 4:
        parents = random_parents(rng, n)
        mask = sd.tree_attention_mask(parents)
        for i in range(n):
            assert set(np.flatnonzero(mask[i])) == ancestors(parents, i) | {i}


def test_mask_by_hand_and_bad_parents():
    assert sd.tree_attention_mask([-1, -1, 0]).astype(int).tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 1]]
    with pytest.raises(ValueError, match=r"parents\[1\] = 1"):
        sd.tree_attention_mask([-1, 1])


def test_one_masked_pass_gives_every_node_its_own_paths_distribution():
    P2 = sd.random_table(3, 2.0, order=2)
    for seed in range(5):
        tokens, parents = sd.draft_tree(TARGET, 2, 3, 3, np.random.default_rng(seed))
        slow = [sd.path_alone(P2, (4, 2), tokens, parents, i) for i in range(len(tokens))]
        fast = sd.masked_pass(P2, (4, 2), tokens, sd.tree_attention_mask(parents))
        assert np.array_equal(fast, np.array(slow))
        causal = sd.masked_pass(P2, (4, 2), tokens, np.tri(len(tokens), dtype=bool))
        assert not np.allclose(causal, slow)  # the mask is what makes it right


def test_draft_tree_shape_breadth_first():
    tokens, parents = sd.draft_tree(Q3, 0, 3, 2, np.random.default_rng(1))
    assert len(tokens) == 2 + 4 + 8 and parents[:2] == [-1, -1]
    assert all(-1 <= p < i for i, p in enumerate(parents))
    assert all(parents.count(i) == 2 for i in range(6)) and parents[6:].count(6) == 0


def test_draft_children_by_hand():
    # Q3[0] = [.4, .4, .2]: u = .1 -> 0; independent, u = .3 -> 0 again
    assert sd.draft_children(Q3[0], 2, ScriptedRng([0.1, 0.3]), distinct=False) == [0, 0]
    # distinct: the second draw is from [0, .4, .2] / .6, where u = .3 -> 1
    assert sd.draft_children(Q3[0], 2, ScriptedRng([0.1, 0.3]), distinct=True) == [0, 1]
    # no more distinct children than q has tokens
    assert sorted(sd.draft_children(np.array([0.5, 0.5, 0.0]), 3, np.random.default_rng(0), True)) == [0, 1]


def test_draft_tree_children_follow_q_at_their_node():
    rng, counts = np.random.default_rng(2), np.zeros(3)
    for _ in range(5000):
        tokens, parents = sd.draft_tree(Q3, 0, 2, 2, rng)
        for t, p in zip(tokens, parents):
            if p == 0 and tokens[0] == 1:  # grandchildren under a first child '1'
                counts[t] += 1
    assert chi2_excess(counts, Q3[1]) < 6


def rows(tokens, ctx=0):
    """The q rows a tree of these tokens was drawn from, on Q3: the context's, then each node's."""
    return [Q3[ctx]] + [Q3[t] for t in tokens]


def test_verify_tree_takes_rejected_mass_out_before_the_next_sibling():
    # two copies of token 0 under the context: p = [.2, .5, .3], q = [.4, .4, .2]
    # first: ratio .5, u = .9 rejects; p becomes norm(max(0, p - q)) = [0, .5, .5],
    # so the second copy has ratio 0 and u = .3 rejects it too; the last draw,
    # .2, from [0, .5, .5] gives 1
    assert sd.verify_tree(P3, [0], [0, 0], [-1, -1], rows([0, 0]), ScriptedRng([0.9, 0.3, 0.2])) == [1]
    # without the update the second copy is kept (ratio .5 > .3), then the
    # bonus at that leaf comes from P3[0] with u = .2 -> 1
    no_update = sd.bugged("no_update", sd.TREE_BUGS)
    assert no_update.verify_tree(P3, [0], [0, 0], [-1, -1], rows([0, 0]), ScriptedRng([0.9, 0.3, 0.2])) == [0, 1]


def test_verify_tree_distinct_checks_against_q_without_earlier_siblings(in_process):
    assert ("each from q', which is q with the siblings drawn before it removed, renormalised. A distinct child x is"
            " kept with chance"
            " min(1, p(x)/q'(x)); if it is rejected, p becomes max(0, p - q') normalised.") in " ".join(
        in_process[1].split())  # chapter 8 says what this test pins
    # children 0 then 1. 0: ratio .5, u = .9 rejects, p -> [0, .5, .5]. 1 was drawn
    # from q without 0 = [0, 2/3, 1/3]: ratio .5 / (2/3) = .75, u = .8 rejects;
    # p -> norm(max(0, [0, .5 - 2/3, .5 - 1/3])) = [0, 0, 1] -> 2
    assert sd.verify_tree(P3, [0], [0, 1], [-1, -1], rows([0, 1]), ScriptedRng([0.9, 0.8, 0.5]), distinct=True) == [2]
    # independent children: 1 is checked against q itself, ratio .5/.4 -> kept;
    # then the bonus from P3[1] = [.1, .1, .8] with u = .5 -> 2
    assert sd.verify_tree(P3, [0], [0, 1], [-1, -1], rows([0, 1]), ScriptedRng([0.9, 0.8, 0.5])) == [1, 2]


def test_verify_tree_descends_and_ends_with_a_bonus_at_a_leaf():
    # ctx 0 -> 1 -> 2 (a chain as a tree): both kept (ratios 1.25, 2.67), bonus
    # from P3[2] = [.6, .2, .2] with u = .7 -> 1
    assert sd.verify_tree(P3, [0], [1, 2], [-1, 0], rows([1, 2]), ScriptedRng([0.99, 0.99, 0.7])) == [1, 2, 1]


def test_tree_round_drafts_then_walks():
    # depth 1, branching 2 from 0: u = .1 -> 0 and u = .5 -> 1 from Q3[0]; check 0
    # (ratio .5) with u = .7: rejected, p -> [0, .5, .5]; check 1 against q: ratio
    # .5/.4 -> kept with u = .9; bonus from P3[1] with u = .95 -> 2
    assert sd.tree_round(P3, Q3, [0], 1, 2, ScriptedRng([0.1, 0.5, 0.7, 0.9, 0.95])) == [1, 2]


@pytest.mark.parametrize("seed", [1, 2])
def test_branching_one_is_the_chain_token_for_token(seed):
    Q = sd.blend(TARGET, UNRELATED, 0.5)
    chain = sd.spec_generate(TARGET, Q, [0], 400, 3, np.random.default_rng(seed))
    tree = sd.tree_generate(TARGET, Q, [0], 400, 3, 1, np.random.default_rng(seed))
    assert chain == tree


def tree_counts(module, ctx, distinct, runs=600, seed=0):
    rng, counts = np.random.default_rng(seed), np.zeros((6, 6))
    for _ in range(runs):
        (x1, x2), _, _ = module.tree_generate(TARGET, UNRELATED, [ctx], 2, 2, 3, rng, distinct)
        counts[x1, x2] += 1
    return counts


@pytest.mark.parametrize("distinct", [False, True])
def test_tree_decoding_emits_the_target_joint(distinct):
    ctx = 3
    truth = TARGET[ctx][:, None] * TARGET
    assert chi2_excess(tree_counts(sd, ctx, distinct), truth) < 6
    assert chi2_excess(tree_counts(sd.bugged("no_update", sd.TREE_BUGS), ctx, distinct), truth) > 30


def test_tree_generate_validates_like_spec_generate():
    with pytest.raises(ValueError, match="branching must be an integer >= 1, got 0"):
        sd.tree_generate(TARGET, TARGET, [0], 5, 2, 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="draft Q row 0 sums to"):
        sd.tree_generate(TARGET, TARGET * 2, [0], 5, 2, 2, np.random.default_rng(0))


@pytest.mark.parametrize("tokens, parents, message", [
    ([0, 3], [-1, -1], "tree node 1 is 3, not a token id in 0..2"),
    ([0, -1], [-1, -1], "tree node 1 is -1"),
    ([0, 1], [-1, 1], r"parents\[1\] = 1: a parent must come earlier"),
])
def test_verify_tree_refuses_a_bad_id_or_parent_by_position(tokens, parents, message):
    with pytest.raises(ValueError, match=message):
        sd.verify_tree(P3, [0], tokens, parents, [Q3[0]] * 3, ScriptedRng([0.5] * 5))


def test_verify_tree_reads_the_text_through_forward():
    # a model that reads the whole text: each node's row is the one after its own branch
    seen = []

    class Model:
        def __len__(self):
            return 3

        def __call__(self, text, new, cached):
            seen.append(list(text) + list(new))
            return [P3[t] for t in [text[-1], *new][cached:]]
    sd.verify_tree(Model(), [2, 0], [1, 2], [-1, 0], rows([1, 2]), ScriptedRng([0.99, 0.99, 0.7]))
    assert [2, 0] in seen and [2, 0, 1] in seen and [2, 0, 1, 2] in seen
