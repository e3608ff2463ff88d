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
keeps a prefix of the guesses and repairs the first rejected one. Decoding is
memory-bound, so scoring k+1 positions costs about as much as scoring one:
every accepted guess is a token for free.

The models here are explicit probability tables T[prev, next] (order-1 Markov
chains over six tokens a..f), because the claim is about distributions, and a
table's true distribution can be printed and compared with what the algorithm
actually emits.

    python3 speculative_decoding_from_scratch.py              # every demo
    python3 speculative_decoding_from_scratch.py 2 5          # demos 2 and 5
    python3 speculative_decoding_from_scratch.py --list       # the demo titles
    python3 speculative_decoding_from_scratch.py --tune 0.8 0.05   # pick k

To watch one round happen, put breakpoint() at the top of verify_round (or run
python3 -m pdb on this file and `b verify_round`), then run demo 2. To watch the
guarantee break, make residual() return p and rerun demos 1 and 2.

Notation, as in the paper (Leviathan et al. call the draft length gamma):
    p, P   the target's next-token distribution; P is its table, p = P[ctx]
    q, Q   the draft's next-token distribution;  Q is its table, q = Q[ctx]
    k      draft length: tokens guessed per round (the paper's gamma)
    alpha  acceptance rate: the chance that a checked draft token is accepted;
           for one context it is beta = sum_x min(p(x), q(x)) (Theorem 3.5)
    c      cost of one draft token as a fraction of one target call

The stages, in teaching order: 0 models, 1 sampling, 2 the acceptance rule,
3 the residual, 4 drafting, 5 verification (5b: draft trees), 6 the cost
model, 7 measuring distributions, 8 MACs and the real clock, 9 training a
draft. Then eight demos, each printing its evidence.

Left out on purpose: neural networks, KV caches, batching, top-k / top-p
warpers (they only change which table is sampled, see temper), dynamic draft
trees, and Medusa's typical acceptance (fast, but not distribution-exact).
"""

import sys
import time
from bisect import bisect_right
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
    cdf = list(accumulate(np.asarray(probs, float).tolist()))
    # subtle: compare u * total, not u. A row whose sum rounds to 0.99999999
    # would otherwise let u = 0.999999999 run past the last token (a bug that
    # shipped). And u < 1 gives u * total < total even after rounding, so the
    # index always lands on a real token.
    return bisect_right(cdf, u * cdf[-1])


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
# "uniform_q" is one that shipped: the draft's probability taken to be 1/V,
# and the replacement drawn from p.


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


def spec_generate(P, Q, ctx, n_tokens, k, rng, rule="correct"):
    """n_tokens by speculative decoding: (tokens, target_calls, n_accepted).

    Each round starts from the last emitted token. The last round may emit
    more than needed; the extra tokens are cut (their counts are not).
    """
    P, Q = check_inputs(P, Q, ctx, n_tokens=n_tokens, k=k)
    tokens, target_calls, n_accepted = [], 0, 0
    while len(tokens) < n_tokens:
        emitted, n_acc = verify_round(P, Q, ctx, draft_tokens(Q, ctx, k, rng), rng, rule)
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


def best_k(alpha, c, k_max=32):
    """(k, speedup) for the k in 1..k_max that is fastest; (0, 1.0) if none beats plain."""
    k = max(range(1, k_max + 1), key=lambda k: speedup(expected_tokens(alpha, k), k, c))
    s = speedup(expected_tokens(alpha, k), k, c)
    return (k, s) if s > 1 else (0, 1.0)


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


# The real clock. Everything above counts calls; this puts a price on them.
# A Priced table is a table model that also runs a real matrix product on
# every lookup, so the unchanged stage functions decode on a real clock.


class Priced:
    """A table whose every lookup also pays a forward pass: W @ X, one column
    per context looked up. draft_tokens' Q[ctx] pays one column; verify_round's
    P[contexts] pays k+1 columns in one product, the verifying pass. seconds[n]
    lists what each n-column pass took."""

    def __init__(self, table, W):
        self.table, self.W, self.seconds = table, W, {}
        self.X = np.ones((W.shape[1], 64), W.dtype)

    def __getitem__(self, ctx):
        n = 1 if np.isscalar(ctx) else len(ctx)
        self.seconds.setdefault(n, []).append(clocked(lambda: self.W @ self.X[:, :n])[0])
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
# The speedup rides on alpha, a property of the pair. A production draft is
# trained to imitate the target (distillation on the target's next-token
# distributions), not to fit the ground-truth text. The draft here is too
# small to copy anything exactly: logits u v^T + b, 18 numbers where a full
# table has 30 free ones. Both trainers below minimise -sum S log q for some
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


def fit_text(tokens, steps=1000, lr=2.0):
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


def row_str(values, fmt="{:7.3f}"):
    return "".join(fmt.format(v) for v in values)


def grid_row(label, values):
    """One row of a probability grid, 0.050 printed as .050 so six fit in 33."""
    return f"{label:>3}" + "".join(f"{v:.3f}".lstrip("0").rjust(5) for v in values)


def measure(P, Q, k, n_rounds, seed, ctx=0, draft_from=None):
    """n_rounds speculative rounds: (alpha measured, tokens per target call, tokens).

    alpha = accepted / checked. A round that rejects draft i checked i+1 of
    its drafts; the ones after the rejection were never looked at.
    draft_from: the table the draft really samples from, if verification is
    (wrongly) handed a different Q. Demo 3 uses it for a bug that shipped.
    """
    rng, drafter = np.random.default_rng(seed), Q if draft_from is None else draft_from
    accepted = checked = 0
    tokens = []
    for _ in range(n_rounds):
        out, n_acc = verify_round(P, Q, ctx, draft_tokens(drafter, ctx, k, rng), rng)
        accepted, checked = accepted + n_acc, checked + min(n_acc + 1, k)
        tokens += out
        ctx = out[-1]
    return accepted / checked, len(tokens) / n_rounds, tokens


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
    print(f"Context '{name(ctx)}'. Target p, middling draft q (blend weight 0.5).\n")
    print("token      p      q   min(1, p/q)    p - q   residual")
    for x in range(VOCAB):
        print(f"    {name(x)}  {p[x]:.3f}  {q[x]:.3f}  {acc[x]:11.3f}  {p[x] - q[x]:+7.3f}"
              f"  {r[x]:9.3f}")
    under, over = int(np.argmax(p - q)), int(np.argmax(q - p))
    print(f"\nDraft '{name(under)}': q = {q[under]:.3f} <= p = {p[under]:.3f}, under-proposed: "
          "always accepted.")
    print(f"Draft '{name(over)}': q = {q[over]:.3f} >  p = {p[over]:.3f}, over-proposed: accepted "
          f"with p/q = {acc[over]:.3f},\n  rejected {100 * (1 - acc[over]):.1f}% of the time; "
          "then the token is drawn from the residual.")
    beta = float(np.minimum(p, q).sum())
    kept, fixed = q * acc, (1 - beta) * r
    print(f"\nThe proof, token by token. P(reject) = 1 - sum min(p, q) = {1 - beta:.3f}.\n")
    print("token   kept: q*min(1,p/q)  +  P(reject)*residual  =  emitted       p")
    for x in range(VOCAB):
        print(f"    {name(x)}  {kept[x]:19.4f}  {fixed[x]:20.4f}  {kept[x] + fixed[x]:10.4f}"
              f"  {p[x]:6.4f}")
    print(f"\nLargest |emitted - p| over the tokens: {np.abs(kept + fixed - p).max():.1e}")
    print("Acceptance delivers min(p, q); a rejection happens with exactly the mass\n"
          "that is missing, and the residual puts it where p exceeds q. Emitted = p,\n"
          "for any q that covers what it drafts. Break residual() and the emitted\n"
          "column stops matching p.")


def first_two(generate, n_runs, seed):
    """Empirical joint of the first two tokens of generate(rng), over n_runs runs."""
    rng, counts = np.random.default_rng(seed), np.zeros((VOCAB, VOCAB))
    for _ in range(n_runs):
        x1, x2 = generate(rng)[:2]
        counts[x1, x2] += 1
    return counts / n_runs


def truth_and_floor(ctx, n_runs, seed):
    """The target's joint of the first two tokens after ctx, P(x1, x2) =
    p(x1 | ctx) p(x2 | x1), and the TV that plain decoding gets from it in
    n_runs runs: the sampling floor every other measurement is held to."""
    truth = TARGET[ctx][:, None] * TARGET
    plain = first_two(lambda rng: plain_decode(TARGET, ctx, 2, rng), n_runs, seed)
    return truth, tv_distance(plain, truth)


def demo2_distribution(ctx=5, k=2, n_runs=6000):
    truth, floor = truth_and_floor(ctx, n_runs, seed=2)
    joints = {rule: first_two(lambda rng: spec_generate(TARGET, UNRELATED, ctx, 2, k, rng, rule)[0],
                              n_runs, seed=2) for rule in RULES}
    print(f"Draft: the unrelated table (alpha = {pair_alpha(TARGET, UNRELATED):.2f}), k = {k}. "
          f"From context '{name(ctx)}',\n{n_runs:,} runs per rule; each run keeps the first "
          "two tokens it emits.\n")
    header = "   " + "".join(f"{name(x):>5}" for x in range(VOCAB))
    print(f"{'target joint P(x1, x2)':^33}    {'measured, correct rule':^33}".rstrip())
    print(header + "    " + header)
    for x in range(VOCAB):
        print(grid_row(name(x), truth[x]) + "    " + grid_row(name(x), joints["correct"][x]))
    print("\nfirst token x1 " + "".join(f"{name(x):>7}" for x in range(VOCAB)))
    print(f"{'target':14} " + row_str(TARGET[ctx]))
    for rule in RULES:
        print(f"{rule:14} " + row_str(joints[rule].sum(axis=1)))
    print(f"\n{'rule':14} {'TV(first two)':>14} {'x floor':>8} {'TV(first)':>10}")
    for rule in RULES:
        tv = tv_distance(joints[rule], truth)
        print(f"{rule:14} {tv:14.4f} {tv / floor:8.1f} "
              f"{tv_distance(joints[rule].sum(axis=1), TARGET[ctx]):10.4f}")
    print(f"{'floor':14} {floor:14.4f} {1:8.1f}   <- the target itself, sampled {n_runs:,}x")
    print("\nThe correct rule sits at the floor: what is left is sampling noise, and\n"
          "the draft's poor quality (low alpha) cost speed, not correctness. 'greedy'\n"
          "keeps a draft only if it is p's argmax; 'no_resample' refills rejections\n"
          "from p, counting mass twice that q already delivered; 'continue' gets the\n"
          "first token right (TV(first) at the floor) but the pair wrong: the drafts it\n"
          "kept were conditioned on a token that had been replaced. 'uniform_q'\n"
          "shipped in an open-source model's generator: it took the draft's\n"
          "probability to be 1/V instead of the q it sampled from, and refilled from p.")
    demo2_greedy(n_tokens=1000)


def demo2_greedy(n_tokens, k=4):
    """Demo 2, part two: greedy decoding is sampling from temper(P, 0)."""
    P0 = temper(TARGET, 0)
    plain = plain_decode(P0, 0, n_tokens, np.random.default_rng(0))
    print(f"\nGreedy is sampling at T = 0 (the paper's section 2.2): temper(P, 0) has\n"
          f"one-hot rows. The unchanged verify_round, {n_tokens:,} tokens from 'a', k = {k}:\n")
    print(f"{'draft, at T = 0':24}{'same tokens as argmax decoding':>32}{'target calls':>14}")
    accepted = {}
    for label, w in (("middling (weight 0.5)", 0.5), ("blend weight 0.9", 0.9)):
        Q0 = temper(blend(TARGET, UNRELATED, w), 0)
        tokens, calls, accepted[w] = spec_generate(P0, Q0, 0, n_tokens, k, np.random.default_rng(0))
        same = sum(a == b for a, b in zip(tokens, plain))
        print(f"{label:24}{f'{same:,} of {n_tokens:,}':>32}{calls:14,}")
    print("\nAt T = 0, min(1, p/q) is 1 for p's argmax and 0 for anything else, so\n"
          "argmax agreement IS the acceptance rule, and alpha is how often the two\n"
          f"argmaxes agree along the text (the middling draft: {accepted[0.5]} drafts accepted).\n"
          "At T > 0 the same check is the 'greedy' bug above.")


def demo3_acceptance(k=4, c=0.1, n_rounds=1500):
    weights = (1, 0.9, 0.75, 0.5, 0.25, 0)
    drafts = [(f"blend weight {w:.2f}", blend(TARGET, UNRELATED, w)) for w in weights]
    drafts += [(f"target at T = {T}", temper(TARGET, T)) for T in (1.0, 1.3, 2.0, 0.5)]
    print(f"k = {k}, {n_rounds:,} rounds per draft. Blends mix the target with the unrelated\n"
          "table; the last rows draft with the target itself at the wrong temperature.\n")
    print(f"{'':18}{'alpha':>14}{'tokens per target call':>25}{'speedup':>10}")
    print(f"{'draft':18}{'measured':>9}{'exact':>7}{'measured':>10}{'eq. 1':>7}{'exact':>7}"
          f"{f'c = {c}':>12}")
    for label, Q in drafts:
        alpha, tokens, _ = measure(TARGET, Q, k, n_rounds, seed=3)
        exact_alpha = pair_alpha(TARGET, Q)
        print(f"{label:18}{alpha:9.3f}{exact_alpha:7.3f}{tokens:10.2f}"
              f"{expected_tokens(exact_alpha, k):7.2f}{exact_tokens_per_call(TARGET, Q, k):7.2f}"
              f"{speedup(tokens, k, c):12.2f}")
    a = pair_alpha(TARGET, MIDDLING)
    naive, right = 1 + k * a, exact_tokens_per_call(TARGET, MIDDLING, k)
    print(f"\nThe naive guess 1 + k*alpha (in a widely shared speedup table) gives {naive:.2f}\n"
          f"tokens per call for the middling draft; the exact value is {right:.2f}, so it\n"
          f"overstates by {100 * (naive / right - 1):.0f}%: it forgets that a rejection ends "
          "the round.")
    print("\nalpha is accepted / checked: drafts after a rejection are never checked.\n"
          "'exact' alpha is the paper's E[sum min(p, q)] over the contexts the target\n"
          "visits; eq. 1 assumes that one alpha holds at every position; the exact\n"
          "tokens per call follow the tables' probability mass with no assumption.\n"
          "Speed rides on alpha, and a perfect model sampled at the wrong temperature\n"
          "is just a worse draft.")
    demo3_temperatures(k, c, n_rounds)
    demo3_one_sided(k, 4 * n_rounds)


def demo3_temperatures(k, c, n_rounds):
    """Demo 3, part two: both models sampled at temperature T, as in production."""
    print(f"\nSampling temperature T applied to BOTH tables (middling draft, k = {k}). TV:\n"
          "the output's next-token frequencies against the tempered target; floor:\n"
          "the same for plain decoding of the tempered target, as many tokens.\n")
    print(f"{'T':>4}{'alpha':>8}{'exact':>7}{'tokens/call':>13}{'speedup':>9}{'TV':>8}{'floor':>8}")
    exact, worst = {}, 0.0
    for T in (0, 0.5, 1.0, 1.5, 2.0):
        P_T, Q_T = temper(TARGET, T), temper(MIDDLING, T)
        alpha, tokens_per_call, tokens = measure(P_T, Q_T, k, n_rounds, seed=6)
        plain = plain_decode(P_T, 0, len(tokens), np.random.default_rng(6))
        exact[T] = pair_alpha(P_T, Q_T)
        tv, floor = transition_tv(tokens, P_T), transition_tv(plain, P_T)
        worst = max(worst, tv / floor) if floor else worst
        print(f"{T:4.1f}{alpha:8.3f}{exact[T]:7.3f}{tokens_per_call:13.2f}"
              f"{speedup(tokens_per_call, k, c):9.2f}{tv:8.4f}{floor:8.4f}")
    rising = all(exact[a] < exact[b] for a, b in ((0.5, 1.0), (1.0, 1.5), (1.5, 2.0)))
    print(f"\nEvery temperature is exact: TV at most {worst:.1f}x its floor (T = 0 has no noise).")
    if rising:
        print(f"alpha rises with T here, {exact[0.5]:.3f} at T = 0.5 to {exact[2.0]:.3f} at T = 2: "
              "heating\nflattens both rows toward uniform, and sum min(p, q) -> 1 as they meet. "
              "So alpha\ndoes not collapse at high temperature for this pair.")
    print(f"At T = 0 alpha is argmax agreement, {exact[0]:.3f} here; drafts trained to imitate\n"
          "the target share its argmax more often (the paper's Table 3 has T5-small at\n"
          "0.75 for T = 0 and 0.62 for T = 1).")


def demo3_one_sided(k, n_rounds, T=0.5):
    """A shipped bug: the draft samples at temperature T, verification sees T = 1."""
    P_T = temper(TARGET, T)
    _, _, tokens = measure(P_T, MIDDLING, k, n_rounds, seed=7, draft_from=temper(MIDDLING, T))
    floor = transition_tv(plain_decode(P_T, 0, len(tokens), np.random.default_rng(7)), P_T)
    bug = transition_tv(tokens, P_T)
    print(f"\nTemperature on one side only (vLLM and others shipped this): the draft\n"
          f"samples at T = {T} but verify_round is handed its T = 1 table. Over {n_rounds:,}\n"
          f"rounds: TV {bug:.4f}, {bug / floor:.0f}x the floor of {floor:.4f}. q must be the "
          "distribution\nthe draft actually sampled from.")


def demo4_draft_length(c=0.1, k_max=16, n_rounds=1000):
    rows = [(k, *measure(TARGET, MIDDLING, k, n_rounds, seed=4)[:2],
             exact_tokens_per_call(TARGET, MIDDLING, k)) for k in range(1, k_max + 1)]
    print(f"Middling draft (blend weight 0.5), c = {c}, {n_rounds:,} rounds per k.\n")
    print(f"{'':11}{'tokens per call':>17}{'speedup':>16}")
    print(f"{'k':>3}{'alpha':>8}{'measured':>10}{'exact':>7}{'measured':>10}{'exact':>7}")
    for k, alpha, tokens, exact in rows:
        print(f"{k:3d}{alpha:8.3f}{tokens:10.2f}{exact:7.2f}{speedup(tokens, k, c):10.2f}"
              f"{speedup(exact, k, c):7.2f}")
    best_measured = max(rows, key=lambda r: speedup(r[2], r[0], c))[0]
    best_exact = max(rows, key=lambda r: speedup(r[3], r[0], c))[0]
    a = pair_alpha(TARGET, MIDDLING)
    print(f"\nBest k: {best_measured} measured, {best_exact} exact. Tokens per call saturates "
          f"near\n1 / (1 - alpha) = {1 / (1 - a):.2f}: a round ends at its first rejection and "
          "throws\nthe rest of its drafts away, while the cost 1 + k*c keeps growing with "
          "every\ntoken drafted. So the speedup peaks, then falls; near the peak it is flat.")
    print(f"\nBest k by eq. 1 at c = {c}, next to the {best_measured} measured above:\n")
    print(f"{'alpha':>7}{'k':>5}{'speedup':>9}")
    for al in (0.5, 0.7, 0.9, a):
        k_best, s_best = best_k(al, c)
        print(f"{al:7.3f}{k_best:5d}{s_best:9.2f}" + ("  <- this draft's alpha" if al == a else ""))


def demo5_break_even(k=4, n_rounds=2000):
    alpha, tokens, _ = measure(TARGET, MIDDLING, k, n_rounds, seed=5)
    a, c_star = pair_alpha(TARGET, MIDDLING), break_even_c(tokens, k)
    exact = [exact_tokens_per_call(TARGET, MIDDLING, j) for j in range(1, 17)]
    print(f"Middling draft, k = {k}: alpha = {alpha:.3f}, {tokens:.2f} tokens per target call,\n"
          f"so c* = (tokens - 1) / k = {c_star:.3f}. Right: the best k at each c, by eq. 1\n"
          f"(alpha = {a:.3f}) and exactly for these tables, and Corollary 3.9's bound.\n")
    print(f"{'k = 4, measured':>24}{'best, eq. 1':>14}{'best, exact':>14}{'(1+alpha)':>11}")
    print(f"{'c':>6}{'speedup':>9}{'':9}{'k':>4}{'speedup':>9}{'k':>5}{'speedup':>9}"
          f"{'/ (1+c)':>11}")
    edge = []  # costs where eq. 1 promises a gain and the real tables lose
    for c in (0.05, 0.1, 0.2, 0.3, round(c_star, 3), 0.6, 0.7, 0.8, 1.0):
        s = speedup(tokens, k, c)
        k_eq, s_eq = best_k(a, c, k_max=16)
        s_ex, k_ex = max((speedup(t, j + 1, c), j + 1) for j, t in enumerate(exact))
        edge += [c] if k_eq and s_ex < 1 else []
        print(f"{c:6.3f}{s:9.2f}{'  slower' if s < 1 else '':9}{k_eq:4d}{s_eq:9.3f}"
              f"{k_ex:5d}{s_ex:9.3f}{(1 + a) / (1 + c):11.3f}")
    print("\nCorollary 3.9 (eq. 1's world): some k beats plain decoding exactly when\n"
          "alpha > c, by at least (1 + alpha) / (1 + c); k = 0 above means none does.")
    if edge:
        print(f"The tables disagree at the edge: at c = {', '.join(map(str, edge))} < alpha "
              "the best "
              f"real k\nstill loses. Eq. 1 assumes one alpha everywhere; a round here starts on "
              f"the\ntoken that ended the last one, and there beta averages {exact[0] - 1:.3f}, "
              f"not {a:.3f}.")
    print("\nA large but poor draft: the unrelated table at c = 0.25.\n")
    print(f"{'k':>3}{'alpha':>8}{'tokens per call':>17}{'speedup':>9}")
    for k_poor in (1, 2, 4, 8):
        a_poor, t, _ = measure(TARGET, UNRELATED, k_poor, n_rounds, seed=5)
        s = speedup(t, k_poor, 0.25)
        print(f"{k_poor:3d}{a_poor:8.3f}{t:17.2f}{s:9.2f}  {'slower' if s < 1 else ''}".rstrip())
    print("\nEvery drafted token costs c whether or not it survives, so a draft must be\n"
          "cheap AND agree with the target. If alpha <= c nothing helps: tokens per\n"
          "call <= 1 + k*alpha <= 1 + k*c.")


def demo6_free_compute(d_model=4096, d_ff=11008, layers=32, vocab=32000, n_ctx=512):
    params = weight_count(d_model, d_ff, layers, vocab)
    # every weight matrix entry takes part in exactly one MAC per token, so the
    # weights a pass reads are the MACs of one token with no context to attend to
    weight_bytes = 2 * macs_per_token(d_model, d_ff, layers, 0, vocab)  # fp16
    kv_bytes = 2 * 2 * layers * n_ctx * d_model  # K and V, fp16, per layer
    ridge = H100_FLOPS / 2 / H100_BYTES_PER_S  # MACs per byte at the roofline knee
    print(f"A Llama-2-7B-shaped decoder in fp16: d_model {d_model}, d_ff {d_ff}, {layers} "
          f"layers,\nvocabulary {vocab}, {n_ctx} tokens of context; {params / 1e9:.2f} billion "
          "parameters by the\nshape's own count. One pass reads every weight once, however "
          "many positions.\n")
    print(f"{'positions':>9}{'GMACs':>9}{'GB read':>9}{'MACs/byte':>11}"
          f"{'H100 roofline time':>21}{'vs 1':>7}")
    t1 = None
    for n in (1, 2, 4, 8, 16):
        macs = n * macs_per_token(d_model, d_ff, layers, n_ctx, vocab)
        bytes_read = weight_bytes + kv_bytes
        t_mem, t_math = bytes_read / H100_BYTES_PER_S, 2 * macs / H100_FLOPS
        t = max(t_mem, t_math)
        t1 = t1 or t
        bound = "memory" if t_mem >= t_math else "compute"
        print(f"{n:9d}{macs / 1e9:9.1f}{bytes_read / 1e9:9.2f}{macs / bytes_read:11.2f}"
              f"{t * 1e3:11.2f} ms {bound:>7}{t / t1:7.2f}")
    one = macs_per_token(d_model, d_ff, layers, n_ctx, vocab) / (weight_bytes + kv_bytes)
    print(f"\nH100 SXM ridge point: {H100_FLOPS / 1e12:.0f} TFLOP/s / 2 / "
          f"{H100_BYTES_PER_S / 1e12:.2f} "
          f"TB/s = {ridge:.0f} MACs per byte.")
    print(f"\nOne decoding step streams every weight from memory to do {one:.2f} MACs per\n"
          f"byte; in that time the chip could do {ridge / one:.0f} times more arithmetic. Up to\n"
          f"about {ridge / one:.0f} positions, a pass costs what a pass over one position costs:\n"
          "the draft's k guesses are checked with arithmetic that was idle anyway. (The\n"
          "times are a roofline model, not a measurement.)")
    print("\nThe price is paid in arithmetic: the paper's Table 1 (c = c_hat = 0), from\n"
          "eq. 1 and Theorem 3.11. More operations in total, less time.\n")
    print(f"{'alpha':>6}{'k':>4}{'operations':>12}{'speed':>8}")
    for alpha, k in ((0.6, 2), (0.7, 3), (0.8, 2), (0.8, 5), (0.9, 2), (0.9, 10)):
        print(f"{alpha:6.1f}{k:4d}{operations_factor(alpha, k, 0):11.2f}X"
              f"{speedup(expected_tokens(alpha, k), k, 0):7.2f}X")
    W = np.full((4096, 4096), 1e-3, np.float32)  # 64 MiB: far past the last-level cache
    demo6_clock(W, np.ones((4096, 16), np.float32))
    demo6_cost_model(W, np.full((512, 4096), 1e-3, np.float32))


CLOCK = "  (clock)"  # marks every printed line that holds a wall-clock measurement


def demo6_clock(W, X):
    """Demo 6, part two: what a pass over 1 to 16 positions costs on this machine."""
    print(f"\nThe same question on this machine: y = W @ X, W float32 {W.shape[0]} x "
          f"{W.shape[1]} ({W.nbytes >> 20} MiB),\nX with one column per position. Lines "
          "marked (clock) are wall-clock\nmeasurements (medians of 3 runs of 3 calls) and "
          "change from run to run.\n")
    print(f"{'positions':>9}{'time':>11}{'x one':>8}")
    median_time(lambda: W @ X, repeats=1)  # wake the BLAS threads and the caches first
    times = {n: median_time(lambda: W @ X[:, :n]) for n in (1, 2, 4, 8, 16)}
    for n, t in times.items():
        print(f"{n:9d}{t * 1e3:8.2f} ms{t / times[1]:8.2f}{CLOCK}")


def demo6_cost_model(W, W_draft, k=4, n_rounds=30):
    """Demo 6, part three: decode for real, and hold the cost model to the clock."""
    P_spec, P_plain, Q = Priced(TARGET, W), Priced(TARGET, W), Priced(MIDDLING, W_draft)
    t_spec, (_, tokens_per_call, tokens) = clocked(
        lambda: measure(P_spec, MIDDLING, k, n_rounds, seed=11, draft_from=Q))
    t_plain, _ = clocked(lambda: plain_decode(P_plain, 0, len(tokens), np.random.default_rng(11)))
    one = np.mean(P_plain.seconds[1])  # c and v as the decoder paid them, in place
    c, v = np.mean(Q.seconds[1]) / one, np.mean(P_spec.seconds[k + 1]) / one
    clock = t_plain / t_spec
    paper, refined = speedup(tokens_per_call, k, c), speedup(tokens_per_call, k, c, v)
    print(f"\nDecoding {len(tokens)} tokens, middling draft, k = {k}, every table call paying a\n"
          f"pass (the draft's W is {W_draft.shape[0]} x {W_draft.shape[1]}); {tokens_per_call:.2f} "
          "tokens per target call.\n")
    print(f"  c = {c:.3f} (draft pass / target pass), v = {v:.2f} ({k + 1}-column / 1-column)"
          + CLOCK)
    print(f"  plain {t_plain:.3f} s, speculative {t_spec:.3f} s: {clock:.2f}x{CLOCK}")
    print(f"  paper's prediction tokens / (1 + k c) = {paper:.2f}x{CLOCK}")
    print(f"  refined tokens / (v + k c) = {refined:.2f}x, {100 * abs(refined / clock - 1):.0f}% "
          f"from the clock{CLOCK}")
    print("\nc and v are what the decoder paid in place (a draft pass right after a\n"
          "target pass finds its weights evicted from cache, so it costs more than\n"
          "alone). On a CPU, BLAS takes a matrix-vector path for one column and a\n"
          "matrix-matrix path for more, so the verifying pass is far from free, though\n"
          "it grows much slower than its width: the paper's v = 1 does not hold here,\n"
          "and speculation can lose. An accelerator decoding at half a MAC per byte, far\n"
          "below its ridge point, sees v close to 1: there the paper's model holds.")


def demo7_distillation(k=4, c=0.1, n_text=20_000):
    world = random_table(101, sharpness=2.5)
    P = blend(world, random_table(201, sharpness=2.5), 0.7)  # an imperfect model of it
    text = plain_decode(world, 0, n_text, np.random.default_rng(7))
    S_text, S_target = bigram_counts(text), visit_joint(P)
    fit, kd = low_rank_draft(fit_text(text)), distill(P)
    tv = low_rank_draft(maximise_alpha(P, kd))
    kd = low_rank_draft(kd)
    print(f"A world table writes the text ({n_text:,} tokens). The target is an imperfect\n"
          "model of it: 0.7 world + 0.3 another table. The draft: softmax(u v^T + b),\n"
          "18 parameters against a full table's 30, trained by plain gradient descent.\n")
    print(f"{'draft trained on':31}{'objective':>11}{'value':>7}{'alpha':>7}{'tokens/call':>13}"
          f"{'speedup':>9}")
    rows = [("(a) the world's text", "CE", cross_entropy(S_text, fit), fit),
            ("(b) the target's distributions", "KL(p||q)",
             cross_entropy(S_target, kd) - cross_entropy(S_target, P), kd),
            ("(c) alpha itself, from (b)", "1 - alpha", 1 - pair_alpha(P, tv), tv),
            ("the world's own full table", "", float("nan"), world)]
    for label, objective, value, Q in rows:
        tokens = exact_tokens_per_call(P, Q, k)
        print(f"{label:31}{objective:>11}{value:7.3f}{pair_alpha(P, Q):7.3f}{tokens:13.2f}"
              f"{speedup(tokens, k, c):9.2f}".replace("    nan", "       "))
    a_fit, a_kd, a_world = pair_alpha(P, fit), pair_alpha(P, kd), pair_alpha(P, world)
    verdict = "beats" if a_kd > a_fit else "does NOT beat"
    climb = "gains more still" if pair_alpha(P, tv) > a_kd else "gains nothing here"
    print(f"\nAt k = {k}, c = {c}: distillation {verdict} fitting the data, alpha {a_kd:.3f} "
          f"against\n{a_fit:.3f}. The data-fit draft learns the world, and the world is not "
          f"the target:\neven the world's own full table reaches only alpha = {a_world:.3f}.\n"
          "Total variation is what alpha rewards (alpha = 1 - E[TV(p, q)]): climbing it\n"
          f"directly, (c), {climb}. KL is the usual distillation loss because it is\n"
          "smooth; the gradient of TV jumps where q = p. CE is in nats per token.")


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


def demo8_trees(n_runs=3000, n_tokens=1500):
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
          f"unrelated\ndraft, depth {depth}, branching {branching}.\n")
    print(f"{'children':14}{'rule':>10}{'TV':>9}{'x floor':>9}")
    for distinct, rule in ((False, "correct"), (True, "correct"), (False, "no_update")):
        def first_tokens(rng):
            return tree_generate(TARGET, UNRELATED, ctx, 2, depth, branching, rng,
                                 distinct, rule)[0]
        tv = tv_distance(first_two(first_tokens, n_runs, seed=9), truth)
        print(f"{'distinct' if distinct else 'independent':14}{rule:>10}{tv:9.4f}{tv / floor:9.1f}")
    print(f"{'floor':24}{floor:9.4f}{1:9.1f}")


def demo8_depth_and_width(n_tokens, depth=3):
    """Demo 8, part three: tokens per target call, by depth and by nodes."""
    print(f"\nTokens per target call, middling draft, {n_tokens:,} tokens each. Depth is the\n"
          "number of sequential draft steps; nodes is how wide the verifying pass is.\n")
    print(f"{'draft':20}{'depth':>6}{'nodes':>7}{'independent':>13}{'distinct':>10}")
    nodes = {b: sum(b**i for i in range(1, depth + 1)) for b in (1, 2, 3)}
    shapes = [("chain", depth, 1)] + [(f"tree, branching {b}", depth, b) for b in (2, 3)]
    shapes += [(f"chain of {nodes[b]}", nodes[b], 1) for b in (2, 3)]
    rate = {}
    for label, d, b in shapes:
        for distinct in (False, True) if b > 1 else (False,):
            rng = np.random.default_rng(10)
            _, calls, _ = tree_generate(TARGET, MIDDLING, 0, n_tokens, d, b, rng, distinct)
            rate[d, b, distinct] = n_tokens / calls
        print(f"{label:20}{d:6d}{d if b == 1 else nodes[b]:7d}{rate[d, b, False]:13.2f}"
              + (f"{rate[d, b, True]:10.2f}" if b > 1 else ""))
    print(f"\nAt equal depth a tree turns spare verifier width (demo 6: nearly free) into\n"
          f"tokens: {rate[depth, 1, False]:.2f} per call for the chain, "
          f"{rate[depth, 3, True]:.2f} for "
          f"branching 3 with distinct\nchildren (which never spend a slot on a duplicate). At "
          f"equal nodes the chain of\n{nodes[3]} makes {rate[nodes[3], 1, False]:.2f}, but it pays "
          f"{nodes[3]} sequential draft steps where the tree pays {depth}.")


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
}
USAGE = "usage: speculative_decoding_from_scratch.py [--list|--help|--tune|DEMO...]"
HELP = f"""{USAGE}

Runs the demos (all of them, or the numbered ones) and prints their evidence.
  DEMO ...                     run these demos, in this order
  --list                       print the demo titles
  --tune ALPHA C [--k-max N]   best draft length for an acceptance rate ALPHA
                               and a draft cost C (a fraction of one target
                               call), by the paper's closed forms; k_max 32
  --help                       print this

Demos:"""
BREAK_IT = """
Now break it: edit one stage, rerun, and watch what moves.
  residual()      return p instead        demo 1's proof fails; in demo 2 the
                                          'correct' row lands on 'no_resample'
  accept_prob()   q[x] / p[x] for p/q     demo 2: 'correct' far above the floor
  verify_round()  delete the bonus line   still exact (demo 2), but a perfect
                                          draft gives k tokens per call, not k+1"""


def tune(alpha, c, k_max=32):
    """Which k, for a measured alpha and draft cost c? Eq. 1 and Theorem 3.8."""
    best, s_best = best_k(alpha, c, k_max)
    print(f"alpha = {alpha}, c = {c}; operations assume c_hat = c (arithmetic ~ time)\n")
    print(f"{'k':>3}{'tokens per call':>17}{'speedup':>9}{'operations':>12}")
    for k in range(1, k_max + 1):
        tokens = expected_tokens(alpha, k)
        print(f"{k:3d}{tokens:17.3f}{speedup(tokens, k, c):9.3f}"
              f"{operations_factor(alpha, k, c):12.3f}" + ("  <- best" if k == best else ""))
    if best:
        print(f"\nspeculate with k = {best}, expected speedup {s_best:.2f}\u00d7")
    else:
        print("\nfall back to plain decoding (\u03b1 \u2264 c)")


def parse_tune(args):
    """--tune ALPHA C [--k-max N] -> (alpha, c, k_max), or ValueError saying why."""
    if len(args) not in (2, 4) or (len(args) == 4 and args[2] != "--k-max"):
        raise ValueError("--tune takes ALPHA C [--k-max N]")
    try:
        alpha, c = float(args[0]), float(args[1])
        k_max = int(args[3]) if len(args) == 4 else 32
    except ValueError:
        raise ValueError(f"--tune needs numbers, got {' '.join(args)}") from None
    if not 0 <= alpha <= 1:
        raise ValueError(f"ALPHA must lie in [0, 1], got {args[0]}")
    if not (np.isfinite(c) and c >= 0):
        raise ValueError(f"C must be finite and >= 0, got {args[1]}")
    if k_max < 1:
        raise ValueError(f"--k-max must be >= 1, got {args[3]}")
    return alpha, c, k_max


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
    if argv[:1] == ["--tune"]:
        try:
            tune(*parse_tune(argv[1:]))
        except ValueError as e:
            return usage_error(e)
        return 0
    for arg in argv:
        if arg not in DEMOS:
            return usage_error(f"unknown argument {arg!r}; the demos are 1-{len(DEMOS)}")
    for n in dict.fromkeys(argv or DEMOS):
        text, demo = DEMOS[n]
        print(f"\n{'=' * 78}\nDemo {n}. {text}\n{'=' * 78}")
        demo()
    print(BREAK_IT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
