# /// script
# requires-python = ">=3.9"
# dependencies = ["numpy"]
# ///
"""
Speculative decoding from scratch, in one numpy file.

Speculative decoding (Leviathan, Kalman & Matias 2023; Chen et al. 2023) lets a
large target model emit several tokens per forward pass and still produce
exactly its own output distribution. A cheap draft model guesses k tokens; the
target scores all k guesses in ONE call; a modified rejection-sampling rule
keeps a prefix of the guesses and repairs the first rejected one. It is fast
where scoring k+1 positions costs about as much as scoring one: an accelerator
decoding a few sequences is memory-bound (the paper's section 1), so an
accepted guess costs only the draft's share. On this machine's CPU the wide
pass costs several narrow ones, and speculation can lose; demo 6 measures it.

The models here are explicit probability tables T[prev, next] (order-1 Markov
chains over six tokens a..f), because the claim is about distributions, and a
table's true distribution can be printed and compared with what the algorithm
actually emits.

    python3 speculative_decoding_from_scratch.py              # every demo
    python3 speculative_decoding_from_scratch.py 2 5          # demos 2 and 5
    python3 speculative_decoding_from_scratch.py --list       # the demo titles
    python3 speculative_decoding_from_scratch.py --trace      # watch rounds
    python3 speculative_decoding_from_scratch.py --tune 0.8 0.05   # pick k

To watch rounds happen, run --trace, or break in verify_round's acceptance
test under pdb (the README has a session as typed). To watch the guarantee
break, make residual() return p and rerun demos 1 and 2: their verdicts flip.

Notation, as in the paper (Leviathan et al. call the draft length gamma):
    p, P   the target's next-token distribution; P is its table, p = P[ctx]
    q, Q   the draft's next-token distribution;  Q is its table, q = Q[ctx]
    k      draft length: tokens guessed per round (the paper's gamma)
    beta   for one context, the chance a draft is accepted:
           sum_x min(p(x), q(x)) (Theorem 3.5)
    alpha  the acceptance rate: beta averaged over the contexts as often as the
           target visits them (Definition 3.1)
    c      cost of one draft token as a fraction of one target call

The stages, in teaching order: 0 models, 1 sampling, 2 the acceptance rule,
3 the residual, 4 drafting, 5 verification (5b: draft trees, 5c: block
verification), 6 the cost model and a server's metrics, 7 measuring
distributions, 8 MACs, batches and the real clock, 9 training a draft. Then
ten demos, each printing its evidence and the verdicts it draws from it.

Left out on purpose: neural networks (a decoder, its KV cache and a server's
batch appear only as MACs and bytes on a roofline, demo 6), top-k / top-p
warpers (they only change which table is sampled, see temper), dynamic draft
trees, and Medusa's typical acceptance (fast, but not distribution-exact).
"""

import math
import os
import sys
import textwrap
import time
from bisect import bisect_right
from types import SimpleNamespace
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate

import numpy as np

VOCAB = 6
TOKENS = "abcdef"
RULES = ("correct", "greedy", "no_resample", "continue", "uniform_q")


def name(x):
    """Token id -> letter: name(0) == 'a'."""
    return TOKENS[x]


# -----------------------------------------------------------------------------
# 0. Models: a model is a table
# A language model maps a context to a next-token distribution. An order-1
# Markov table T[prev, next] is the smallest thing with that shape whose whole
# distribution we can write down, so every claim below can be checked exactly.


def random_table(seed, sharpness=1.0, order=1):
    """A random V x V table T[prev, next], rows summing to 1; higher sharpness =
    peakier rows. order=2 gives T[prev2, prev1, next] (demo 8 needs one)."""
    logits = sharpness * np.random.default_rng(seed).standard_normal((VOCAB,) * (order + 1))
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def blend(target, other, weight):
    """A draft of tunable quality: weight*target + (1-weight)*other.

    weight 1 is a perfect draft, weight 0 an unrelated one. (Not alpha: alpha
    is the acceptance rate this draft ends up with, measured in demo 3.)
    """
    if not 0.0 <= weight <= 1.0:  # also False for NaN
        raise ValueError(f"blend weight must lie in [0, 1], got {weight}")
    return weight * np.asarray(target, float) + (1 - weight) * np.asarray(other, float)


def temper(table, T):
    """Re-temperature every row: p(x)^(1/T), renormalised.

    T = 0 is the one-hot argmax row, so greedy decoding is just sampling from
    temper(P, 0) (the paper's section 2.2). Ties go to the lowest index, as
    np.argmax does: temper([.4, .4, .2], 0) -> [1, 0, 0].
    """
    if not (np.isfinite(T) and T >= 0):
        raise ValueError(f"temperature must be finite and >= 0, got {T}")
    table = np.asarray(table, float)
    if T == 0:
        return np.eye(table.shape[-1])[table.argmax(axis=-1)]
    with np.errstate(divide="ignore", over="ignore"):  # -inf logits become 0
        # subtract the row max in log space first, so tiny T cannot overflow
        logits = (np.log(table) - np.log(table.max(axis=-1, keepdims=True))) / T
    w = np.exp(logits)
    return w / w.sum(axis=-1, keepdims=True)


# -----------------------------------------------------------------------------
# 1. Sampling: one uniform number in, one token out
# Every random choice below is sample_from(probs, u) with u = rng.random(), so a
# run consumes a countable stream of uniforms and fixed seeds print identical
# numbers. Inverse-CDF sampling also makes the edge cases visible: u == 0, and
# a cumulative sum that ends a hair below 1.


def sample_from(probs, u):
    """Inverse CDF: the first token whose cumulative probability exceeds u.

    sample_from([.5, 0, .5], 0.7) -> 2. Never a zero-probability token: the
    cumulative sum is flat across a zero entry, so bisect_right steps over it.
    """
    if not 0.0 <= u < 1.0:
        raise ValueError(f"u must lie in [0, 1), got {u}")
    # plain Python: on a six-entry row numpy's per-call overhead costs 4x more
    row = np.asarray(probs, float).tolist()
    cdf = list(accumulate(row))
    if not (min(row) >= 0 and 0 < cdf[-1] < math.inf):  # NaN fails these too
        raise ValueError(f"cannot sample from {row}: {row_flaw(row)}")
    # subtle: compare u * total, not u. A row whose sum rounds to 0.99999999
    # would otherwise let u = 0.999999999 run past the last token and return
    # index V (TensorRT-LLM issue #19485, in top-p sampling). And u < 1 gives u * total < total even after rounding, so the
    # index always lands on a real token.
    return bisect_right(cdf, u * cdf[-1])


def row_flaw(row):
    """Why a row is not a distribution to sample from (an unnormalised
    residual, say): row_flaw([0, 0, 0]) -> 'it has no positive mass'."""
    if any(math.isnan(x) for x in row):
        return "it holds NaN"
    if min(row) < 0:
        return f"it has a negative entry, {min(row)}"
    return "it has no positive mass" if sum(row) <= 0 else "it holds inf"


# -----------------------------------------------------------------------------
# 2. The acceptance rule (paper section 2.3)
# The draft proposed x with probability q(x); the target wants it with p(x).
# Where the draft under-proposes (q <= p) keep x always; where it over-proposes
# keep x with probability p/q. That trims q down to min(p, q) exactly.


def accept_prob(p, q, x):
    """min(1, p(x)/q(x)): the chance of keeping a drafted token x."""
    if not q[x] > 0:
        raise ValueError(
            f"drafted token {x} has draft probability q[{x}] = {q[x]}: "
            "the draft could not have proposed it"
        )
    return min(1.0, float(p[x] / q[x]))


# -----------------------------------------------------------------------------
# 3. The residual: what to sample after a rejection
# Acceptance delivered min(p, q). The missing mass is p - min(p, q) =
# max(0, p - q), and a rejection happens with exactly its total probability,
# 1 - sum min(p, q). Sampling the replacement from max(0, p - q) normalised
# fills the gap, so accepted + replaced = p for every token.


def residual(p, q):
    """norm(max(0, p - q)): residual([.5, .3, .2], [.2, .6, .2]) -> [1, 0, 0]."""
    d = np.maximum(p - q, 0.0)
    total = d.sum()
    # subtle: total == 0 means q covers p everywhere, i.e. p == q. Then nothing
    # is ever rejected, but return p rather than 0/0 = NaN so that a caller
    # who samples anyway (the "greedy" break, say) still gets a distribution.
    return d / total if total > 0 else p


# -----------------------------------------------------------------------------
# 4. Drafting: the cheap model guesses k tokens, one after another
# This part is sequential and pays k draft calls: each guess is the context of
# the next. That is why the draft must be cheap (c small).


def draft_tokens(Q, ctx, k, rng):
    """k tokens drawn autoregressively from the draft table Q, starting at ctx."""
    drafted = []
    for _ in range(k):
        ctx = sample_from(Q[ctx], rng.random())
        drafted.append(ctx)
    return drafted


def plain_decode(P, ctx, n_tokens, rng):
    """The baseline: the target alone, one call per token. The drafting loop on P."""
    return draft_tokens(P, ctx, n_tokens, rng)


# -----------------------------------------------------------------------------
# 5. Verification: one target call checks every guess
# The target sees ctx followed by the k guesses and returns k+1 next-token
# distributions at once (for a table: k+1 rows). Walk them left to right. The
# first rejection ends the round: every later guess was conditioned on a token
# that is no longer in the text. If all k pass, the (k+1)-th distribution is
# already computed, so one more token comes free: the bonus token.
# rule != "correct" selects a deliberate bug; demo 2 shows what each one costs.
# "uniform_q" takes the draft's probability to be 1/V and refills from p: of
# the class of bugs where verification is handed a q the draft did not sample
# from (Hugging Face transformers shipped two, demo 3).


def check_rule(rule, valid=RULES):
    if rule not in valid:
        raise ValueError(f"unknown rule {rule!r}; valid rules: {', '.join(valid)}")


def verify_round(P, Q, ctx, drafted, rng, rule="correct"):
    """Check the drafts in one target call; return (emitted, n_accepted).

    Emits 1 to k+1 tokens: the accepted prefix of drafted, then a replacement
    from the residual at the first rejection, or a bonus token if none failed.
    """
    check_rule(rule)
    contexts = [ctx] + list(drafted)  # position i predicts what follows contexts[i]
    p_rows = P[contexts]  # (k+1, V): the one target call
    emitted, n_accepted = [], 0
    for i, x in enumerate(drafted):
        p, q = p_rows[i], Q[contexts[i]]  # q: the row x was actually drawn from
        if rule == "uniform_q":
            q = np.full(len(p), 1.0 / len(p))  # not what x was drawn from
        u = rng.random()  # drawn under every rule, so all rules share one stream
        keep = x == p.argmax() if rule == "greedy" else u < accept_prob(p, q, x)
        if keep:
            emitted.append(x)
            n_accepted += 1
            continue
        r = p if rule in ("no_resample", "uniform_q") else residual(p, q)
        emitted.append(sample_from(r, rng.random()))
        if rule != "continue":
            return emitted, n_accepted  # later drafts followed a rejected token
    emitted.append(sample_from(p_rows[-1], rng.random()))  # bonus token
    return emitted, n_accepted


def spec_generate(P, Q, ctx, n_tokens, k, rng, rule="correct", verify=None):
    """n_tokens by speculative decoding: (tokens, target_calls, n_accepted).

    Each round starts from the last emitted token. The last round may emit
    more than needed; the extra tokens are cut (their counts are not).
    verify: verify_round (the default) or verify_block (stage 5c).
    """
    P, Q = check_inputs(P, Q, ctx, n_tokens=n_tokens, k=k)
    verify = verify or verify_round
    tokens, target_calls, n_accepted = [], 0, 0
    while len(tokens) < n_tokens:
        emitted, n_acc = verify(P, Q, ctx, draft_tokens(Q, ctx, k, rng), rng, rule)
        tokens += emitted
        target_calls += 1
        n_accepted += n_acc
        ctx = emitted[-1]
    return tokens[:n_tokens], target_calls, n_accepted


# Input checks, run once per spec_generate call and never per token: readers
# bring their own tables, and a bad one should fail loudly, by name.


def as_table(T, label):
    """T as a float array, or a ValueError that names the table and the flaw."""
    try:
        T = np.asarray(T, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a numeric array") from None
    if T.ndim != 2 or T.shape[0] != T.shape[1] or T.size == 0:
        raise ValueError(f"{label} must be a square 2-D table T[prev, next], got shape {T.shape}")
    if not T.min() >= 0:  # NaN fails this comparison too
        i, j = np.argwhere(~(T >= 0))[0]
        raise ValueError(f"{label}[{i}, {j}] = {T[i, j]}: entries must be >= 0")
    sums = T.sum(axis=1)
    if not np.abs(sums - 1).max() <= 1e-6:  # an inf entry makes its row sum inf
        i = int(np.argmax(~(np.abs(sums - 1) <= 1e-6)))
        raise ValueError(f"{label} row {i} sums to {sums[i]:.9g}, not 1")
    return T


def check_inputs(P, Q, ctx, **counts):
    """Validate a generator's arguments once, before the hot loop. counts are
    the sizes (n_tokens, k, ...) that must be integers >= 1. An unknown rule is
    the verifier's to catch, before it does any work."""
    P, Q = as_table(P, "target P"), as_table(Q, "draft Q")
    if P.shape != Q.shape:
        raise ValueError(f"target P is {P.shape} but draft Q is {Q.shape}: one vocabulary for both")
    for what, value in counts.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{what} must be an integer >= 1, got {value!r}")
    if not isinstance(ctx, (int, np.integer)) or not 0 <= ctx < len(P):
        raise ValueError(f"ctx must be a token id in 0..{len(P) - 1}, got {ctx!r}")
    return P, Q


# -----------------------------------------------------------------------------
# 5b. Beyond a chain: draft trees (SpecInfer, Medusa, EAGLE)
# A chain bets everything on one guess per position. A tree drafts several
# candidates per node, and the target checks every node in ONE pass: each
# position attends only to its ancestors (the tree attention mask), so it sees
# exactly the text of its own branch. Verification walks down the tree. The
# subtle part is siblings: once a candidate is rejected, its q is taken out of
# p (p <- norm(max(0, p - q))) before the next one is tried; without that, the
# target's distribution is not kept.


def without(q, removed):
    """q with the tokens in removed zeroed and renormalised: ([.5, .3, .2], [0]) ->
    [0, .6, .4]. Callers never remove all of q's tokens."""
    q = q.copy()
    q[list(removed)] = 0.0
    return q / q.sum()


def draft_children(q, branching, rng, distinct):
    """Candidates drawn from q: independently, or without replacement (each one
    from q with the earlier ones removed), at most as many as q has tokens."""
    if distinct:
        branching = min(branching, np.count_nonzero(q))
    children = []
    for _ in range(branching):
        children.append(sample_from(without(q, children) if distinct else q, rng.random()))
    return children


def draft_tree(Q, ctx, depth, branching, rng, distinct=False):
    """A draft tree in breadth-first order: (tokens, parents), parents[i] = -1
    for the children of the context. Each level is one (batched) draft step."""
    tokens, parents, frontier = [], [], [-1]
    for _ in range(depth):
        next_frontier = []
        for node in frontier:
            for x in draft_children(Q[ctx if node < 0 else tokens[node]], branching, rng, distinct):
                tokens.append(x)
                parents.append(node)
                next_frontier.append(len(tokens) - 1)
        frontier = next_frontier
    return tokens, parents


def tree_attention_mask(parents):
    """mask[i, j]: node i sees node j, exactly when j is i or an ancestor of i.

    parents [-1, -1, 0] -> [[1,0,0], [0,1,0], [1,0,1]]. Breadth-first order
    puts every parent before its children, so row i is its parent's row plus i.
    """
    mask = np.eye(len(parents), dtype=bool)
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"parents[{i}] = {parent}: a parent must come earlier (or be -1)")
        if parent >= 0:
            mask[i] |= mask[parent]
    return mask


