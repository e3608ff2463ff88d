"""Demo 6's batch section: the roofline of a batched pass, and where
speculation stops paying, each against a hand-worked case or a brute force."""
import numpy as np
import pytest

import speculative_decoding_from_scratch as sd

TINY = (2, 5, 2, 7)  # d_model, d_ff, layers, vocab


def test_pass_traffic_by_hand():
    # macs_per_token(2, 5, 2, n_ctx, 7) = 2 * (16 + 4 n_ctx + 30) + 14; the
    # weights are its value at n_ctx = 0, in fp16 bytes; the KV cache is
    # 2 (K, V) * 2 bytes * 2 layers * n_ctx * d_model per sequence
    assert sd.pass_traffic(TINY, 0, 1) == (106, 212)
    assert sd.pass_traffic(TINY, 3, 1) == (130, 212 + 48)
    assert sd.pass_traffic(TINY, 3, 4, batch=5) == (5 * 4 * 130, 212 + 5 * 48)
    assert sd.pass_traffic(TINY, 3, 2, batch=1) == sd.pass_traffic(TINY, 3, 2)


def test_roofline_switches_to_compute_where_macs_per_byte_cross_the_ridge():
    # flops 2, bandwidth 1: the ridge is 1 MAC per byte. A batch of B does
    # 106 B MACs on 212 bytes: memory-bound below B = 2, compute-bound above
    hw = sd.Accelerator("toy", flops=2, bandwidth=1, memory=1e9)
    times = [sd.roofline_time(*sd.pass_traffic(TINY, 0, 1, b), hw) for b in (1, 2, 3)]
    assert [(float(t), str(bound)) for t, bound in times] == [(212.0, "memory"), (212.0, "memory"), (318.0, "compute")]


def test_batched_pass_time_is_monotone_in_the_batch():
    for n_ctx in (16, 512):
        times = [sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, n_ctx, 5, b))[0]
                 for b in (1, 2, 4, 16, 64, 256, 1024)]
        assert times == sorted(times)


EQ1 = sd.expected_tokens(0.8, np.arange(1, 33))


def test_batch_speedups_at_batch_one_is_the_single_sequence_cost_model():
    # one sequence, 512 tokens: every pass of 2 to 33 positions is memory-bound,
    # so v = 1 and c is the draft's bytes over the target's
    plain = sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 512, 1))[0]
    c = sd.roofline_time(*sd.pass_traffic(sd.DRAFT_SHAPE, 512, 1))[0] / plain
    assert sd.batch_speedups(EQ1, 1, 512)[3] == pytest.approx(sd.speedup(EQ1[3], 4, c))


def scalar_speedup(tokens, k, batch, n_ctx, hw=sd.H100, target=sd.LLAMA2_7B, draft=sd.DRAFT_SHAPE):
    """The roofline speedup rewritten from the formulas, one k at a time: bytes
    are weights (2 bytes each) plus K and V caches, time the slower of bytes
    over bandwidth and 2 MACs over FLOP/s."""
    def seconds(shape, ctx, positions):
        d, f, layers, vocab = shape
        weights = 2 * (layers * (4 * d * d + 3 * d * f) + d * vocab)
        kv = batch * 2 * 2 * layers * ctx * d
        macs = batch * positions * (layers * (4 * d * d + 2 * d * ctx + 3 * d * f) + d * vocab)
        return max((weights + kv) / hw.bandwidth, 2 * macs / hw.flops)
    plain = seconds(target, n_ctx, 1)
    return tokens / (seconds(target, n_ctx, k + 1) / plain + k * seconds(draft, n_ctx, 1) / plain)


@pytest.mark.parametrize("batch, n_ctx", [(1, 16), (50, 16), (300, 16), (7, 512), (200, 512)])
def test_batch_speedups_against_the_formulas_rewritten(batch, n_ctx):
    got = sd.batch_speedups(EQ1, batch, n_ctx)
    assert got == pytest.approx([scalar_speedup(EQ1[k - 1], k, batch, n_ctx) for k in range(1, 33)])


@pytest.mark.parametrize("alpha", [0.7, 0.9])
def test_break_even_batch_against_a_scan_of_every_batch_size(alpha):
    tokens = sd.expected_tokens(alpha, np.arange(1, 33))
    end = sd.break_even_batch(tokens, 16)
    helps = [max(sd.batch_speedups(tokens, b, 16)) > 1 for b in range(1, end + 200)]
    assert helps.index(False) + 1 == end and not any(helps[end - 1:])


