"""Demo 6's real clock: the helpers, never a wall-clock figure."""
import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_stages import P3, Q3


class RecordingW:
    """Stands in for a weight matrix: records the width of every product."""
    shape, dtype = (4, 4), np.float32

    def __init__(self):
        self.widths = []

    def __matmul__(self, X):
        self.widths.append(X.shape[1])


def test_priced_charges_one_column_per_draft_step_and_k_plus_one_to_verify():
    W_target, W_draft = RecordingW(), RecordingW()
    P, Q = sd.Priced(P3, W_target), sd.Priced(Q3, W_draft)
    drafted = sd.draft_tokens(Q, 0, 3, np.random.default_rng(0))
    sd.verify_round(P, Q3, 0, drafted, np.random.default_rng(1))
    assert W_draft.widths == [1, 1, 1]
    assert W_target.widths == [4]  # one pass over the context and 3 drafts


def test_priced_changes_nothing_about_the_tokens():
    W = np.ones((8, 8), np.float32)
    plain = sd.measure(P3, Q3, 3, 200, seed=5)
    priced = sd.measure(sd.Priced(P3, W), Q3, 3, 200, seed=5, draft_from=sd.Priced(Q3, W))
    assert plain == priced
    assert sd.plain_decode(sd.Priced(P3, W), 0, 50, np.random.default_rng(2)) == \
        sd.plain_decode(P3, 0, 50, np.random.default_rng(2))


def test_median_time_is_a_positive_time_per_call():
    calls = []
    t = sd.median_time(lambda: calls.append(1), repeats=3, calls=4)
    assert t > 0 and len(calls) == 1 + 3 * 4  # one warm-up call


def test_speedup_with_a_priced_verifying_pass():
    # tokens / (v + k c): 2.8 tokens, k = 4, c = .05, v = 3.3 -> 2.8 / 3.5
    assert sd.speedup(2.8, 4, 0.05, v=3.3) == pytest.approx(0.8)
    assert sd.speedup(2.8, 4, 0.05) == sd.speedup(2.8, 4, 0.05, v=1.0) == pytest.approx(2.8 / 1.2)