def verify_tree(P, Q, ctx, tokens, parents, rng, distinct=False, rule="correct"):
    """Walk the tree from the context in one target call: (emitted, n_accepted).

    rule="no_update" (a deliberate bug) skips the residual between siblings.
    """
    check_rule(rule, ("correct", "no_update"))
    p_rows = P[[ctx] + list(tokens)]  # (n+1, V): the one masked target call
    emitted, node = [], -1
    while True:
        p, q = p_rows[node + 1], Q[ctx if node < 0 else tokens[node]]
        children = [j for j, parent in enumerate(parents) if parent == node]
        for j, child in enumerate(children):
            q_j = without(q, [tokens[c] for c in children[:j]]) if distinct else q
            if rng.random() < accept_prob(p, q_j, tokens[child]):
                emitted.append(tokens[child])
                node = child  # accepted: go down into it
                break
            p = residual(p, q_j) if rule == "correct" else p
        else:  # every child rejected: a token from what is left of p; at a leaf
            # there were no children, p is untouched, and this is the bonus token
            emitted.append(sample_from(p, rng.random()))
            return emitted, len(emitted) - 1


def tree_generate(P, Q, ctx, n_tokens, depth, branching, rng, distinct=False, rule="correct"):
    """n_tokens by tree speculation: (tokens, target_calls, n_accepted)."""
    P, Q = check_inputs(P, Q, ctx, n_tokens=n_tokens, depth=depth, branching=branching)
    tokens, target_calls, n_accepted = [], 0, 0
    while len(tokens) < n_tokens:
        drafted, parents = draft_tree(Q, ctx, depth, branching, rng, distinct)
        emitted, n_acc = verify_tree(P, Q, ctx, drafted, parents, rng, distinct, rule)
        tokens += emitted
        target_calls += 1
        n_accepted += n_acc
        ctx = emitted[-1]
    return tokens[:n_tokens], target_calls, n_accepted


# -----------------------------------------------------------------------------
# 5c. Verifying the block, not the tokens (Sun, Mendlovic, Leviathan et al.,
# ICLR 2025, arXiv 2403.10444)
# Token by token, a round ends at the first rejection. Block verification
# judges the drafted block as a whole: it still emits exactly the target's
# distribution, keeps at least as many drafts on average, and is optimal among
# verifiers that see only the per-position distributions. The weight
# p_i = min(1, p_{i-1} p(x_i) / q(x_i)) is how much of the block up to x_i the
# target still wants; h_i is the chance to keep exactly that much.

BLOCK_RULES = ("correct", "tokenwise_residual", "cumulative")


def block_threshold(weight, p_next, q_next):
    """h_i = Z / (Z + 1 - p_i), Z = sum_x max(0, p_i p_next(x) - q_next(x)),
    with p_next, q_next the distributions at position i+1. 0 when Z is 0: a
    block cut there would have no residual to draw its last token from."""
    Z = float(np.maximum(weight * p_next - q_next, 0.0).sum())
    return Z / (Z + 1 - weight) if Z > 0 else 0.0


def block_residual(weight, p, q):
    """norm(max(0, p_tau p - q)): where the last token comes from when the block
    stops at tau < k. Weighted by p_tau: the block up to tau was kept with
    weight p_tau, so only that share of p at the next position is still owed."""
    return residual(weight * p, q)


def verify_block(P, Q, ctx, drafted, rng, rule="correct"):
    """Check the drafted block jointly in one target call: (emitted, n_accepted).

    The same contract as verify_round. rule="tokenwise_residual" draws the
    replacement from the token-wise residual (half of what vllm-ascend #7807
    shipped: its block path also used the token-wise acceptance test);
    rule="cumulative" tests the running weight alone (h_i = p_i).
    """
    check_rule(rule, BLOCK_RULES)
    contexts = [ctx] + list(drafted)
    p_rows = P[contexts]  # (k+1, V): the one target call
    k, weights, tau = len(drafted), [1.0], 0
    for i, x in enumerate(drafted, start=1):
        p, q = p_rows[i - 1], Q[contexts[i - 1]]
        weights.append(accept_prob(weights[-1] * p, q, x))  # p_i = min(1, p_i-1 p/q)
        h = (weights[i] if i == k or rule == "cumulative"  # h_k = p_k
             else block_threshold(weights[i], p_rows[i], Q[contexts[i]]))
        if rng.random() < h:
            tau = i  # subtle: keep x_1..x_i even if an earlier position failed
    emitted = list(drafted[:tau])
    if tau == k:
        emitted.append(sample_from(p_rows[k], rng.random()))  # bonus token
        return emitted, tau
    # subtle: weighted by p_tau; the token-wise residual (weight 1) over-serves
    weight = 1.0 if rule == "tokenwise_residual" else weights[tau]
    emitted.append(sample_from(block_residual(weight, p_rows[tau], Q[contexts[tau]]), rng.random()))
    return emitted, tau


# -----------------------------------------------------------------------------
# 6. Cost model (paper section 3)
# A round costs one target call plus k draft calls, i.e. 1 + k*c target calls.
# It yields tokens_per_round tokens, where plain decoding yields one per call.


def speedup(tokens_per_round, k, c, v=1.0):
    """Walltime gain over plain decoding: tokens_per_round / (v + k*c).

    v is the verifying pass over k+1 positions, in units of one target call:
    1 in the paper's model (decoding is memory-bound), measured in demo 6.
    """
    return tokens_per_round / (v + k * c)


def break_even_c(tokens_per_round, k):
    """The draft cost c* at which speculation only ties: (tokens - 1) / k."""
    return (tokens_per_round - 1) / k


# The paper's closed forms assume every drafted token is accepted
# independently with the same probability alpha. Then a round emits
# 1 + alpha + ... + alpha^k tokens: one for sure, the next if the first draft
# passed, and so on (the last term is the bonus after k passes).


def expected_tokens(alpha, k):
    """Eq. 1: (1 - alpha^(k+1)) / (1 - alpha); k + 1 at alpha = 1."""
    return k + 1.0 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def operations_factor(alpha, k, c_hat):
    """Theorem 3.11: total arithmetic relative to plain decoding.

    Each round runs k draft steps (k*c_hat) and the target on k+1 positions,
    and yields expected_tokens(alpha, k) tokens.
    """
    return (k * c_hat + k + 1) / expected_tokens(alpha, k)


def fastest_k(speedup_of, k_max):
    """(k, speedup_of(k)) for the k in 1..k_max that is fastest; (0, 1.0) if
    none beats plain decoding (k = 0 is plain decoding)."""
    k = max(range(1, k_max + 1), key=speedup_of)
    return (k, speedup_of(k)) if speedup_of(k) > 1 else (0, 1.0)


def best_k(alpha, c, k_max=32):
    """fastest_k by eq. 1 and Theorem 3.8, for an alpha and a draft cost c."""
    return fastest_k(lambda k: speedup(expected_tokens(alpha, k), k, c), k_max)


# What servers report. A serving engine does not print the paper's alpha.
# vLLM reports a mean acceptance length (tokens per target call, bonus
# included), a draft acceptance rate (accepted / drafted tokens) and, for each
# position i, the share of drafts whose first i tokens all passed. The first
# two give alpha only through eq. 1's one-alpha-everywhere assumption; the
# per-position rates give tokens per call with no model at all.


def server_metrics(sizes, k):
    """What vLLM reports for rounds of draft length k that emitted `sizes`
    tokens each: (mean acceptance length, draft acceptance rate, per-position
    rates). server_metrics([1, 3], 2) -> (2.0, 0.5, [0.5, 0.5])."""
    accepted = np.asarray(sizes) - 1
    per_position = [float((accepted >= i).mean()) for i in range(1, k + 1)]
    return 1 + float(accepted.mean()), float(accepted.sum() / (k * len(accepted))), per_position


def increasing_root(f, target, lo=0.0, hi=1.0):
    """The x in [lo, hi] with f(x) = target, for an increasing f, by bisection."""
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def alpha_from_mean_length(L, k):
    """Eq. 1 inverted: the alpha with 1 + alpha + ... + alpha^k = L."""
    return increasing_root(lambda a: expected_tokens(a, k), L)


def alpha_from_draft_rate(R, k):
    """The alpha with (alpha + ... + alpha^k) / k = R: what a draft acceptance
    rate R measured at draft length k means under eq. 1. It is not R."""
    return increasing_root(lambda a: (expected_tokens(a, k) - 1) / k, R)


def per_position_tokens(rates):
    """Tokens per call at each draft length k' <= K, with no model: 1 plus the
    chance that each of the first k' drafts passed. [.8, .6] -> [1.8, 2.4]."""
    return [1 + sum(rates[:j]) for j in range(1, len(rates) + 1)]


# -----------------------------------------------------------------------------
# 7. Measuring distributions
# Total variation is the largest difference in probability that the two
# distributions give any event; it is 0 exactly when they are equal. It is also
# the paper's D_LK: beta = 1 - TV(p, q) (Theorem 3.5), so averaging beta over
# the contexts the target visits gives alpha without drawing a single sample.


def tv_distance(a, b):
    """(1/2) sum |a - b|: tv_distance([1, 0], [.5, .5]) -> 0.5."""
    return 0.5 * float(np.abs(np.asarray(a, float) - np.asarray(b, float)).sum())


def bigram_counts(tokens, n=VOCAB):
    """counts[prev, next] of a text: bigram_counts([0, 1, 1], 2) -> [[0, 1], [0, 1]]."""
    counts = np.zeros((n, n))
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    return counts


def stationary(P):
    """pi with pi P = pi: how often the chain visits each context in the long run.

    Runs the lazy chain (I + P) / 2 for 2^40 steps from a uniform start, by
    squaring it 40 times. Laziness removes periodicity (same pi), and a chain
    with several closed cycles, like a greedy one-hot table, gets the mix that
    a uniformly random start ends up in.
    """
    M = (np.eye(len(P)) + P) / 2
    for _ in range(40):
        M = M @ M
        M /= M.sum(axis=1, keepdims=True)  # else rounding doubles with each squaring
    return M.mean(axis=0)


def visit_joint(P):
    """pi(ctx) p(x | ctx): how often the target's text has ctx followed by x."""
    return stationary(P)[:, None] * P


def pair_alpha(P, Q):
    """The paper's alpha without sampling: beta(ctx) = sum min(p, q), averaged over pi."""
    return float(stationary(P) @ np.minimum(P, Q).sum(axis=1))


def exact_tokens_per_call(P, Q, k):
    """Long-run tokens per target call for a pair of tables, without sampling.

    No i.i.d. assumption: follow the probability mass through one round from
    every start context at once. reach[s, c] = P(the first i drafts from s were
    all accepted and the last one is c). A draft at c is accepted and becomes
    x with mass min(p, q)(x), or rejected and replaced by x with mass
    max(0, p - q)(x). Rounds then chain on their last token: average the
    tokens per round over that chain's stationary distribution.
    """
    A, R = np.minimum(P, Q), np.maximum(P - Q, 0.0)
    reach, tokens, last = np.eye(len(P)), np.zeros(len(P)), np.zeros_like(P)
    for _ in range(k):
        tokens += reach.sum(axis=1)  # reaching position i emits one more token
        last += reach @ R  # the round ends on the replacement
        reach = reach @ A
    tokens += reach.sum(axis=1)  # all k accepted: the bonus token
    last += reach @ P
    return float(stationary(last) @ tokens)


def target_first_tokens(P, ctx, n):
    """The target's own joint of its next n tokens after ctx, shape (V,) * n:
    p(x1 | ctx) p(x2 | x1) ... p(xn | xn-1). What speculation must reproduce."""
    joint = np.asarray(P[ctx], float)
    for _ in range(n - 1):
        joint = joint[..., None] * P  # (..., x_j, 1) * (x_j, x_j+1)
    return joint


def exact_first_tokens(P, Q, ctx, n, k, rule="correct", draft_from=None):
    """The exact joint of the first n tokens speculative decoding emits after
    ctx, shape (V,) * n: verify_round's cases, weighted instead of sampled.

    A draft x at position i is drawn with D[d, x] (D: the table the draft
    samples from, Q unless draft_from says otherwise), kept with accept_prob,
    else replaced by y with (1 - accept) * residual[y], which ends the round;
    rounds chain on their last token. The weights come from the same
    accept_prob and residual a reader edits, so an edit there moves this
    too; an edit to verify_round's own lines does not (the sampled check
    runs verify_round itself).
    """
    check_rule(rule)
    D = Q if draft_from is None else draft_from

    @lru_cache(maxsize=None)  # memoised on (token, position, tokens left)
    def after(d, i, m):  # the next m tokens, given drafts 1..i passed and ended in d
        if m == 0:
            return 1.0
        p, out = P[d], np.zeros((len(P),) * m)
        if i == k:  # all k passed: the bonus token, then a new round from it
            for y in np.flatnonzero(p):
                out[y] += p[y] * after(y, 0, m - 1)
            return out
        for x, drawn, a, r in position_weights(p, Q[d], D[d], rule):
            out[x] += drawn * a * after(x, i + 1, m - 1)
            for y in np.flatnonzero(r):  # rejected: replaced by y
                rest = after(x, i + 1, m - 1) if rule == "continue" else after(y, 0, m - 1)
                out[y] += drawn * (1 - a) * r[y] * rest
        return out
    return after(ctx, 0, n)


def position_weights(p, q, drafts, rule="correct"):
    """One drafted position as verify_round's cases weigh it: for every x the
    draft row can propose, (x, its draft probability, P(kept), the row a
    rejection draws from), from the same accept_prob and residual."""
    q = np.full(len(p), 1.0 / len(p)) if rule == "uniform_q" else q  # as verify_round
    r = p if rule in ("no_resample", "uniform_q") else residual(p, q)
    return [(x, drafts[x], float(x == p.argmax()) if rule == "greedy" else accept_prob(p, q, x), r)
            for x in np.flatnonzero(drafts)]


def block_round_outcomes(P, Q, d, k, rule="correct"):
    """Every way one verify_block round from d can end, and its probability:
    [(tokens kept, the row the round's last token is drawn from, prob)].

    Unlike the token-wise rule, whether x_i is kept depends on the drafts
    after it, so this walks the whole tree of drafts (V^k leaves at most),
    with verify_block's arithmetic: the same accept_prob, block_threshold and
    block_residual, so an edit there moves this too (an edit to verify_block's
    own lines does not). P(tau = i) = h_i times the chance that no later
    position is kept.
    """
    outcomes = []

    def visit(kept, weight, prob):  # -> P(no position after len(kept) is kept)
        i, last = len(kept), (kept[-1] if kept else d)
        if i == k:
            return 1.0
        p, q, none = P[last], Q[last], 0.0
        for x in np.flatnonzero(q):
            w = accept_prob(weight * p, q, x)
            h = w if i + 1 == k or rule == "cumulative" else block_threshold(w, P[x], Q[x])
            later = visit(kept + [x], w, prob * q[x])
            row = P[x] if i + 1 == k else block_residual(
                1.0 if rule == "tokenwise_residual" else w, P[x], Q[x])
            if h * later > 0:  # an end that can happen (its row may be empty if not)
                outcomes.append((kept + [x], row, prob * q[x] * h * later))
            none += q[x] * (1 - h) * later
        return none

    outcomes.append(([], block_residual(1.0, P[d], Q[d]), visit([], 1.0, 1.0)))
    return outcomes


def chain_rounds(rounds, ctx, n):
    """The joint of the first n tokens after ctx, shape (V,) * n, when a round
    from d ends as rounds[d] lists; each round starts on the last token."""
    memo = {}

    def after(d, m):  # the next m tokens, a round starting at d
        if m == 0:
            return 1.0
        if (d, m) not in memo:
            out = np.zeros((len(rounds),) * m)
            for kept, row, prob in rounds[d]:
                if len(kept) >= m:
                    out[tuple(kept[:m])] += prob
                    continue
                for y in np.flatnonzero(row):
                    out[tuple(kept) + (y,)] += prob * row[y] / row.sum() * after(y, m - len(kept) - 1)
            memo[d, m] = out
        return memo[d, m]

    return after(ctx, n)


def exact_block_first_tokens(P, Q, ctx, n, k, rule="correct"):
    """exact_first_tokens for verify_block: the joint of the first n tokens."""
    check_rule(rule, BLOCK_RULES)
    return chain_rounds({d: block_round_outcomes(P, Q, d, k, rule) for d in range(len(P))}, ctx, n)