def test_break_even_batch_is_none_where_speculation_always_pays():
    assert sd.break_even_batch(sd.expected_tokens(0.7, np.arange(1, 33)), 512, b_max=4096) is None


def test_sequences_that_fit_by_hand():
    # 512 tokens: weights 13.21 GB (6.61e9 MACs x 2 bytes) a pass reads, and the input embedding it only looks up,
    # 32000 x 4096 x 2 bytes, which memory holds too; KV 2 x 2 x 32 x 512 x 4096 bytes
    weights = 2 * sd.macs_per_token(4096, 11008, 32, 0, 32000) + 2 * 4096 * 32000
    kv = 2 * 2 * 32 * 512 * 4096
    assert sd.sequences_that_fit(512) == int((80e9 - weights) // kv) == 247
    small = sd.Accelerator("small", 1e12, 1e12, weights + 2.5 * kv)
    assert sd.sequences_that_fit(512, small) == 2
    # a draft held beside the target takes its weights once and its own KV cache a sequence: chapter 19's big draft
    # (d = 2048, 16 layers, d_ff 5504) and small one (d = 768, 4 layers, d_ff 2048)
    for shape, fit in (((2048, 5504, 16, 32000), 192), ((768, 2048, 4, 32000), 241)):
        d, ff, layers, vocab = shape
        w_draft, kv_draft = 2 * sd.macs_per_token(d, ff, layers, 0, vocab) + 2 * d * vocab, 2 * 2 * layers * 512 * d
        assert sd.sequences_that_fit(512, drafts=(shape,)) == int((80e9 - weights - w_draft) // (kv + kv_draft)) == fit


def test_the_ridge_point_is_macs_per_byte():
    # 989 TFLOP/s is 494.5 T MACs/s, over 3.35 TB/s
    assert sd.ridge() == pytest.approx(989e12 / 2 / 3.35e12) and round(sd.ridge()) == 148


def test_why_batch_names_the_ridge_crossing_or_its_absence():
    # ridge 1, one token 2 MACs, weights 10 bytes: with 1 byte of KV a sequence, a
    # verifying pass of 2 positions reaches B * 4 / (10 + B) = 1 at B = 10/3, so from
    # B = 4, 8 positions where the weights alone would give 5; with 4 bytes a plain
    # pass tends to 0.5, below the ridge, and n positions stay memory-bound while
    # n * 2 <= 4: n = 2, the third from B * 3 * 2 / (10 + 4 B) = 1, B = 5
    assert sd.why_batch(2, 10, 1, 1) == ("At k = 1 a verifying pass, 2 positions a sequence, crosses the ridge from"
                                         " B = 4 (8 positions, not 5: each sequence adds its KV cache to the bytes).")
    text = sd.why_batch(2, 10, 4, 1)
    assert "tends to 0.5 MACs per byte" in text and "up to 2 positions" in text
    assert "3 go compute-bound from B = 5." in text


# --- the plan: a k for every batch size ------------------------------------------------

@pytest.mark.parametrize("n_ctx, max_batch, tol", [(16, 400, 0.01), (512, 248, 0.01), (16, 120, 0.0)])
def test_the_plan_against_a_brute_force_scan(n_ctx, max_batch, tol):
    tokens = sd.expected_tokens(0.75, np.arange(1, 33))
    buckets, _ = sd.plan_schedule(tokens, n_ctx, max_batch, tol)
    assert buckets[0][0] == 1 and buckets[-1][1] == max_batch
    assert all(b[1] + 1 == c[0] for b, c in zip(buckets, buckets[1:]))  # contiguous, sorted
    for lo, hi, k in buckets:
        for b in range(lo, hi + 1):
            speeds = [scalar_speedup(tokens[j - 1], j, b, n_ctx) for j in range(1, 33)]
            assert (k == 0) == (max(speeds) <= 1)  # k = 0 exactly where no k helps
            if k:
                assert speeds[k - 1] >= (1 - tol) * max(speeds) - 1e-12


def test_the_plan_merges_buckets_only_within_its_tolerance():
    tokens = sd.expected_tokens(0.9, np.arange(1, 33))
    exact_buckets = sd.plan_schedule(tokens, 16, 400, tol=0.0)[0]
    loose = sd.plan_schedule(tokens, 16, 400, tol=0.05)[0]
    assert len(loose) < len(exact_buckets)
