"""Demo 6's batch section: the roofline of a batched pass, and where
speculation stops paying, each against a hand-worked case or a brute force."""
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
    times = [sd.roofline_time(*sd.pass_traffic(TINY, 0, 1, b), flops=2, bandwidth=1) for b in (1, 2, 3)]
    assert times[0] == (212.0, "memory") and times[1] == (212.0, "memory")
    assert times[2] == (318.0, "compute")


def test_batched_pass_time_is_monotone_in_the_batch():
    for n_ctx in (16, 512):
        times = [sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, n_ctx, 5, b))[0]
                 for b in (1, 2, 4, 16, 64, 256, 1024)]
        assert times == sorted(times)


def test_batch_speedup_at_batch_one_is_the_single_sequence_cost_model():
    # one sequence, 512 tokens: every pass of 2 to 33 positions is memory-bound,
    # so v = 1 and c is the draft's bytes over the target's
    plain = sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 512, 1))[0]
    c = sd.roofline_time(*sd.pass_traffic(sd.DRAFT_SHAPE, 0, 1))[0] / plain
    assert sd.batch_speedup(0.8, 4, 1, 512) == pytest.approx(sd.speedup(sd.expected_tokens(0.8, 4), 4, c))


@pytest.mark.parametrize("alpha", [0.7, 0.9])
def test_break_even_batch_against_a_scan_of_every_batch_size(alpha):
    end = sd.break_even_batch(alpha, 16)
    helps = [sd.fastest_k(lambda k: sd.batch_speedup(alpha, k, b, 16), 32)[0] > 0
             for b in range(1, end + 200)]
    assert helps.index(False) + 1 == end and not any(helps[end - 1:])


def test_break_even_batch_is_none_where_speculation_always_pays():
    assert sd.break_even_batch(0.7, 512, b_max=4096) is None


def test_fastest_k_by_hand():
    assert sd.fastest_k(lambda k: {1: 1.2, 2: 1.5, 3: 1.4}[k], 3) == (2, 1.5)
    assert sd.fastest_k(lambda k: 0.9, 3) == (0, 1.0)


def test_why_batch_names_the_ridge_crossing_or_its_absence():
    # ridge 1, one token 2 MACs, weights 10 bytes: with 1 byte of KV a sequence,
    # B * 2 / (10 + B) = 1 at B = 10; with 4 bytes it tends to 0.5, below the ridge
    assert sd.why_batch(2, 10, 1, 1).startswith("A plain pass reaches the ridge at B = 10:")
    assert "tends to 0.5 MACs per byte" in sd.why_batch(2, 10, 4, 1)