def exact_block_tokens_per_call(P, Q, k, rule="correct"):
    """exact_tokens_per_call for verify_block: the same chain of round starts,
    from the enumerated outcomes (there is no closed form)."""
    check_rule(rule, BLOCK_RULES)
    tokens, last = np.zeros(len(P)), np.zeros_like(P)
    for d in range(len(P)):
        for kept, row, prob in block_round_outcomes(P, Q, d, k, rule):
            tokens[d] += prob * (len(kept) + 1)
            last[d] += prob * row / row.sum()
    return float(stationary(last) @ tokens)


# A sampled distribution is never exactly its target, so "is it the target?"
# needs a test with a stated criterion, not a ratio to eyeball. Pearson's
# chi-square compares counts with what the target predicts; its p-value is the
# chance that the target itself, sampled as often, would fit this badly or
# worse. Below P_REJECT we call the sample NOT the target.

P_REJECT = 1e-3


def pearson(counts, probs, min_expected=5.0):
    """Pearson's chi-square of counts against probs: (statistic, dof).

    pearson([3, 7], [.5, .5]) -> (1.6, 1). Cells expected fewer than
    min_expected times are pooled into one; a count where probs is 0 is an
    infinite misfit (a token the target never emits).
    """
    counts, probs = np.ravel(counts).astype(float), np.ravel(probs).astype(float)
    if counts[probs == 0].sum() > 0:
        return math.inf, max(1, np.count_nonzero(probs) - 1)
    expected = counts.sum() * probs
    big = expected >= min_expected
    obs = np.r_[counts[big], counts[~big].sum()]
    exp = np.r_[expected[big], expected[~big].sum()]
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(((obs - exp) ** 2 / exp).sum()), max(1, len(exp) - 1)


def chi2_sf(x, dof):
    """P(X > x) for X chi-square with dof degrees of freedom: the p-value.

    chi2_sf(x, 2) = exp(-x / 2). It is Q(dof/2, x/2), the regularised upper
    incomplete gamma function: a power series below a + 1, a continued
    fraction above (Numerical Recipes, section 6.2).
    """
    a, x = dof / 2, x / 2
    if x <= 0 or x == math.inf:
        return 1.0 if x <= 0 else 0.0
    scale = math.exp(-x + a * math.log(x) - math.lgamma(a))
    if x < a + 1:  # P(a, x) = scale * sum_n x^n / (a (a+1) ... (a+n))
        term = total = 1 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            total += term
            if term < total * 1e-16:
                break
        return max(0.0, 1 - scale * total)
    return scale * gamma_fraction(a, x)


def gamma_fraction(a, x, tiny=1e-300):
    """The continued fraction 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)),
    by Lentz's method: Q(a, x) = exp(-x) x^a / Gamma(a) times this."""
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 1000):
        an, b = -i * (i - a), b + 2
        d = 1 / (an * d + b or tiny)
        c = b + an / c or tiny
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def fit_p_value(stat_dofs):
    """One p-value for independent Pearson tests: their statistics and dofs add."""
    stats, dofs = zip(*stat_dofs)
    return chi2_sf(sum(stats), sum(dofs))


def p_text(p):
    """A p-value as printed: p_text(0.4321) -> 'p = 0.43', tiny ones as a bound."""
    return "p < 1e-12" if p < 1e-12 else f"p = {p:.0e}" if p < 0.01 else f"p = {p:.2f}"


def fit_verdict(p):
    """The sampled check's verdict, from its p-value and P_REJECT."""
    return (f"consistent with the target ({p_text(p)})" if p >= P_REJECT
            else f"NOT the target ({p_text(p)})")


# -----------------------------------------------------------------------------
# 8. MAC counting: why checking k+1 tokens costs about one forward pass
# A decoder reads every weight once per forward pass whether it processes one
# position or sixteen; the multiply-accumulates (MACs) grow with the number of
# positions. Per token, per layer: attention projections q, k, v, o (4 d^2),
# scores and weighted sum over n_ctx cached positions (2 d n_ctx), and a
# SwiGLU MLP with three d x d_ff matrices (3 d d_ff), then the LM head (d V).


def macs_per_token(d_model, d_ff, layers, n_ctx, vocab):
    """Multiply-accumulates for one token through a Llama-style decoder."""
    per_layer = 4 * d_model**2 + 2 * d_model * n_ctx + 3 * d_model * d_ff
    return layers * per_layer + d_model * vocab


def weight_count(d_model, d_ff, layers, vocab):
    """Parameters of that decoder: layers, two RMSNorms each, embeddings, head."""
    per_layer = 4 * d_model**2 + 3 * d_model * d_ff + 2 * d_model
    return layers * per_layer + 2 * vocab * d_model + d_model


H100_FLOPS, H100_BYTES_PER_S = 989e12, 3.35e12  # dense bf16; HBM3 (H100 SXM)
H100_MEMORY = 80e9  # bytes of HBM3 on an H100 SXM
LLAMA2_7B = (4096, 11008, 32, 32000)  # d_model, d_ff, layers, vocab
DRAFT_SHAPE = (1536, 4096, 8, 32000)  # a decoder about 20x smaller


def pass_traffic(shape, n_ctx, positions, batch=1):
    """(MACs, bytes read) of one fp16 pass over batch sequences, each with
    `positions` new tokens after n_ctx cached ones. The weights are read once
    per pass and each sequence's KV cache once; the MACs grow with every
    position of every sequence."""
    d_model, d_ff, layers, vocab = shape
    # every weight matrix entry takes part in exactly one MAC per token, so the
    # weights are the MACs of one token with no context to attend to
    weight_bytes = 2 * macs_per_token(d_model, d_ff, layers, 0, vocab)
    kv_bytes = batch * 2 * 2 * layers * n_ctx * d_model  # K and V, fp16, per layer
    macs = batch * positions * macs_per_token(d_model, d_ff, layers, n_ctx, vocab)
    return macs, weight_bytes + kv_bytes


def roofline_time(macs, bytes_read, flops=H100_FLOPS, bandwidth=H100_BYTES_PER_S):
    """(seconds, 'memory' or 'compute'): a pass takes the longer of streaming
    its bytes and doing its MACs (2 FLOPs each), and that one bounds it."""
    t_mem, t_math = bytes_read / bandwidth, 2 * macs / flops
    return max(t_mem, t_math), ("memory" if t_mem >= t_math else "compute")


# Batching. A server decodes B sequences at once: each pass reads the weights
# once for all of them, so the arithmetic per byte grows with B, and the idle
# arithmetic that made verification free is spent on the batch instead.


def batch_speedup(alpha, k, batch, n_ctx, target=LLAMA2_7B, draft=DRAFT_SHAPE):
    """Speculation against plain decoding of the same batch, on the roofline:
    speedup(eq. 1's tokens, k, c, v), with c (a draft pass) and v (a (k+1)-
    position target pass) in plain passes of this batch. The draft is priced
    on its weights alone (its own KV cache is left out)."""
    plain = roofline_time(*pass_traffic(target, n_ctx, 1, batch))[0]
    c = roofline_time(*pass_traffic(draft, 0, 1, batch))[0] / plain
    v = roofline_time(*pass_traffic(target, n_ctx, k + 1, batch))[0] / plain
    return speedup(expected_tokens(alpha, k), k, c, v)


def break_even_batch(alpha, n_ctx, b_max=1 << 16, k_max=32):
    """The smallest batch at which no k in 1..k_max beats plain decoding, or
    None up to b_max: doubling, then bisection (the tests check it against a
    scan of every batch size)."""
    def helps(batch):
        return fastest_k(lambda k: batch_speedup(alpha, k, batch, n_ctx), k_max)[0] > 0
    hi = 1
    while helps(hi):
        if hi >= b_max:
            return None
        hi *= 2
    lo = hi // 2  # helps(lo) held, or hi is 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if helps(mid) else (lo, mid)
    return hi


# The real clock. Everything above counts calls; this puts a price on them.
# A Priced table is a table model that also runs a real matrix product on
# every lookup, so the unchanged stage functions decode on a real clock.


class Priced:
    """A table whose every lookup also pays a forward pass: W @ X, one column
    per context looked up. draft_tokens' Q[ctx] pays one column; verify_round's
    P[contexts] pays k+1 columns in one product, the verifying pass."""

    def __init__(self, table, W):
        self.table, self.W = table, W
        self.X = np.ones((W.shape[1], 64), W.dtype)

    def __getitem__(self, ctx):
        self.W @ self.X[:, :1 if np.isscalar(ctx) else len(ctx)]  # the pass, paid in full
        return self.table[ctx]

    def __len__(self):
        return len(self.table)


def clocked(f):
    """(wall-clock seconds, f())."""
    start = time.perf_counter()
    out = f()
    return time.perf_counter() - start, out


def median_time(f, repeats=3, calls=3):
    """Seconds per call of f(): the median over repeats of `calls` back-to-back
    calls, as a decoder makes them, after one warm-up call."""
    f()
    return float(np.median([clocked(lambda: [f() for _ in range(calls)])[0] / calls
                            for _ in range(repeats)]))


# -----------------------------------------------------------------------------
# 9. Where a good draft comes from: training it
# The speedup rides on alpha, a property of the pair. Many deployments draft
# with no trained model (n-grams from the prompt) or an off-the-shelf smaller
# one; the drafts that accept most are trained on the target's own outputs or
# distributions (EAGLE, Medusa-2's self-distillation, DistillSpec), not on
# ground-truth text. The draft here is too small to copy anything exactly:
# logits u v^T + b, 18 numbers where a full table has 30 free ones (each row
# of 6 probabilities has 5). Both trainers below minimise -sum S log q for some
# weights S[ctx, x]: the counts of a text, or pi(ctx) p(x | ctx).


def low_rank_draft(params):
    """The capacity-limited draft family: row-wise softmax of u v^T + b."""
    u, v, b = params
    logits = np.outer(u, v) + b
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def low_rank_step(params, G, lr):
    """One gradient step given G = d loss / d logits, through logits = u v^T + b."""
    u, v, b = params
    return [u - lr * G @ v, v - lr * G.T @ u, b - lr * G.sum(axis=0)]


def descend(S, steps, lr, seed=0, params=None):
    """Gradient descent on -sum S log q / sum S over the low-rank family.

    Per row the gradient of that loss w.r.t. the logits is n_ctx q - S[ctx]
    (softmax minus the weights), then the chain rule through u v^T + b.
    """
    rng = np.random.default_rng(seed)
    params = params or [0.1 * rng.standard_normal(len(S)) for _ in range(3)]
    S = S / S.sum()
    for _ in range(steps):
        G = S.sum(axis=1, keepdims=True) * low_rank_draft(params) - S  # d loss / d logits
        params = low_rank_step(params, G, lr)
    return params


def fit_text(tokens, steps=3000, lr=2.0):
    """(a) Cross-entropy on a text: S counts its bigrams."""
    return descend(bigram_counts(tokens), steps, lr)


def distill(P, steps=1000, lr=2.0):
    """(b) KL(p || q) averaged over the contexts the target visits: S = pi(ctx) p."""
    return descend(visit_joint(P), steps, lr)


def maximise_alpha(P, params, steps=2000, lr=0.5):
    """(c) Gradient ascent on alpha = sum_ctx pi(ctx) sum_x min(p, q) itself.

    d alpha / d q(x) is pi(ctx) where q < p (more mass there is accepted) and
    0 where q >= p; then back through the softmax: q * (g - <g, q>).
    """
    pi = stationary(P)
    for _ in range(steps):
        Q = low_rank_draft(params)
        g = pi[:, None] * (Q < P)
        G = -Q * (g - (g * Q).sum(axis=1, keepdims=True))  # d(-alpha) / d logits
        params = low_rank_step(params, G, lr)
    return params


def cross_entropy(S, Q):
    """-sum S log q / sum S, in nats per token (KL plus the entropy of S)."""
    return float(-(S * np.log(Q)).sum() / S.sum())


# -----------------------------------------------------------------------------
# Demos: the evidence, printed
# Every demo builds its own generator from a fixed seed, so a demo prints the
# same numbers alone or in the full run. The models: a peaky target table, an
# unrelated table of the same peakiness, and drafts blended from the two.

TARGET = random_table(1, sharpness=2.5)
UNRELATED = random_table(4, sharpness=2.5)
MIDDLING = blend(TARGET, UNRELATED, 0.5)
H100_FLOPS, H100_BYTES_PER_S = 989e12, 3.35e12  # dense bf16; HBM3 (H100 SXM)


def say(*sentences, clock=False):
    """Print a paragraph, wrapped at 78 columns: for sentences whose numbers and
    words are decided at run time, so their length is not known in advance.
    clock=True marks every line as holding a wall-clock measurement."""
    lines = textwrap.wrap(" ".join(s for s in sentences if s), 78 - len(CLOCK) * clock)
    print("\n".join(line + CLOCK * clock for line in lines))


def row_str(values, fmt="{:7.3f}"):
    return "".join(fmt.format(v) for v in values)


def grid_row(label, values):
    """One row of a probability grid, 0.050 printed as .050 so six fit in 33."""
    return f"{label:>3}" + "".join(f"{v:.3f}".lstrip("0").rjust(5) for v in values)


def measure(P, Q, k, n_rounds, seed, ctx=0, draft_from=None, verify=None):
    """n_rounds speculative rounds: (accepted / checked, tokens per target
    call, tokens, standard error of tokens per call, tokens of each round).

    A round that rejects draft i checked i+1 of its drafts; the ones after
    the rejection were never looked at. accepted / checked is the acceptance
    rate at the positions actually checked, which is not quite the paper's
    alpha (demo 3 says where they differ). draft_from: the table the draft
    really samples from, if verification is (wrongly) handed a different Q,
    as Hugging Face transformers shipped (demo 3). verify: as in spec_generate.
    """
    rng, drafter = np.random.default_rng(seed), Q if draft_from is None else draft_from
    verify = verify or verify_round
    accepted = checked = 0
    tokens, sizes = [], []
    for _ in range(n_rounds):
        out, n_acc = verify(P, Q, ctx, draft_tokens(drafter, ctx, k, rng), rng)
        accepted, checked = accepted + n_acc, checked + min(n_acc + 1, k)
        tokens += out
        sizes.append(len(out))
        ctx = out[-1]
    return accepted / checked, np.mean(sizes), tokens, np.std(sizes) / np.sqrt(n_rounds), sizes


def transition_tv(tokens, P):
    """TV between the text's next-token frequencies and P's rows, averaged over
    the contexts as often as the text visits them."""
    counts = bigram_counts(tokens, len(P))
    seen = counts.sum(axis=1)
    per_context = [seen[c] * tv_distance(counts[c] / seen[c], P[c]) for c in np.flatnonzero(seen)]
    return sum(per_context) / seen.sum()


def demo1_rule_by_hand(ctx=0):
    p, q = TARGET[ctx], MIDDLING[ctx]
    acc = np.array([accept_prob(p, q, x) for x in range(VOCAB)])
    r = residual(p, q)
    print(f"Context '{name(ctx)}'. Target p; middling draft q, a blend of half the target and "
          "half an\nunrelated table (blend weight 0.5).\n")
    print("token      p      q   min(1, p/q)    p - q   residual")
    for x in range(VOCAB):
        print(f"    {name(x)}  {p[x]:.3f}  {q[x]:.3f}  {acc[x]:11.3f}  {p[x] - q[x]:+7.3f}"
              f"  {r[x]:9.3f}")
    under, over = int(np.argmax(p - q)), int(np.argmax(q - p))
    print(f"\nDraft '{name(under)}': q = {q[under]:.3f} <= p = {p[under]:.3f}, under-proposed: "
          + ("always accepted." if acc[under] == 1 else
             f"accepted only\n  {acc[under]:.3f} of the time, where the rule keeps it always."))
    ratio = p[over] / q[over]
    print(f"Draft '{name(over)}': q = {q[over]:.3f} >  p = {p[over]:.3f}, over-proposed: "
          + (f"accepted with p/q = {ratio:.3f}," if abs(acc[over] - ratio) < 1e-12 else
             f"accepted {acc[over]:.3f}, NOT p/q = {ratio:.3f},")
          + f"\n  rejected {100 * (1 - acc[over]):.1f}% of the time; then the token is drawn "
          "from the residual.")
    beta = float(np.minimum(p, q).sum())
    kept, fixed = q * acc, (1 - beta) * r
    print(f"\nThe proof, token by token. P(reject) = 1 - sum min(p, q) = {1 - beta:.3f}.\n")
    print("token   kept: q*min(1,p/q)  +  P(reject)*residual  =  emitted       p")
    for x in range(VOCAB):
        print(f"    {name(x)}  {kept[x]:19.4f}  {fixed[x]:20.4f}  {kept[x] + fixed[x]:10.4f}"
              f"  {p[x]:6.4f}")
    gap = np.abs(kept + fixed - p)
    print(f"\nLargest |emitted - p| over the tokens: {gap.max():.1e} (the criterion: below "
          "1e-12).")
    if gap.max() < 1e-12:
        say("Emitted = p. Acceptance delivers min(p, q); a rejection happens with exactly",
            "the mass that is missing, and the residual puts it where p exceeds q. This",
            "holds for any q that covers what it drafts.")
    else:
        say(f"Emitted != p: token '{name(int(gap.argmax()))}' is off by {gap.max():.3f}.",
            "The rule as it stands does NOT deliver the target's distribution.")


def first_two(generate, n_runs, seed):
    """Counts of the first two tokens of generate(rng) over n_runs runs:
    counts[x1, x2]."""
    rng, counts = np.random.default_rng(seed), np.zeros((VOCAB, VOCAB))
    for _ in range(n_runs):
        x1, x2 = generate(rng)[:2]
        counts[x1, x2] += 1
    return counts


def truth_and_floor(ctx, n_runs, seed):
    """The target's joint of the first two tokens after ctx, P(x1, x2) =
    p(x1 | ctx) p(x2 | x1), and the TV that plain decoding gets from it in
    n_runs runs: how far a correct sample lands from noise alone."""
    truth = target_first_tokens(TARGET, ctx, 2)
    plain = first_two(lambda rng: plain_decode(TARGET, ctx, 2, rng), n_runs, seed)
    return truth, tv_distance(plain / n_runs, truth)


def exact_text(tv):
    """An exact TV as printed: small ones (rounding error, or a small bias) in
    e-notation, large ones to four places: 1.1e-16, 3.5e-04, 0.2361."""
    return f"{tv:.1e}" if tv < 0.01 else f"{tv:.4f}"


def both_checks(p_value, exact_tv):
    """One verdict from the two checks, the sample's test and the exact TV:
    'the target', 'NOT the target', or which one alone says NOT."""
    sampled, exact = p_value >= P_REJECT, exact_tv < 1e-9
    if sampled == exact:
        return "the target" if exact else "NOT the target"
    return "NOT (sampled)" if exact else "NOT (exact)"


def demo2_distribution(ctx=5, k=2, n_runs=1000):
    truth, floor = truth_and_floor(ctx, n_runs, seed=2)
    counts = {rule: first_two(lambda rng: spec_generate(TARGET, UNRELATED, ctx, 2, k, rng, rule)[0],
                              n_runs, seed=2) for rule in RULES}
    exact = {rule: exact_first_tokens(TARGET, UNRELATED, ctx, 2, k, rule) for rule in RULES}
    print(f"Draft: the unrelated table (alpha = {pair_alpha(TARGET, UNRELATED):.2f}), k = {k}. "
          f"From context '{name(ctx)}',\n{n_runs:,} runs per rule; each run keeps the first "
          "two tokens it emits, x1 then x2.\n")
    header = "x1\\x2" + "".join(f"{name(x):>5}" for x in range(VOCAB))
    print(f"{'target joint P(x1, x2)':^35}      {'sampled, correct rule':^35}".rstrip())
    print(header + "      " + header)
    for x in range(VOCAB):
        print("  " + grid_row(name(x), truth[x]) + "      "
              + grid_row(name(x), counts["correct"][x] / n_runs))
    print("\nfirst token x1 " + "".join(f"{name(x):>7}" for x in range(VOCAB)))
    print(f"{'target':14} " + row_str(TARGET[ctx]))
    for rule in RULES:
        print(f"{rule:14} " + row_str(counts[rule].sum(axis=1) / n_runs))
    print(f"\n{'':13}{'sampled':^22}{'exact, no sampling':^24}".rstrip())
    print(f"{'rule':13}{'TV(x1, x2)':>11}{'fit':>11}{'TV(x1, x2)':>13}{'TV(x1)':>11}  verdict")
    p_values = {rule: chi2_sf(*pearson(counts[rule], truth)) for rule in RULES}
    tv_pair = {rule: tv_distance(exact[rule], truth) for rule in RULES}
    tv_first = {rule: tv_distance(exact[rule].sum(axis=1), TARGET[ctx]) for rule in RULES}
    for rule in RULES:
        print(f"{rule:13}{tv_distance(counts[rule] / n_runs, truth):11.4f}"
              f"{p_text(p_values[rule]):>11}{exact_text(tv_pair[rule]):>13}"
              f"{exact_text(tv_first[rule]):>11}  {both_checks(p_values[rule], tv_pair[rule])}")
    print(f"{'floor':13}{floor:11.4f}   <- the target itself, sampled {n_runs:,} times")
    demo2_verdicts(p_values, tv_pair, tv_first)
    demo2_greedy(n_tokens=1000)


def demo2_verdicts(p_values, tv_pair, tv_first):
    """Demo 2's sentences, each decided by the numbers in its table."""
    print()
    say("fit: Pearson's chi-square p-value of the sample against the target joint;",
        f"below {P_REJECT:g} the sample is NOT the target. exact: the TV of",
        "exact_first_tokens, which follows the probability mass through accept_prob",
        "and residual with no sampling; above 1e-9 it is a bias, not rounding.")
    print()
    verdict = both_checks(p_values["correct"], tv_pair["correct"])
    sample, exact = fit_verdict(p_values["correct"]), exact_text(tv_pair["correct"])
    if verdict == "the target":
        say(f"The correct rule emits the target's distribution: its sample is {sample}",
            "and its exact TV is rounding error. The poor draft (low alpha) cost speed,",
            "not correctness.")
    elif verdict == "NOT the target":
        say(f"The 'correct' rule does NOT emit the target's distribution: its sample is",
            f"{sample} and its exact TV is {exact}. A stage is broken.")
    elif verdict == "NOT (sampled)":
        say(f"The 'correct' rule's sample is {sample}, though its exact TV is rounding",
            "error. The exact check follows accept_prob and residual but not",
            "verify_round's own lines, so the bug lives in verify_round.")
    else:
        say(f"The 'correct' rule's exact TV is {exact}, a bias its sample did not",
            f"resolve ({sample}): a small bug, larger than rounding, smaller than the",
            "sample's noise.")
    caught = [r for r in RULES[1:] if both_checks(p_values[r], tv_pair[r]) == "NOT the target"]
    missed = [r for r in RULES[1:] if r not in caught]
    print()
    say(f"Caught by both checks: {', '.join(caught) or 'none'}.",
        f"Not caught: {', '.join(missed)}." if missed else "",
        "'greedy' keeps a draft only if it is p's argmax; 'no_resample' refills",
        "rejections from p, counting mass twice that q already delivered.",
        "'continue' gets x1 exactly right (exact TV(x1) "
        f"{exact_text(tv_first['continue'])}) and the pair wrong: the drafts it kept "
        "were conditioned on a token that had been replaced."
        if tv_first["continue"] < 1e-9 <= tv_pair["continue"] else "",
        "'uniform_q' takes the draft's probability to be 1/V and refills from p: no",
        "public project is on record with exactly this bug, but it is of the class",
        "that shipped (Hugging Face transformers #32867 and #47932: verification",
        "handed a q the draft did not sample from).")


def demo2_greedy(n_tokens, k=4):
    """Demo 2, part two: greedy decoding is sampling from temper(P, 0)."""
    P0 = temper(TARGET, 0)
    plain = plain_decode(P0, 0, n_tokens, np.random.default_rng(0))
    print(f"\nGreedy is sampling at T = 0 (the paper's section 2.2): temper(P, 0) has\n"
          f"one-hot rows. The unchanged verify_round, {n_tokens:,} tokens from 'a', k = {k}:\n")
    print(f"{'draft, at T = 0':24}{'same tokens as argmax decoding':>32}{'target calls':>14}")
    accepted, same = {}, {}
    for label, w in (("middling (weight 0.5)", 0.5), ("blend weight 0.9", 0.9)):
        Q0 = temper(blend(TARGET, UNRELATED, w), 0)
        tokens, calls, accepted[w] = spec_generate(P0, Q0, 0, n_tokens, k, np.random.default_rng(0))
        same[w] = sum(a == b for a, b in zip(tokens, plain))
        print(f"{label:24}{f'{same[w]:,} of {n_tokens:,}':>32}{calls:14,}")
    agree = np.flatnonzero(P0.argmax(axis=1) == temper(MIDDLING, 0).argmax(axis=1))
    print()
    say("Both are argmax decoding, token for token." if min(same.values()) == n_tokens
        else "NOT argmax decoding: some tokens differ.",
        "At T = 0, min(1, p/q) is 1 for p's argmax and 0 for anything else, so",
        "argmax agreement IS the acceptance rule. The middling draft shares the",
        f"target's argmax in {len(agree)} of {VOCAB} contexts"
        + (f" ({', '.join(map(name, agree))})" if len(agree) else "") + ", but the greedy",
        f"text from 'a' visits {', '.join(map(name, sorted(set(plain))))}: it had",
        f"{accepted[0.5]} drafts accepted. At T > 0 the same check is the 'greedy' bug.")


def fits_exact(measured, se, exact, z=4):
    """Does a sampled mean agree with its exact value? Within z standard
    errors (the criterion printed beside it), or to rounding when se is 0."""
    return abs(measured - exact) <= z * se + 1e-9


def demo3_acceptance(k=4, c=0.1, n_rounds=500):
    weights = (1, 0.9, 0.75, 0.5, 0.25, 0)
    drafts = [(f"blend weight {w:.2f}", blend(TARGET, UNRELATED, w)) for w in weights]
    drafts += [(f"target at T = {T}", temper(TARGET, T)) for T in (1.0, 1.3, 2.0, 0.5)]
    print(f"k = {k}, {n_rounds:,} rounds per draft. Blends mix the target with the unrelated\n"
          "table. The last four draft with the target itself, tempered: T = 1.0 is the\n"
          "target unchanged (the control), the others the wrong temperature.\n")
    print(f"{'':18}{'accepted':>9}{'paper':>7}{'tokens per target call':>28}{'speedup':>10}")
    print(f"{'draft':18}{'/ checked':>9}{'alpha':>7}{'measured':>10}{'eq. 1':>7}{'exact':>7}"
          f"{'fits':>6}{f'c = {c}':>9}")
    misfits = []
    for label, Q in drafts:
        rate, tokens, _, se, _ = measure(TARGET, Q, k, n_rounds, seed=3)
        alpha, exact = pair_alpha(TARGET, Q), exact_tokens_per_call(TARGET, Q, k)
        fits = fits_exact(tokens, se, exact)
        misfits += [] if fits else [(label, tokens, exact)]
        print(f"{label:18}{rate:9.3f}{alpha:7.3f}{tokens:10.2f}{expected_tokens(alpha, k):7.2f}"
              f"{exact:7.2f}{'yes' if fits else 'NO':>6}"
              f"{speedup(tokens, k, c):9.2f}")
    print()
    say("fits: the measured tokens per call lies within 4 standard errors of the",
        "exact value (exact_tokens_per_call follows the probability mass with no",
        "sampling and no assumption).",
        "Every row fits: the sampled rounds and the exact mass agree." if not misfits else
        "NOT every row fits: " + "; ".join(f"{label} measures {t:.2f} where the exact value "
                                           f"is {e:.2f}" for label, t, e in misfits[:2])
        + (f"; and {len(misfits) - 2} more" if len(misfits) > 2 else "")
        + ". The rounds that ran are not the rounds the math describes.")
    demo3_alpha_words(k)
    demo3_temperatures(k, c, n_rounds)
    demo3_one_sided(k, 2 * n_rounds)


def demo3_alpha_words(k):
    """Demo 3: what the columns mean, with the numbers that show where they part."""
    a = pair_alpha(TARGET, MIDDLING)
    naive, right = 1 + k * a, exact_tokens_per_call(TARGET, MIDDLING, k)
    rate1 = {label: exact_tokens_per_call(TARGET, Q, 1) - 1
             for label, Q in (("middling", MIDDLING), ("unrelated", UNRELATED))}
    print()
    say(f"The naive estimate 1 + k*alpha gives {naive:.2f} tokens per call for the",
        f"middling draft; the exact value is {right:.2f}, so it overstates by",
        f"{100 * (naive / right - 1):.0f}%: it forgets that a rejection ends the round.")
    print()
    say("The paper's alpha is sum min(p, q) averaged over the contexts as often as",
        "the target visits them; eq. 1 assumes that one alpha holds at every",
        "position. accepted / checked is the acceptance rate at the positions",
        "actually checked, and a round starts on the token that ended the last one,",
        "so the two differ, most at k = 1, where the rate is exactly tokens per call",
        f"- 1: the middling draft {rate1['middling']:.4f} against alpha {a:.4f}, the",
        f"unrelated one {rate1['unrelated']:.4f} against {pair_alpha(TARGET, UNRELATED):.4f}.",
        "Speed rides on alpha, and a perfect model sampled at the wrong temperature is",
        "just a worse draft.")


def transition_p_value(tokens, P):
    """The fit of a text's transitions to P's rows: one Pearson test per
    context the text visits, pooled into one p-value."""
    counts = bigram_counts(tokens, len(P))
    return fit_p_value(pearson(counts[c], P[c]) for c in np.flatnonzero(counts.sum(axis=1)))


def demo3_temperatures(k, c, n_rounds, n_exact=3):
    """Demo 3, part two: both models sampled at temperature T, as in production."""
    print(f"\nSampling temperature T applied to BOTH tables (middling draft, k = {k}). TV:\n"
          "the output's next-token frequencies against the tempered target; floor:\n"
          "the same for plain decoding of the tempered target, as many tokens; fit:\n"
          f"the test of those transitions; exact: the TV of the first {n_exact} tokens "
          "after 'a'.\n")
    print(f"{'T':>4}{'alpha':>7}{'tokens/call':>13}{'speedup':>9}{'TV':>8}{'floor':>8}"
          f"{'fit':>12}{'exact':>9}")
    alpha, failed, p_min = {}, [], 1.0
    for T in (0, 0.5, 1.0, 1.5, 2.0):
        P_T, Q_T = temper(TARGET, T), temper(MIDDLING, T)
        _, tokens_per_call, tokens, *_ = measure(P_T, Q_T, k, n_rounds, seed=6)
        plain = plain_decode(P_T, 0, len(tokens), np.random.default_rng(6))
        alpha[T], p = pair_alpha(P_T, Q_T), transition_p_value(tokens, P_T)
        tv_exact = tv_distance(exact_first_tokens(P_T, Q_T, 0, n_exact, k),
                               target_first_tokens(P_T, 0, n_exact))
        failed += [] if both_checks(p, tv_exact) == "the target" else [f"{T}"]
        p_min = min(p_min, p)
        print(f"{T:4.1f}{alpha[T]:7.3f}{tokens_per_call:13.2f}{speedup(tokens_per_call, k, c):9.2f}"
              f"{transition_tv(tokens, P_T):8.4f}{transition_tv(plain, P_T):8.4f}"
              f"{p_text(p):>12}{exact_text(tv_exact):>9}")
    print()
    if failed:
        say("NOT every temperature emits its tempered target: at T =", ", ".join(failed),
            f"the fit has p < {P_REJECT:g} or the exact TV is above 1e-9.")
    else:
        say(f"Every temperature emits its tempered target: every fit has p >= {P_REJECT:g}",
            f"(the smallest is {p_text(p_min)[4:]}) and every exact TV is rounding error.")
    rising = all(alpha[a] < alpha[b] for a, b in ((0.5, 1.0), (1.0, 1.5), (1.5, 2.0)))
    say(f"alpha rises with T here, {alpha[0.5]:.3f} at T = 0.5 to {alpha[2.0]:.3f} at T = 2:",
        "heating flattens both rows toward uniform, and sum min(p, q) -> 1 as they",
        "meet." if rising else "alpha does not rise steadily with T for this pair.",
        f"At T = 0 alpha is argmax agreement, {alpha[0]:.3f} here. The paper's Table 3",
        "goes the other way for T5-XXL drafted by the off-the-shelf T5-small (0.75 at",
        "T = 0, 0.62 at T = 1), and the paper reads it as: the sharper the",
        "distribution, the higher alpha. Which way it goes depends on the pair.")


def demo3_one_sided(k, n_rounds, T=0.5, n_exact=3):
    """Two shipped bugs: a temperature applied to one model and not the other."""
    P_T, Q_T = temper(TARGET, T), temper(MIDDLING, T)
    truth = target_first_tokens(P_T, 0, n_exact)
    cases = (("q is not what the draft sampled", P_T, MIDDLING, Q_T),
             ("p untempered, q tempered", TARGET, Q_T, None))
    print(f"\nA temperature on one side only, T = {T} requested, {n_rounds:,} rounds each; "
          "fit and\nexact against the T = 0.5 target, as above.\n")
    print(f"{'the bug':34}{'TV':>8}{'fit':>12}{'exact':>9}  verdict")
    for label, P, Q, drafted_from in cases:
        tokens = measure(P, Q, k, n_rounds, seed=7, draft_from=drafted_from)[2]
        p = transition_p_value(tokens, P_T)
        exact = exact_first_tokens(P, Q, 0, n_exact, k, draft_from=drafted_from)
        tv_exact = tv_distance(exact, truth)
        print(f"{label:34}{transition_tv(tokens, P_T):8.4f}{p_text(p):>12}"
              f"{exact_text(tv_exact):>9}  {both_checks(p, tv_exact)}")
    tv_t1 = tv_distance(exact, target_first_tokens(TARGET, 0, n_exact))
    print()
    say("The first is what Hugging Face transformers shipped (#32867: a greedy",
        "assistant's tokens checked against its softmax q; #47932: drafts sampled",
        "after top-k, checked against the raw q): q must be the distribution the draft",
        "actually sampled from. The second is vLLM's (#9834, fixed by #10198):",
        "verification used the target's probabilities at temperature 1 while the",
        f"draft had the request's settings. Its exact TV from the T = 1 target is",
        f"{exact_text(tv_t1)}:", "it emits exactly the T = 1 target, so the request's"
        if tv_t1 < 1e-9 else "not even the T = 1 target, so the request's",
        "temperature is silently lost.")


def demo4_draft_length(c=0.1, k_max=12, n_rounds=300):
    rows = [(k, *measure(TARGET, MIDDLING, k, n_rounds, seed=4)[:2],
             exact_tokens_per_call(TARGET, MIDDLING, k)) for k in range(1, k_max + 1)]
    print(f"Middling draft (blend weight 0.5), c = {c}, {n_rounds:,} rounds per k; rate is\n"
          "accepted / checked, as in demo 3.\n")
    print(f"{'':11}{'tokens per call':>17}{'speedup':>16}")
    print(f"{'k':>3}{'rate':>8}{'measured':>10}{'exact':>7}{'measured':>10}{'exact':>7}")
    for k, alpha, tokens, exact in rows:
        print(f"{k:3d}{alpha:8.3f}{tokens:10.2f}{exact:7.2f}{speedup(tokens, k, c):10.2f}"
              f"{speedup(exact, k, c):7.2f}")
    best_measured = max(rows, key=lambda r: speedup(r[2], r[0], c))[0]
    best_exact = max(rows, key=lambda r: speedup(r[3], r[0], c))[0]
    a = pair_alpha(TARGET, MIDDLING)
    print()
    say(f"Best k: {best_measured} measured, {best_exact} exact. Tokens per call saturates",
        f"near 1 / (1 - alpha) = {1 / (1 - a):.2f}: a round ends at its first rejection and",
        "throws the rest of its drafts away, while the cost 1 + k*c keeps growing with",
        "every token drafted. So the speedup peaks, then falls; near the peak it is flat.")
    print(f"\nBest k by eq. 1 at c = {c}, next to the {best_measured} measured above:\n")
    print(f"{'alpha':>7}{'k':>5}{'speedup':>9}")
    for al in (0.5, 0.7, 0.9, a):
        k_best, s_best = best_k(al, c)
        print(f"{al:7.3f}{k_best:5d}{s_best:9.2f}" + ("  <- this draft's alpha" if al == a else ""))


def demo5_break_even(k=4, n_rounds=1500):
    alpha, tokens, *_ = measure(TARGET, MIDDLING, k, n_rounds, seed=5)
    a, c_star = pair_alpha(TARGET, MIDDLING), break_even_c(tokens, k)
    exact = [exact_tokens_per_call(TARGET, MIDDLING, j) for j in range(1, 17)]
    print(f"Middling draft, k = {k}: accepted / checked = {alpha:.3f}, {tokens:.2f} tokens per "
          "call,\n"
          f"so c* = (tokens - 1) / k = {c_star:.3f}. Right: the best k at each c, by eq. 1\n"
          f"(alpha = {a:.3f}) and exactly for these tables, and Corollary 3.9's bound,\n"
          "(1 + alpha) / (1 + c).\n")
    print(f"{'k = 4, measured':>24}{'best, eq. 1':>14}{'best, exact':>14}")
    print(f"{'c':>6}{'speedup':>9}{'':9}{'k':>4}{'speedup':>9}{'k':>5}{'speedup':>9}"
          f"{'bound':>11}")
    edge = []  # costs where eq. 1 promises a gain and the real tables lose
    for c in (0.05, 0.1, 0.2, 0.3, c_star, 0.6, 0.7, 0.8, 1.0):
        s = speedup(tokens, k, c)  # at c* exactly 1, up to rounding
        k_eq, s_eq = best_k(a, c, k_max=16)
        s_ex, k_ex = max((speedup(t, j + 1, c), j + 1) for j, t in enumerate(exact))
        edge += [c] if k_eq and s_ex < 1 else []
        print(f"{c:6.3f}{s:9.2f}{'  slower' if s < 1 - 1e-9 else '':9}{k_eq:4d}{s_eq:9.3f}"
              f"{k_ex:5d}{s_ex:9.3f}{(1 + a) / (1 + c):11.3f}")
    print()
    say("Corollary 3.9: if alpha > c, some k beats plain decoding, by at least",
        "(1 + alpha) / (1 + c). In eq. 1's world the converse holds too (alpha <= c:",
        "no k helps); k = 0 above means none does.",
        f"The tables disagree at the edge: at c = {', '.join(map(str, edge))} < alpha the "
        "best real k still loses. Eq. 1 assumes one alpha everywhere; a round here "
        "starts on the token that ended the last one, and there beta averages "
        f"{exact[0] - 1:.3f}, not {a:.3f}." if edge else "")
    print("\nA large but poor draft: the unrelated table at c = 0.25.\n")
    print(f"{'k':>3}{'rate':>8}{'tokens per call':>17}{'speedup':>9}")
    for k_poor in (1, 2, 4, 8):
        a_poor, t, *_ = measure(TARGET, UNRELATED, k_poor, n_rounds, seed=5)
        s = speedup(t, k_poor, 0.25)
        print(f"{k_poor:3d}{a_poor:8.3f}{t:17.2f}{s:9.2f}  {'slower' if s < 1 else ''}".rstrip())
    print("\nEvery drafted token costs c whether or not it survives, so a draft must be\n"
          "cheap AND agree with the target. With the rate accepted / checked at or\n"
          "below c nothing helps: tokens per call <= 1 + k*rate <= 1 + k*c. With the\n"
          "paper's alpha that converse is eq. 1's, not the paper's (Corollary 3.9 states\n"
          "only the other direction): on real tables it can fail, as at the edge above.")


def demo6_free_compute(n_ctx=512, clock_size=4096):
    d_model, d_ff, layers, vocab = LLAMA2_7B
    params = weight_count(*LLAMA2_7B)
    ridge = H100_FLOPS / 2 / H100_BYTES_PER_S  # MACs per byte at the roofline knee
    print(f"A Llama-2-7B-shaped decoder in fp16: d_model {d_model}, d_ff {d_ff}, {layers} "
          f"layers,\nvocabulary {vocab}, {n_ctx} tokens of context; {params / 1e9:.2f} billion "
          "parameters by the\nshape's own count. One pass reads every weight once, however "
          "many positions.\nGMACs: billions of multiply-accumulates. The times are a "
          "roofline model on an\nH100 SXM, not a measurement: the longer of streaming "
          "the bytes and doing the\narithmetic.\n")
    print(f"{'positions':>9}{'GMACs':>9}{'GB read':>9}{'MACs/byte':>11}"
          f"{'H100 roofline time':>21}{'vs 1':>7}")
    t1 = roofline_time(*pass_traffic(LLAMA2_7B, n_ctx, 1))[0]
    for n in (1, 2, 4, 8, 16):
        macs, bytes_read = pass_traffic(LLAMA2_7B, n_ctx, n)
        t, bound = roofline_time(macs, bytes_read)
        print(f"{n:9d}{macs / 1e9:9.1f}{bytes_read / 1e9:9.2f}{macs / bytes_read:11.2f}"
              f"{t * 1e3:11.2f} ms {bound:>7}{t / t1:7.2f}")
    one = pass_traffic(LLAMA2_7B, n_ctx, 1)
    one = one[0] / one[1]
    print(f"\nH100 SXM ridge point (the MACs per byte where a pass stops being memory-bound):"
          f"\n{H100_FLOPS / 1e12:.0f} TFLOP/s / 2 / {H100_BYTES_PER_S / 1e12:.2f} "
          f"TB/s = {ridge:.0f} MACs per byte.")
    print(f"\nOne decoding step streams every weight from memory to do {one:.2f} MACs per\n"
          f"byte; in that time the chip could do {ridge / one:.0f} times more arithmetic. Up to\n"
          f"about {ridge / one:.0f} positions, a pass costs what a pass over one position costs:\n"
          "the draft's k guesses are checked with arithmetic that was idle anyway.")
    print("\nThe price is paid in arithmetic: the paper's Table 1 (c = c_hat = 0; c_hat is\n"
          "the draft's arithmetic per token as a fraction of the target's), from eq. 1\n"
          "and Theorem 3.11. More operations in total, less time.\n")
    print(f"{'alpha':>6}{'k':>4}{'operations':>12}{'speed':>8}")
    for alpha, k in ((0.6, 2), (0.7, 3), (0.8, 2), (0.8, 5), (0.9, 2), (0.9, 10)):
        print(f"{alpha:6.1f}{k:4d}{operations_factor(alpha, k, 0):11.2f}x"
              f"{speedup(expected_tokens(alpha, k), k, 0):7.2f}x")
    demo6_batch()
    demo6_on_this_machine(clock_size)


def demo6_batch(batches=(1, 4, 16, 64, 256, 1024, 4096), contexts=(16, 512), alphas=(0.7, 0.9)):
    """Demo 6, part two: a server decoding a batch, on the same roofline."""
    print(f"\nA server decodes B sequences at once. One pass reads the weights once and each\n"
          "sequence's KV cache, and does B (k+1) positions of arithmetic. The draft, a\n"
          f"decoder of d_model {DRAFT_SHAPE[0]}, d_ff {DRAFT_SHAPE[1]}, {DRAFT_SHAPE[2]} layers "
          f"({weight_count(*DRAFT_SHAPE) / 1e9:.2f} billion parameters,\n"
          f"{weight_count(*LLAMA2_7B) / weight_count(*DRAFT_SHAPE):.0f}x smaller), is batched "
          "alike. Speedup: over plain decoding of the same\nbatch, by eq. 1's tokens per call; "
          "bound: what limits the verifying pass.")
    for n_ctx in contexts:
        print(f"\n{n_ctx} tokens of context.\n")
        print((f"{'':14}" + "".join(f"{f'alpha = {a}':^23}" for a in alphas)).rstrip())
        print(f"{'B':>6}{'GB':>8}" + f"{'k':>6}{'speedup':>9}{'bound':>8}" * len(alphas))
        for batch in batches:
            gb = pass_traffic(LLAMA2_7B, n_ctx, 1, batch)[1] / 1e9
            row = f"{batch:6d}{gb:8.1f}"
            if gb * 1e9 > H100_MEMORY:
                print(row + f"  does not fit in {H100_MEMORY / 1e9:.0f} GB")
                continue
            for a in alphas:
                k, s = fastest_k(lambda k: batch_speedup(a, k, batch, n_ctx), 32)
                bound = roofline_time(*pass_traffic(LLAMA2_7B, n_ctx, k + 1, batch))[1]
                row += f"{k:6d}{s:9.2f}{bound if k else '':>8}"
            print(row.rstrip())
        demo6_batch_verdict(n_ctx, alphas)
    print()
    say("These are roofline times, not measurements. The model leaves out attention's",
        "own costs beyond its MACs and KV reads (the softmax, the kernels'",
        "efficiency), kernel launch overhead, and the draft's KV cache. Servers",
        "act on the same picture: vLLM's documentation scopes speculative decoding to",
        '"medium-to-low QPS (queries per second), memory-bound workloads", and',
        "documents dynamic speculative decoding for changing the draft length under",
        "load.")


def demo6_batch_verdict(n_ctx, alphas, b_max=1 << 16):
    """The batch size beyond which no k helps, for each alpha, and why."""
    m, w = pass_traffic(LLAMA2_7B, n_ctx, 1, 1)[0], pass_traffic(LLAMA2_7B, n_ctx, 1, 0)[1]
    kv = pass_traffic(LLAMA2_7B, n_ctx, 1, 1)[1] - w  # one sequence's KV cache
    ridge = H100_FLOPS / 2 / H100_BYTES_PER_S
    ends = {a: break_even_batch(a, n_ctx, b_max) for a in alphas}
    print()
    say("k = 0: no k beats plain decoding.",
        "; ".join(f"{'at' if i else 'At'} alpha = {a}, " + (
            f"no k helps from B = {b:,}" if b else f"some k helps at every B up to {b_max:,}")
            for i, (a, b) in enumerate(ends.items())) + ".",
        f"{int((H100_MEMORY - w) / kv):,} sequences of this context fit in",
        f"{H100_MEMORY / 1e9:.0f} GB beside the weights.", why_batch(m, w, kv, ridge))


def why_batch(m, w, kv, ridge):
    """Why the batch does or does not end speculation, from one token's MACs m,
    the weights' bytes w and one sequence's KV-cache bytes kv."""
    if m > ridge * kv:  # MACs per byte B m / (w + B kv) crosses the ridge
        return (f"A plain pass reaches the ridge at B = {ridge * w / (m - ridge * kv):,.0f}: "
                "past it every extra position a verifying pass checks costs full price.")
    return (f"As B grows a plain pass tends to {m / kv:.1f} MACs per byte, below the ridge: "
            "each sequence's KV cache is read once and shared by its k+1 positions, so a "
            f"verifying pass of up to {ridge * kv / m:.0f} positions per sequence stays "
            "memory-bound at any batch and costs what a plain pass does.")


def demo6_on_this_machine(size):
    """Demo 6 on a real clock: a size x size float32 W (4096: 64 MiB, far past
    the last-level cache) stands in for the target, size/8 x size for the draft."""
    W = np.full((size, size), 1e-3, np.float32)
    X = np.ones((size, 17), np.float32)
    t1 = demo6_clock(W, X)
    demo6_why(W, X, t1, n_small=min(1024, size))
    demo6_cost_model(W, np.full((size // 8, size), 1e-3, np.float32), X)


CLOCK = "  (clock)"  # marks every printed line that holds a wall-clock measurement


def blas_name():
    """The BLAS numpy calls for W @ X, as its build reports it."""
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']}"
    except (AttributeError, KeyError, TypeError):
        return "unknown"


def demo6_clock(W, X):
    """Demo 6, part two: what a pass over 1 to 16 positions costs on this machine."""
    print(f"\nThe same question on this machine: y = W @ X, W float32 {W.shape[0]} x "
          f"{W.shape[1]} ({W.nbytes >> 20} MiB),\nX with one column per position, through {blas_name()}.\n"
          "Lines marked (clock) are wall-clock measurements (medians of 3 calls) and\n"
          "change from run to run.\n")
    print(f"{'positions':>9}{'time':>11}{'x one':>8}")
    median_time(lambda: W @ X, repeats=1)  # wake the BLAS threads and the caches first
    times = {n: median_time(lambda: W @ X[:, :n], calls=1) for n in (1, 2, 4, 8, 16)}
    for n, t in times.items():
        print(f"{n:9d}{t * 1e3:8.2f} ms{t / times[1]:8.2f}{CLOCK}")
    return times[1]


def demo6_why(W, X, t1, n_small=1024):
    """Demo 6: is the multi-column cost memory, or the BLAS's few-column path?"""
    two = median_time(lambda: W @ X[:, :2]) / t1
    twice = median_time(lambda: (W @ X[:, :1], W @ X[:, 1:2])) / t1
    small, x = W[:n_small, :n_small].copy(), X[:n_small]  # 4 MiB: stays in cache
    in_cache = median_time(lambda: small @ x[:, :2]) / median_time(lambda: small @ x[:, :1])
    square = median_time(lambda: small @ small, repeats=1, calls=2)
    flops, bandwidth = 2 * n_small**3 / square, W.nbytes / t1
    columns = 2 * flops / bandwidth  # MACs per second / weights streamed per second
    print(f"\n{'two positions, as':42}{'x one column':>14}")
    for label, ratio in (("one 2-column product", two), ("two 1-column products", twice),
                         (f"one 2-column product, {small.nbytes >> 20} MiB W in cache",
                          in_cache)):
        print(f"{label:42}{ratio:14.2f}{CLOCK}")
    print()
    say(f"This CPU's arithmetic ({flops / 1e9:.0f} GFLOP/s, a {n_small} x {n_small} square",
        f"product) could do about {columns:.0f} columns in the time the 1-column pass",
        f"takes to stream W ({bandwidth / 1e9:.0f} GB/s): by the roofline, {columns:.0f}",
        "columns for the price of one.", clock=True)
    if in_cache > 1.5 and twice < two:
        say("So the extra cost is the BLAS's few-column matrix-matrix path, not the",
            "memory and not the CPU's arithmetic: it stays with W in cache, and two",
            "separate 1-column products beat one 2-column product.",
            "(OpenBLAS's sgemm repacks every weight, and its kernel's wide side spans",
            "the few columns.)" if "openblas" in blas_name().lower() else "", clock=True)
    else:
        say("Here the extra cost does NOT look like the BLAS's few-column path alone:",
            "it shrinks with W in cache, or as two 1-column products.", clock=True)
    say(f"This BLAS charges {two:.1f}x for two.", clock=True)


def calibrate(W, W_draft, X, k, reps=4):
    """c and v per repeat, priced as a decoder pays them: a one-column target
    pass (plain decoding's step), then a round: k one-column draft passes and
    one (k+1)-column target pass, each in units of that one-column pass."""
    c, v = [], []
    W @ X[:, :1]  # a warm-up pass, as a decoder has always just made one
    for _ in range(reps):
        t1 = clocked(lambda: W @ X[:, :1])[0]
        c.append(np.mean([clocked(lambda: W_draft @ X[:, :1])[0] for _ in range(k)]) / t1)
        v.append(clocked(lambda: W @ X[:, :k + 1])[0] / t1)
    return np.array(c), np.array(v)


def demo6_cost_model(W, W_draft, X, ks=(4, 8, 16), n_plain=20):
    """Demo 6, part three: predict the speedup from a calibration, then decode."""
    print(f"\nCalibration before decoding (draft W {W_draft.shape[0]} x {W_draft.shape[1]}): "
          "a (k+1)-column target\npass, then k one-column draft passes, 4 repeats; c and v "
          "in one-column\ntarget passes. median (min-max over the repeats):\n")
    print(f"{'k':>4}{'c':>8}{'':14}{'v':>6}")
    calib = {k: calibrate(W, W_draft, X, k) for k in ks}
    for k, (c, v) in calib.items():
        print(f"{k:4d}{np.median(c):8.3f}  ({c.min():.3f}-{c.max():.3f}){np.median(v):6.2f}  "
              f"({v.min():.2f}-{v.max():.2f}){CLOCK}")
    good = blend(TARGET, UNRELATED, 0.95)
    predicted = {k: predict(calib[k], exact_tokens_per_call(TARGET, good, k), k) for k in ks}
    k_good = max(ks, key=lambda k: predicted[k][0])
    print()
    say(f"The refined model tokens / (v + k c) picks k = {k_good} for a blend weight 0.95",
        "draft (" + ", ".join(f"k = {k}: {predicted[k][0]:.2f}x" for k in ks) + "), before",
        "it runs.", clock=True)
    print()
    t_token = clocked(lambda: plain_decode(Priced(TARGET, W), 0, n_plain,
                                           np.random.default_rng(11)))[0] / n_plain
    print(f"{'':13}{'predicted':^17}{'this run':^17}".rstrip())
    print(f"{'draft':10}{'k':>3}{'paper':>8}{'refined':>9}{'tokens/call':>13}{'clock':>7}"
          f"{'refined*':>10}{'error':>7}")
    verdicts = []
    for label, Q, k, n_rounds in (("middling", MIDDLING, 4, 20), ("blend 0.95", good, k_good, 10)):
        tokens = exact_tokens_per_call(TARGET, Q, k)
        refined, spread = predict(calib[k], tokens, k)
        paper = speedup(tokens, k, np.median(calib[k][0]))
        t_spec, (_, per_call, *_) = clocked(lambda: measure(
            Priced(TARGET, W), Q, k, n_rounds, seed=11, draft_from=Priced(Q, W_draft)))
        clock, at_run = t_token * per_call * n_rounds / t_spec, predict(calib[k], per_call, k)[0]
        print(f"{label:10}{k:3d}{paper:7.2f}x{refined:8.2f}x{per_call:13.2f}{clock:6.2f}x"
              f"{at_run:9.2f}x{100 * (at_run / clock - 1):+6.0f}%{CLOCK}")
        verdicts.append((label, clock, at_run, spread))
    demo6_verdicts(verdicts)


def predict(calibration, tokens, k):
    """(refined speedup from the median c and v, the interquartile range of the
    per-repeat predictions as a fraction of it: how far the calibration wobbles)."""
    c, v = calibration
    q25, q75 = np.percentile([speedup(tokens, k, c_r, v_r) for c_r, v_r in zip(c, v)], [25, 75])
    median = speedup(tokens, k, np.median(c), np.median(v))
    return median, (q75 - q25) / median


def demo6_verdicts(verdicts, tolerance=0.25, too_noisy=0.5):
    """Demo 6's closing sentences, from the predictions and the clock."""
    print("\npredicted: before decoding, with exact_tokens_per_call. A short run emits\n"
          "what its sample gives, so refined* is the same cost model at the run's own\n"
          "tokens per call: error = refined* / clock - 1 is the cost model's alone.\n")
    for label, clock, refined, spread in verdicts:
        judged = ("the calibration was too noisy to judge it (the repeats' predictions "
                  f"have an interquartile range of {100 * spread:.0f}%)" if spread > too_noisy else
                  f"the refined cost model {'was' if abs(refined / clock - 1) <= tolerance else 'was NOT'}"
                  f" within {100 * tolerance:.0f}% of the clock")
        say(f"{label}: speculation {'wins' if clock > 1 else 'loses'} on this clock",
            f"({clock:.2f}x), and {judged}.", clock=True)
    print()
    say("The paper's v = 1 holds where a pass over k+1 positions costs what a pass",
        "over one does: an accelerator decoding one sequence at half a MAC per byte,",
        "far below its ridge point. On this CPU v is several times 1, so only a draft",
        "that agrees often enough, at a k long enough to pay for the wide pass, wins.")


def demo7_distillation(k=4, c=0.1, n_text=20_000):
    world = random_table(101, sharpness=2.5)
    P = blend(world, random_table(201, sharpness=2.5), 0.7)  # an imperfect model of it
    text = plain_decode(world, 0, n_text, np.random.default_rng(7))
    S_text, S_target = bigram_counts(text), visit_joint(P)
    fit, kd = low_rank_draft(fit_text(text)), distill(P)
    nudged = [x + 1e-9 for x in kd]  # the same start, 1e-9 away
    tv, tv_nudged = (low_rank_draft(maximise_alpha(P, start)) for start in (kd, nudged))
    kd = low_rank_draft(kd)
    print(f"A world table writes the text ({n_text:,} tokens). The target is an imperfect\n"
          "model of it: 0.7 world + 0.3 another table. The draft: softmax(u v^T + b),\n"
          "18 parameters where a full table has 30 (each row of 6 probabilities has 5\n"
          "free numbers), trained by plain gradient descent.\n")
    print(f"{'draft trained on':31}{'objective':>11}{'value':>7}{'alpha':>7}{'tokens/call':>13}"
          f"{'speedup':>9}")
    rows = [("1. the world's text", "CE", cross_entropy(S_text, fit), fit, 3),
            ("2. the target's distributions", "KL(p||q)",
             cross_entropy(S_target, kd) - cross_entropy(S_target, P), kd, 3),
            ("3. alpha itself, from 2", "1 - alpha", 1 - pair_alpha(P, tv), tv, 2),
            ("the world's own full table", "", float("nan"), world, 3)]
    for label, objective, value, Q, digits in rows:
        tokens = exact_tokens_per_call(P, Q, k)
        print(f"{label:31}{objective:>11}{value:7.{digits}f}{pair_alpha(P, Q):7.{digits}f}"
              f"{tokens:13.2f}{speedup(tokens, k, c):9.2f}".replace("    nan", "       "))
    a_fit, a_kd, a_world = pair_alpha(P, fit), pair_alpha(P, kd), pair_alpha(P, world)
    a_tv = sorted((pair_alpha(P, tv), pair_alpha(P, tv_nudged)))
    verdict = "beats" if a_kd > a_fit else "does NOT beat"
    climb = "gains more still" if a_tv[0] > a_kd else "does not gain for certain"
    print()
    say(f"At k = {k}, c = {c}: distillation {verdict} fitting the data, alpha {a_kd:.3f}",
        f"against {a_fit:.3f}. The data-fit draft learns the world, and the world is not",
        "the target: even the world's own full table reaches only",
        f"alpha = {a_world:.3f}. Total variation is what alpha rewards",
        f"(alpha = 1 - E[TV(p, q)]): climbing it directly, draft 3, {climb}. Draft 3 is",
        f"printed to two decimals: the same climb from a start 1e-9 away ends at",
        f"{a_tv[0]:.3f} or {a_tv[1]:.3f}, because the gradient of TV jumps where q = p",
        "and rounding sends runs apart. That is also why KL, which is smooth, is the",
        "usual distillation loss. CE is in nats per token. Many deployments use no",
        "trained draft at all (vLLM's ngram and suffix methods) or an off-the-shelf",
        "smaller model; drafts trained on the target (EAGLE, Medusa-2, DistillSpec)",
        "accept more.")


def masked_pass(P2, context, tokens, mask):
    """What one masked forward pass of an order-2 model gives every node: each
    position reads the context, then the nodes its mask row lets it see, in
    order, and predicts from the last two tokens it read."""
    rows = []
    for i in range(len(tokens)):
        seen = list(context) + [tokens[j] for j in np.flatnonzero(mask[i])]
        rows.append(P2[seen[-2], seen[-1]])
    return np.array(rows)


def path_alone(P2, context, tokens, parents, i):
    """The same node evaluated the slow way: walk up to the root, read the path."""
    path = []
    while i >= 0:
        path.append(tokens[i])
        i = parents[i]
    text = list(context) + path[::-1]
    return P2[text[-2], text[-1]]


def demo8_trees(n_runs=600, n_tokens=800):
    parents = [-1, -1, 0, 0, 1, 1]  # context -> a, b; a -> c, d; b -> e, f
    mask = tree_attention_mask(parents)
    print("The tree: context -> a, b;  a -> c, d;  b -> e, f. Its attention mask\n"
          "(row: the node; x: a node it may attend to):\n")
    print("     " + " ".join(name(j) for j in range(6)))
    for i in range(6):
        print(f"  {name(i)}  " + " ".join("x" if m else "." for m in mask[i]))
    print("\nA verifier feeds the context and all six nodes through the target in ONE\n"
          "forward pass with this mask in place of the causal one, so every node gets\n"
          "the next-token distribution of its own branch.")
    P2, context = random_table(8, sharpness=2.0, order=2), (0, 1)  # an order-2 target
    tokens, parents = draft_tree(MIDDLING, 1, 3, 2, np.random.default_rng(8))
    slow = np.array([path_alone(P2, context, tokens, parents, i) for i in range(len(tokens))])
    tree_err = np.abs(masked_pass(P2, context, tokens, tree_attention_mask(parents)) - slow).max()
    causal = np.tri(len(tokens), dtype=bool)  # what a plain decoder would use
    causal_err = np.abs(masked_pass(P2, context, tokens, causal) - slow).max()
    print(f"\nAn order-2 target (next token depends on the last two), a drafted tree of\n"
          f"{len(tokens)} nodes: largest difference between the masked pass and each node's path\n"
          f"evaluated alone: {tree_err:.1e}. With a plain causal mask instead: {causal_err:.3f}.")
    demo8_exactness(n_runs)
    demo8_depth_and_width(n_tokens)


def demo8_exactness(n_runs, ctx=5, depth=2, branching=2):
    """Demo 8, part two: the tree keeps the target's distribution (or not)."""
    truth, floor = truth_and_floor(ctx, n_runs, seed=9)
    print(f"\nExactness: the first two tokens after '{name(ctx)}', {n_runs:,} runs each, "
          f"unrelated\ndraft, depth {depth}, branching {branching}; fit as in demo 2. no_update: "
          "a deliberate bug\nthat leaves a rejected sibling's q in p.\n")
    print(f"{'children':14}{'rule':>10}{'TV':>9}{'fit':>12}  verdict")
    verdicts = {}
    for distinct, rule in ((False, "correct"), (True, "correct"), (False, "no_update")):
        def first_tokens(rng):
            return tree_generate(TARGET, UNRELATED, ctx, 2, depth, branching, rng,
                                 distinct, rule)[0]
        counts = first_two(first_tokens, n_runs, seed=9)
        p = chi2_sf(*pearson(counts, truth))
        verdicts[distinct, rule] = p >= P_REJECT
        print(f"{'distinct' if distinct else 'independent':14}{rule:>10}"
              f"{tv_distance(counts / n_runs, truth):9.4f}{p_text(p):>12}  "
              f"{fit_verdict(p).split(' (')[0]}")
    print(f"{'floor':24}{floor:9.4f}   <- the target itself, sampled {n_runs:,} times\n")
    correct = verdicts[False, "correct"] and verdicts[True, "correct"]
    say("Both ways of drafting children emit the target's distribution;" if correct else
        "NOT every correct tree emits the target's distribution;",
        "without the residual between siblings ('no_update') the sample is",
        "NOT the target:" if not verdicts[False, "no_update"] else "still consistent:",
        "a rejected sibling's q must come out of p before the next one is tried.")


def demo8_depth_and_width(n_tokens, depth=3):
    """Demo 8, part three: tokens per target call, by depth and by nodes."""
    print(f"\nTokens per target call, middling draft, {n_tokens:,} tokens each. Depth is the\n"
          "number of sequential draft steps; nodes is how wide the verifying pass is.\n")
    print(f"{'draft':20}{'depth':>6}{'nodes':>7}{'independent':>13}{'distinct':>10}")
    nodes = {b: sum(b**i for i in range(1, depth + 1)) for b in (1, 2, 3)}
    shapes = [("chain", depth, 1)] + [(f"tree, branching {b}", depth, b) for b in (2, 3)]
    shapes += [(f"chain of {nodes[3]}", nodes[3], 1)]  # as many nodes as branching 3
    rate = {}
    for label, d, b in shapes:
        for distinct in (False, True) if b > 1 else (False,):
            rng = np.random.default_rng(10)
            _, calls, _ = tree_generate(TARGET, MIDDLING, 0, n_tokens, d, b, rng, distinct)
            rate[d, b, distinct] = n_tokens / calls
        print(f"{label:20}{d:6d}{d if b == 1 else nodes[b]:7d}{rate[d, b, False]:13.2f}"
              + (f"{rate[d, b, True]:10.2f}" if b > 1 else ""))
    print()
    say("At equal depth a tree turns spare verifier width into tokens:",
        f"{rate[depth, 1, False]:.2f} per call for the chain, {rate[depth, 3, True]:.2f} for",
        "branching 3 with distinct children (which never spend a slot on a",
        f"duplicate). At equal nodes the chain of {nodes[3]} makes",
        f"{rate[nodes[3], 1, False]:.2f}, but it pays {nodes[3]} sequential draft steps",
        f"where the tree pays {depth}. The width is spare on an accelerator at small",
        "batch (demo 6's roofline); on this CPU's BLAS it is not (demo 6's clock).")


def samples_to_see(exact, truth, p_reject=P_REJECT):
    """About how many runs a Pearson test needs before its expected statistic
    (dof + N delta^2, delta^2 = sum (exact - truth)^2 / truth) reaches the
    critical value at p_reject: the size at which it starts to see the bias."""
    seen = truth > 0
    delta2 = float(((exact - truth)[seen] ** 2 / truth[seen]).sum())
    dof = int(seen.sum()) - 1
    lo, hi = 0.0, 10.0 * dof + 100  # the critical value, by bisection on chi2_sf
    for _ in range(100):
        lo, hi = ((lo + hi) / 2, hi) if chi2_sf((lo + hi) / 2, dof) > p_reject else (lo, (lo + hi) / 2)
    return (hi - dof) / delta2 if delta2 > 0 else math.inf


def demo9_block(n_runs=400, n_rounds=200):
    P2, Q2 = np.array([[1 / 3, 2 / 3]] * 2), np.array([[2 / 3, 1 / 3]] * 2)  # no context
    print("The paper's example: two tokens, no context (every row the same), target\n"
          f"(1/3, 2/3), draft (2/3, 1/3), k = 2. Accepted drafts per round, exact and\n"
          f"measured over {4 * n_rounds:,} rounds:\n")
    print(f"{'verifier':12}{'exact':>9}{'':>8}{'measured':>10}{'+- 1 s.e.':>11}")
    accepted = {}
    for label, verify, exact in (
            ("token-wise", verify_round, exact_tokens_per_call(P2, Q2, 2) - 1),
            ("block", verify_block, exact_block_tokens_per_call(P2, Q2, 2) - 1),
            ("ideal", None, sum(1 - tv_distance(target_first_tokens(P2, 0, i),
                                                target_first_tokens(Q2, 0, i)) for i in (1, 2)))):
        accepted[label] = exact
        row = f"{label:12}{exact:9.4f}{str(Fraction(exact).limit_denominator(99)):>8}"
        if verify:  # nothing samples the ideal verifier
            _, per_call, _, se, _ = measure(P2, Q2, 2, 4 * n_rounds, seed=12, verify=verify)
            row += f"{per_call - 1:10.3f}{se:11.3f}"
        print(row)
    print()
    say("ideal: a verifier that sees the joint probabilities of whole blocks; its",
        "accepted length is at most the sum over i of 1 - TV between the target's",
        "and the draft's first i tokens, and the paper's example reaches it.",
        f"Block verification keeps {accepted['block'] - accepted['token-wise']:.4f} more drafts per",
        "round than token by token here.")
    demo9_exactness(n_runs)
    demo9_gain(n_rounds)


def demo9_exactness(n_runs, ctx=5, k=3, n=3):
    """Demo 9, part two: exact, and the bug that only an exact check sees."""
    truth = target_first_tokens(TARGET, ctx, n)
    print(f"\nExactness: the middling draft from '{name(ctx)}', k = {k}. exact: the TV of the "
          f"first 1, 2,\n{n} tokens from exact_block_first_tokens; fit: the sampled first "
          f"two tokens,\n{n_runs:,} runs, as in demo 2.\n")
    print(f"{'':19}{'exact TV, first tokens':^27}".rstrip())
    print(f"{'rule':19}{'1':>9}{'2':>9}{'3':>9}{'fit':>11}  verdict")
    exact, tvs, verdicts = {}, {}, {}
    for rule in BLOCK_RULES:
        exact[rule] = exact_block_first_tokens(TARGET, MIDDLING, ctx, n, k, rule)
        tvs[rule] = [tv_distance(exact[rule].sum(axis=tuple(range(m, n))),  # first m tokens
                                 truth.sum(axis=tuple(range(m, n)))) for m in range(1, n + 1)]
        counts = first_two(lambda rng: spec_generate(TARGET, MIDDLING, ctx, 2, k, rng, rule,
                                                     verify=verify_block)[0], n_runs, seed=13)
        p = chi2_sf(*pearson(counts, truth.sum(axis=2)))
        verdicts[rule] = both_checks(p, max(tvs[rule]))
        print(f"{rule:19}" + "".join(f"{exact_text(tv):>9}" for tv in tvs[rule])
              + f"{p_text(p):>11}  {verdicts[rule]}")
    tv_rule = tvs["tokenwise_residual"]
    first_bad = next((m + 1 for m, tv in enumerate(tv_rule) if tv >= 1e-9), None)
    print()
    say("verify_block emits the target's distribution: its exact TVs are rounding"
        " error and its sample passes." if verdicts["correct"] == "the target" else
        f"verify_block is {verdicts['correct']}: a stage it uses is broken.",
        "The cumulative test alone (h_i = p_i) is", verdicts["cumulative"] + ".")
    print()
    if first_bad is None:
        say("The token-wise residual is exact for these first tokens.")
    else:
        need = samples_to_see(exact["tokenwise_residual"], truth)
        say("The token-wise residual (the replacement from p - q instead of",
            "p_tau p - q) keeps the first", f"{first_bad - 1} token{'s' * (first_bad > 2)}",
            f"exactly right; the bias appears at token {first_bad} and is",
            f"{exact_text(tv_rule[first_bad - 1])} there. A sampled test of the first {n} tokens would",
            f"need about {need:,.0f} runs before its expected statistic reaches the",
            f"p = {P_REJECT:g} line. The exact check sees it at once, which is why a",
            "verifier's test must look past the first token, and why exact beats",
            "sampled.")


def demo9_gain(n_rounds, ks=(1, 2, 3, 4)):
    """Demo 9, part three: tokens per target call, token-wise and block-wise."""
    print(f"\nTokens per target call, middling draft; measured over {n_rounds:,} rounds.\n")
    print(f"{'':4}{'token-wise':>18}{'block':>18}")
    print(f"{'k':>4}{'exact':>9}{'measured':>9}{'exact':>9}{'measured':>9}{'gain':>9}")
    gains = {}
    for k in ks + (8,):
        tw, bl = (measure(TARGET, MIDDLING, k, n_rounds, seed=14, verify=v)[1]
                  for v in (verify_round, verify_block))
        if k in ks:
            e_tw, e_bl = exact_tokens_per_call(TARGET, MIDDLING, k), exact_block_tokens_per_call(TARGET, MIDDLING, k)
            gains[k] = e_bl / e_tw - 1
            print(f"{k:4d}{e_tw:9.3f}{tw:9.2f}{e_bl:9.3f}{bl:9.2f}{100 * gains[k]:+8.1f}%")
        else:
            print(f"{k:4d}{'':9}{tw:9.2f}{'':9}{bl:9.2f}")
    P0, Q0 = temper(TARGET, 0), temper(blend(TARGET, UNRELATED, 0.9), 0)
    greedy = exact_tokens_per_call(P0, Q0, 4), exact_block_tokens_per_call(P0, Q0, 4)
    print()
    say("gain: exact block over exact token-wise.",
        "Block verification keeps at least as many tokens at every k"
        if min(gains.values()) >= -1e-12 else "Block verification LOSES tokens at some k",
        f"({'equal' if abs(gains[1]) < 1e-12 else 'NOT equal'} at k = 1, where there is no",
        f"block to judge; +{100 * max(gains.values()):.1f}% at most here). The paper reports",
        "5-8% wall-clock gains on real models. At T = 0 (argmax tables, the blend",
        f"weight 0.9 draft, k = 4) the two give {greedy[0]:.4f} and {greedy[1]:.4f} tokens per",
        "call:", "the same rule." if abs(greedy[0] - greedy[1]) < 1e-12 else "NOT the same.")


def demo10_server(k=5, n_rounds=3000, costs=(0.1, 0.2, 0.4)):
    sizes = measure(TARGET, MIDDLING, k, n_rounds, seed=15)[4]
    L, R, rates = server_metrics(sizes, k)
    print(f"Playing the server: the middling draft at k = {k}, {n_rounds:,} rounds, counted "
          "as vLLM\ncounts them, then fed to --tune's routes. The truth: exact_tokens_per_call "
          "at\nevery k, with no sampling and no model.\n")
    print(f"  mean acceptance length {L:8.3f}   1 + accepted / drafts: tokens per call")
    print(f"  draft acceptance rate  {R:8.3f}   accepted / drafted tokens")
    print("  per-position rates     " + "".join(f"{a:6.3f}" for a in rates)
          + "\n  (per position i: the share of drafts whose first i tokens all passed)\n")
    exact = {j: exact_tokens_per_call(TARGET, MIDDLING, j) for j in range(1, 33)}
    a_L, a_R = alpha_from_mean_length(L, k), alpha_from_draft_rate(R, k)
    routes = [("truth (exact_tokens_per_call)", None, lambda j: exact[j], 32),
              ("--per-position", None, lambda j: per_position_tokens(rates)[j - 1], k),
              ("--mean-acceptance-length", a_L, lambda j: expected_tokens(a_L, j), 32),
              ("--draft-acceptance-rate", a_R, lambda j: expected_tokens(a_R, j), 32),
              ("the rate passed as ALPHA", R, lambda j: expected_tokens(R, j), 32)]
    print(f"{'c':>5}  {'route':33}{'alpha':>7}{'k':>4}{'predicted':>11}{'true at k':>11}")
    picks = {label: 0 for label, *_ in routes}
    for c in costs:
        best = fastest_k(lambda j: speedup(exact[j], j, c), 32)[0]
        for i, (label, alpha, tokens, k_max) in enumerate(routes):
            j, s_j = fastest_k(lambda j: speedup(tokens(j), j, c), k_max)
            picks[label] += j == best
            print(f"{c if i == 0 else '':>5}  {label:33}{'-' if alpha is None else f'{alpha:.3f}':>7}"
                  f"{j:4d}{s_j:10.2f}x{speedup(exact[j], j, c) if j else 1.0:10.2f}x")
    demo10_verdicts(picks, len(costs), k, L, R, a_L, a_R)


def demo10_verdicts(picks, n, k, L, R, a_L, a_R):
    """Demo 10's sentences, from the table's picks."""
    print()
    say(f"The per-position route picks the true best k at {picks['--per-position']} of {n}",
        f"costs, with no model of alpha (it cannot see past the K = {k} the server ran).",
        f"The mean acceptance length and the draft acceptance rate carry the same",
        f"information (L = 1 + k R: {L:.3f} = 1 + {k} x {R:.3f}), so eq. 1 turns both into",
        f"alpha = {a_L:.3f}" + (" and the two routes agree;" if abs(a_L - a_R) < 1e-9 else
                                f" and {a_R:.3f};"),
        f"they pick the true best k at {picks['--mean-acceptance-length']} of {n}. The draft",
        f"acceptance rate passed as ALPHA picks it at {picks['the rate passed as ALPHA']} of {n}:",
        "that rate counts drafts after a rejection, which are never checked, so it is",
        "not alpha.")


# -----------------------------------------------------------------------------
# Watching it decode: --trace
# The trace runs the real draft_tokens and verify_round, and records every call
# verify_round makes to accept_prob, residual and sample_from, and every
# uniform it draws. The printout is read off that record, so an edit to any
# stage, or to verify_round itself, shows in it; verify_round is untouched.

TRACED = ("accept_prob", "residual", "sample_from")
RULE_NOTES = {
    "correct": "A draft x is kept when u < min(1, p(x)/q(x)).",
    "greedy": "The 'greedy' bug: a draft is kept only when it is p's argmax.",
    "no_resample": "The 'no_resample' bug: a rejected draft is replaced from p itself.",
    "continue": "The 'continue' bug: the drafts after a rejection are checked anyway.",
    "uniform_q": "The 'uniform_q' bug: q is taken to be 1/V, and a rejected draft is "
                 "replaced from p itself.",
}


def recorded_round(P, Q, ctx, k, rng, rule="correct"):
    """One real round and what verify_round did in it: (drafted, emitted,
    n_accepted, calls), calls = [(name, args, result)] in call order, with
    ("u", (), value) for each uniform drawn."""
    drafted = draft_tokens(Q, ctx, k, rng)
    calls, stages = [], {name: globals()[name] for name in TRACED}

    def recorder(name, stage):
        def call(*args):
            calls.append((name, args, stage(*args)))
            return calls[-1][2]
        return call

    def draw():
        calls.append(("u", (), rng.random()))
        return calls[-1][2]

    globals().update({name: recorder(name, stage) for name, stage in stages.items()})
    try:  # verify_round looks these names up when it runs, so it calls the recorders
        emitted, n_accepted = verify_round(P, Q, ctx, drafted, SimpleNamespace(random=draw), rule)
    finally:
        globals().update(stages)
    return drafted, emitted, n_accepted, calls


def slot_kinds(drafted, emitted, n_accepted, rule):
    """What each emitted token is: 'kept' (a draft that passed), 'replaced'
    (drawn after a rejection) or 'bonus' (drawn after all k passed)."""
    if rule == "continue":  # it checks every draft, replacing the rejected ones
        return ["kept" if e == d else "replaced" for e, d in zip(emitted, drafted)] + ["bonus"]
    return ["kept"] * n_accepted + ["bonus" if n_accepted == len(drafted) else "replaced"]


MARKS = {"kept": ("{}", "32"), "replaced": ("[{}]", "33"), "bonus": ("{{{}}}", "36"),
         "start": ("{} |", "0")}


def marked(text, colour=False):
    """The text so far in letters: kept plain, [replaced], {bonus}, coloured
    too if asked: marked([(0, 'start'), (4, 'kept'), (1, 'bonus')]) -> 'a | e {b}'."""
    words = [MARKS[kind][0].format(name(x)) for x, kind in text]
    if colour:
        words = [f"\033[{MARKS[kind][1]}m{w}\033[0m" for w, (_, kind) in zip(words, text)]
    return " ".join(words)


def row_text(row):
    """A distribution in letters: row_text([.5, 0, .5]) -> 'a .500  c .500'."""
    total = sum(row)
    return "  ".join(f"{name(x)} {v / total:.3f}".replace(" 0.", " .")
                     for x, v in enumerate(row) if v > 0)


def trace(n_rounds=4, seed=0, rule="correct", k=4, ctx=0, colour=False):
    """Decode a few rounds with the middling draft and print each one."""
    check_rule(rule)
    rng, text = np.random.default_rng(seed), [(ctx, "start")]
    say(f"Speculative decoding, traced: target p, middling draft q, k = {k}, seed {seed}.",
        "Each round drafts k tokens from q, then checks them in one target call.",
        RULE_NOTES[rule])
    print()
    for r in range(1, n_rounds + 1):
        drafted, emitted, n_acc, calls = recorded_round(TARGET, MIDDLING, ctx, k, rng, rule)
        kinds = slot_kinds(drafted, emitted, n_acc, rule)
        print(f"Round {r}, after '{name(ctx)}': the draft proposes {' '.join(map(name, drafted))}.")
        print(f"  {'after':>7}{'draft':>7}{'q(x)':>8}{'p(x)':>8}{'min(1,p/q)':>12}{'u':>8}  verdict")
        print_round(ctx, drafted, kinds, calls)
        text += list(zip(emitted, kinds))
        ctx = emitted[-1]
        print(f"  text: {marked(text, colour)}\n")
    print("kept: plain; [x]: drawn after a rejection; {x}: the bonus token, drawn after\n"
          "all k drafts passed. Every number above was recorded from verify_round's\n"
          "own calls to accept_prob, residual and sample_from.")


def print_round(ctx, drafted, kinds, calls):
    """One round of the trace, read off the recorded calls: p(x) and q(x) as
    accept_prob was handed them, the uniforms drawn, the rows sampled."""
    contexts = [ctx] + list(drafted)
    draws = [(*args, out) for name, args, out in calls if name == "sample_from"]  # row, u, x
    drawn = {u for _, u, _ in draws}  # the uniforms sample_from used; the rest tested drafts
    tests = [out for name, _, out in calls if name == "u" and out not in drawn]
    checks = [(*args, out) for name, args, out in calls if name == "accept_prob"]  # p, q, x, a
    residuals = [out for name, _, out in calls if name == "residual"]
    for i, u in enumerate(tests):
        c, x = contexts[i], drafted[i]  # greedy calls no accept_prob: show the tables
        p, q, _, a = checks[i] if i < len(checks) else (TARGET[c], MIDDLING[c], x, None)
        ratio = f"{'-':>12}" if a is None else f"{a:12.3f}"
        print(f"  {name(c):>7}{name(x):>7}{q[x]:8.3f}{p[x]:8.3f}{ratio}{u:8.3f}  "
              + ("kept" if kinds[i] == "kept" else "rejected"))
        if kinds[i] != "kept":
            row, u_row, token = draws.pop(0)
            print(f"  {'':7}{'residual' if any(row is res for res in residuals) else 'p itself'}: "
                  f"{row_text(row)}\n  {'':7}u = {u_row:.3f} draws '{name(token)}' in its place")
    if kinds[-1] == "bonus":
        _, u_row, token = draws.pop(0)
        print(f"  {'':7}all {len(drafted)} passed: the bonus token from p after "
              f"'{name(drafted[-1])}', u = {u_row:.3f} draws '{name(token)}'")


# -----------------------------------------------------------------------------
# Command line

DEMOS = {
    "1": ("The rule by hand, one context", demo1_rule_by_hand),
    "2": ("The output distribution is the target's, at any temperature", demo2_distribution),
    "3": ("Acceptance and speedup against draft quality", demo3_acceptance),
    "4": ("Draft length", demo4_draft_length),
    "5": ("Break-even: when speculation is slower", demo5_break_even),
    "6": ("Where the free compute comes from", demo6_free_compute),
    "7": ("Where a good draft comes from", demo7_distillation),
    "8": ("Beyond a chain: draft trees", demo8_trees),
    "9": ("Verifying the block, not the tokens", demo9_block),
    "10": ("From a server's metrics to k, checked against the truth", demo10_server),
}
USAGE = """usage: speculative_decoding_from_scratch.py [DEMO ...]
       speculative_decoding_from_scratch.py --trace ... | --tune ... | --list"""
HELP = f"""{USAGE}

Runs the demos (all of them, or the numbered ones) and prints their evidence.
  DEMO ...            run these demos, in this order
  --list              print the demo titles
  --help              print this
  --trace [N]         watch N rounds (4) decode, one drafted token per line,
                      from verify_round's own calls; --rule NAME runs one of
                      the deliberate bugs, --seed S another random stream
  --tune ALPHA C      best draft length k for an acceptance rate ALPHA and a
                      draft cost C (one draft pass, in target passes), by the
                      paper's eq. 1 and Theorem 3.8. From a server's figures
                      instead of ALPHA (vLLM's names; K: the k they were
                      measured at):
    --tune --mean-acceptance-length L --k K C     alpha by inverting eq. 1
    --tune --draft-acceptance-rate R --k K C      (this rate is not alpha)
    --tune --per-position A1,A2,...,AK C          no model: tokens per call
                                                  for every k <= K
  options for --tune, in any order:
    --k-max N         the largest k to consider (32; with --per-position, K,
                      and a larger N extrapolates on an assumption)
    --v V             the verifying pass's cost in target passes (1)

Demos:"""
LEGEND = """Speculative decoding: a cheap draft model guesses k tokens, the target model
checks all k in one call, and a rejection rule keeps the target's own output
distribution exactly. Here the models are probability tables over tokens a..f.
  p, q   the target's and the draft's next-token distributions
  k      the draft length: tokens guessed per round
  beta   sum over x of min(p(x), q(x)): the chance a draft is accepted in one
         context; alpha, the paper's acceptance rate: beta averaged over the
         contexts as often as the target visits them
  eq. 1  tokens per target call = (1 - alpha^(k+1)) / (1 - alpha)
  c      the cost of one draft call, as a fraction of one target call
  TV     total variation: the largest difference in probability two
         distributions give any event; the floor: the TV of the target itself,
         sampled as often (noise alone)
  fit    Pearson's chi-square p-value of a sample against the target's
         distribution; below 0.001 the verdict is NOT the target
  exact  computed from the tables, with no sampling
Is it exact? demos 1-2, 9. How fast, and when is it slower? 3-6, 10. Why is
checking k tokens nearly free, and where is it not? 6. Where do good drafts
come from? 7. Trees of drafts? 8. Which k for my server? 10."""
BREAK_IT = """
Now break it: edit one line, rerun, and watch which verdicts flip.
  residual(): return p                 demos 1 and 2: NOT the target
  accept_prob(): q[x] / p[x]           demo 1's sentences and proof; demo 2
  verify_round(): delete the bonus     demo 2 still the target; demo 3's
    line                               tokens per call no longer fit
  verify_round(): residual(q, p)       demo 2: the sample fails, the exact
                                       check does not (it skips verify_round)
  verify_round(): bonus from p, not    demo 3: NOT the target at T > 0
    p_rows[-1]"""


def tune(c, v=1.0, k_max=None, alpha=None, k=None, mean_length=None, draft_rate=None,
         per_position=None):
    """Which k, and is speculation worth it? From alpha, or a server's figures."""
    if per_position is not None:
        return tune_per_position(per_position, c, v, k_max or len(per_position))
    if mean_length is not None:
        alpha = alpha_from_mean_length(mean_length, k)
        say(f"alpha = {alpha:.6f} from a mean acceptance length of {mean_length:g} at k = {k},",
            "by inverting eq. 1 (1 + alpha + ... + alpha^k = L), which assumes one alpha",
            "at every position; --per-position needs no such assumption.")
    elif draft_rate is not None:
        alpha = alpha_from_draft_rate(draft_rate, k)
        say(f"alpha = {alpha:.6f} from a draft acceptance rate of {draft_rate:g} at k = {k}.",
            "Warning: that rate is accepted / drafted tokens, NOT alpha. Drafts after a",
            "rejection are drafted but never checked; under eq. 1 the rate is",
            "(alpha + ... + alpha^k) / k, which is what was inverted here.")
    tune_alpha(alpha, c, v, k_max or 32)


def tune_alpha(alpha, c, v, k_max):
    """The table and the verdict for one alpha, by eq. 1 and Theorem 3.8."""
    best, s_best = fastest_k(lambda k: speedup(expected_tokens(alpha, k), k, c, v), k_max)
    print(f"alpha = {alpha:g}, c = {c:g}, v = {v:g}; operations assume c_hat = c "
          "(arithmetic ~ time)\n")
    print(f"{'k':>3}{'tokens per call':>17}{'speedup':>9}{'operations':>12}")
    for k in range(1, k_max + 1):
        tokens = expected_tokens(alpha, k)
        print(f"{k:3d}{tokens:17.3f}{speedup(tokens, k, c, v):9.3f}"
              f"{operations_factor(alpha, k, c):12.3f}" + ("  <- best" if k == best else ""))
    tune_verdict(best, s_best, k_max, f"no k in 1..{k_max} beats it"
                 + (": alpha <= c" if v == 1 and alpha <= c else ""))


def tune_per_position(rates, c, v, k_max):
    """The table and the verdict from per-position rates: no model of alpha.
    Past the K measured, only if asked: the last conditional rate, assumed."""
    K, last = len(rates), rates[-1] / (rates[-2] if len(rates) > 1 else 1.0) if rates[-1] else 0.0
    reached = list(rates) + [rates[-1] * last ** j for j in range(1, k_max - K + 1)]
    tokens = per_position_tokens(reached)
    print(f"per-position rates at K = {K}, c = {c:g}, v = {v:g}. reached: the share of drafts\n"
          "whose first k tokens all passed; conditional: reached(k) / reached(k - 1).\n")
    print(f"{'k':>3}{'reached':>9}{'conditional':>13}{'tokens per call':>17}{'speedup':>9}")
    best, s_best = fastest_k(lambda k: speedup(tokens[k - 1], k, c, v), k_max)
    for k in range(1, k_max + 1):
        before = reached[k - 2] if k > 1 else 1.0
        print(f"{k:3d}{reached[k - 1]:9.3f}{reached[k - 1] / before if before else 0:13.3f}"
              f"{tokens[k - 1]:17.3f}{speedup(tokens[k - 1], k, c, v):9.3f}"
              + ("  assumed" if k > K else "") + ("  <- best" if k == best else ""))
    print(f"\nassumed: past K = {K}, each draft passes with the last conditional rate, "
          f"{last:.3f}." if k_max > K else "\nassumed: nothing; every row is the server's own.")
    tune_verdict(best, s_best, k_max, f"no k in 1..{k_max} beats it",
                 f"the best k is K = {K}, the longest the server ran; --k-max N > {K} "
                 "extrapolates,\non the assumption above" if k_max == K else None)


def tune_verdict(best, s_best, k_max, why, cap_note=None):
    """The last lines of --tune: a note when the best k is the cap, then the verdict."""
    if best and best == k_max:
        print("\n" + (cap_note or f"the best k is the cap k_max = {k_max}; raise --k-max"))
    print(f"\nspeculate with k = {best}, expected speedup {s_best:.2f}x" if best else
          f"\nfall back to plain decoding ({why})")


TUNE_OPTIONS = {"--k-max": "k_max", "--v": "v", "--k": "k", "--mean-acceptance-length":
                "mean_length", "--draft-acceptance-rate": "draft_rate",
                "--per-position": "per_position"}


def parse_tune(args):
    """The words after --tune, in any order -> tune's keyword arguments, or a
    ValueError that says which word is wrong and why."""
    opts, numbers, words = {}, [], iter(args)
    for word in words:
        if word in TUNE_OPTIONS:
            value = next(words, None)
            if value is None or value in TUNE_OPTIONS:
                raise ValueError(f"{word} needs a value")
            if TUNE_OPTIONS[word] in opts:
                raise ValueError(f"{word} given twice")
            opts[TUNE_OPTIONS[word]] = tune_value(word, value)
        elif word.startswith("--"):
            raise ValueError(f"unknown option {word} for --tune")
        else:
            numbers.append(word)
    opts.update(tune_numbers(numbers, opts))
    check_tune(opts)
    return opts


def tune_numbers(numbers, opts):
    """The bare numbers after --tune: ALPHA C, or C alone beside a server's figure."""
    sources = [name for name in ("mean_length", "draft_rate", "per_position") if name in opts]
    if len(numbers) == 2 and not sources:
        return {"alpha": tune_value("ALPHA", numbers[0]), "c": tune_value("C", numbers[1])}
    if len(numbers) == 1 and len(sources) == 1:
        return {"c": tune_value("C", numbers[0])}
    if len(sources) + (len(numbers) == 2) > 1:
        raise ValueError("give one source of alpha: ALPHA, --mean-acceptance-length, "
                         "--draft-acceptance-rate or --per-position")
    raise ValueError("--tune takes ALPHA C, or a server's figure and C")


def integer_arg(what, value, least):
    """An integer >= least from the command line, or a ValueError naming it."""
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {value}") from None
    if number < least:
        raise ValueError(f"{what} must be >= {least}, got {value}")
    return number


def tune_value(word, value):
    """One --tune value, converted and range-checked on its own."""
    if word in ("--k-max", "--k"):
        return integer_arg(word, value, least=1)
    try:
        if word == "--per-position":
            number = [float(x) for x in value.split(",")]
        else:
            number = float(value)
    except ValueError:
        kind = "numbers separated by commas" if word == "--per-position" else "a number"
        raise ValueError(f"{word} must be {kind}, got {value}") from None
    check_tune_range(word, number, value)
    return number


def check_tune_range(word, number, value):
    """The range each --tune value must lie in, or a ValueError that says so."""
    if word in ("ALPHA", "--draft-acceptance-rate") and not 0 <= number <= 1:
        raise ValueError(f"{word} must lie in [0, 1], got {value}")
    if word in ("C", "--v") and not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{word} must be finite and >= 0, got {value}")
    if word == "--per-position" and not all(0 <= a <= 1 for a in number):
        raise ValueError(f"--per-position rates must lie in [0, 1], got {value}")
    if word == "--per-position" and any(b > a for a, b in zip(number, number[1:])):
        raise ValueError(f"--per-position rates cannot rise: a draft reaches position i+1 "
                         f"only through position i, got {value}")


def check_tune(opts):
    """The rules that tie --tune's options together."""
    needs_k = "mean_length" in opts or "draft_rate" in opts
    if needs_k and "k" not in opts:
        raise ValueError("--k K, the draft length the server ran at, is needed with "
                         "--mean-acceptance-length and --draft-acceptance-rate")
    if "k" in opts and not needs_k:
        raise ValueError("--k goes with --mean-acceptance-length or --draft-acceptance-rate")
    if "mean_length" in opts and not 1 <= opts["mean_length"] <= opts["k"] + 1:
        raise ValueError(f"--mean-acceptance-length must lie in [1, K + 1] = [1, "
                         f"{opts['k'] + 1}], got {opts['mean_length']:g}")


def parse_trace(args):
    """The words after --trace: [N] [--rule NAME] [--seed S], in any order ->
    trace's keyword arguments, or a ValueError that says which word is wrong."""
    opts, words = {}, iter(args)
    for word in words:
        if word in ("--rule", "--seed"):
            value = next(words, None)
            if value is None:
                raise ValueError(f"{word} needs a value")
            if word == "--rule":
                check_rule(value)
                opts["rule"] = value
            else:
                opts["seed"] = integer_arg(word, value, least=0)
        elif "n_rounds" not in opts and not word.startswith("--"):
            opts["n_rounds"] = integer_arg("--trace N", word, least=1)
        else:
            raise ValueError(f"--trace takes [N] [--rule NAME] [--seed S], got {word}")
    return opts


def usage_error(message):
    print(f"usage error: {message} (see --help)", file=sys.stderr)
    return 2


def main(argv):
    if argv in (["-h"], ["--help"]):
        print(HELP)
        argv = ["--list"]
    if argv == ["--list"]:
        print("\n".join(f"  {n}. {text}" for n, (text, _) in DEMOS.items()))
        return 0
    if argv[:1] == ["--trace"]:
        try:
            opts = parse_trace(argv[1:])
        except ValueError as e:
            return usage_error(e)
        trace(**opts, colour=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
        return 0
    if "--tune" in argv:
        try:
            at = argv.index("--tune")
            opts = parse_tune(argv[:at] + argv[at + 1:])
        except ValueError as e:
            return usage_error(e)
        tune(**opts)
        return 0
    for arg in argv:
        if arg in ("--list", "--help", "-h"):
            return usage_error(f"{arg} takes no other arguments")
        if arg not in DEMOS:
            return usage_error(f"unknown argument {arg!r}; the demos are 1-{len(DEMOS)}")
    print(LEGEND)
    for n in dict.fromkeys(argv or DEMOS):
        text, demo = DEMOS[n]
        print(f"\n{'=' * 78}\nDemo {n}. {text}\n{'=' * 78}")
        demo()
    print(BREAK_IT)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:
        # the reader stopped reading (| head): end quietly, as Unix tools do.
        # Point stdout at devnull so that the interpreter's final flush cannot
        # raise the same error again on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
