"""The small helpers the demos, the trainers and the command line lean on, each
pinned by a hand-worked value or an invariant; and a check that no public
function of the script goes untested."""
import ast
import io
import contextlib
from pathlib import Path

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import ScriptedRng
from test_stages import P3, Q3


def test_name_and_the_printing_helpers():
    assert [sd.name(x) for x in range(6)] == list("abcdef")
    assert sd.row_str([0.5, 0.25]) == "  0.500  0.250"
    assert sd.grid_row("a", [0.05, 0.5, 0.0]) == "  a .050 .500 .000"


def test_say_wraps_at_78_and_marks_clock_lines():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sd.say(" ".join(["word"] * 40), "", "end.")
        sd.say(" ".join(["tick"] * 30), clock=True)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 78 for line in lines) and "  " not in lines[2]
    clocked = [line for line in lines if line.startswith("tick")]
    assert len(clocked) >= 2 and all(line.endswith("(clock)") for line in clocked)
    assert " ".join(" ".join(lines).replace("(clock)", "").split()).endswith("end. " + "tick " * 29 + "tick")
    assert "word end." in " ".join(lines)  # the empty sentence leaves no gap


@pytest.mark.parametrize("row, flaw", [
    ([0.0, 0.0, 0.0], "no positive mass"), ([0.5, float("nan")], "NaN"),
    ([0.7, -0.2, 0.5], "negative entry, -0.2"), ([1.0, float("inf")], "inf"),
])
def test_sample_from_refuses_a_row_that_is_not_a_distribution(row, flaw):
    assert flaw in sd.row_flaw(row)
    with pytest.raises(ValueError, match=f"cannot sample from .*{flaw}"):
        sd.sample_from(row, 0.5)


def test_an_unnormalised_residual_fails_where_it_is_sampled():
    # a learner's slip: residual without the max(0, .) samples from p - q
    with pytest.raises(ValueError, match="negative entry"):
        sd.sample_from(np.array([0.5, 0.3, 0.2]) - np.array([0.2, 0.6, 0.2]), 0.3)


def test_check_rule():
    sd.check_rule("greedy")
    sd.check_rule("no_update", ("correct", "no_update"))
    with pytest.raises(ValueError, match="unknown rule 'greedy'; valid rules: correct, no_update"):
        sd.check_rule("greedy", ("correct", "no_update"))


def test_as_table_and_check_inputs():
    T = sd.as_table([[0.5, 0.5], [1, 0]], "T")
    assert T.dtype == float and T.shape == (2, 2)
    with pytest.raises(ValueError, match="T row 1 sums to 0.9"):
        sd.as_table([[0.5, 0.5], [0.9, 0]], "T")
    P, Q = sd.check_inputs(P3.tolist(), Q3, 2, n_tokens=3, k=np.int64(2))
    assert isinstance(P, np.ndarray) and Q is not None
    with pytest.raises(ValueError, match="ctx must be a token id in 0..2, got 1.0"):
        sd.check_inputs(P3, Q3, 1.0, k=2)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got True"):
        sd.check_inputs(P3, Q3, 1, k=True)


def test_without_by_hand():
    assert np.allclose(sd.without(np.array([0.5, 0.3, 0.2]), [0]), [0, 0.6, 0.4])
    assert np.allclose(sd.without(np.array([0.5, 0.3, 0.2]), []), [0.5, 0.3, 0.2])


def test_bigram_counts_and_visit_joint():
    assert sd.bigram_counts([0, 1, 1], 2).tolist() == [[0, 1], [0, 1]]
    J = sd.visit_joint(P3)
    assert J.sum() == pytest.approx(1)
    assert np.allclose(J.sum(axis=1), sd.stationary(P3))  # how often each context
    assert np.allclose(J.sum(axis=0), sd.stationary(P3))  # ... and each next token


def test_gamma_fraction_is_the_upper_tail_above_a_plus_one():
    # Q(1, x) = exp(-x) = exp(-x) x^1 / Gamma(1) * fraction -> 1 / x
    assert sd.gamma_fraction(1.0, 5.0) == pytest.approx(1 / 5)
    # Q(2, x) = exp(-x) (1 + x) = exp(-x) x^2 / Gamma(2) * fraction -> (1 + x) / x^2
    assert sd.gamma_fraction(2.0, 6.0) == pytest.approx(7 / 36)


def test_low_rank_step_is_one_gradient_step_through_u_v_and_b():
    u, v, b = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.5, 0.5])
    G = np.array([[1.0, 0.0], [0.0, 1.0]])
    u2, v2, b2 = sd.low_rank_step([u, v, b], G, 0.1)
    assert np.allclose(u2, u - 0.1 * np.array([3.0, 4.0]))   # G @ v
    assert np.allclose(v2, v - 0.1 * np.array([1.0, 2.0]))   # G.T @ u
    assert np.allclose(b2, b - 0.1 * np.array([1.0, 1.0]))   # column sums


def test_first_two_counts_and_truth_and_floor():
    counts = sd.first_two(lambda rng: sd.plain_decode(P3, 0, 2, rng), 50, seed=1)
    assert counts.sum() == 50 and counts.shape == (6, 6)
    scripted = sd.first_two(lambda rng: [1, 2, 0], 3, seed=0)
    assert scripted[1, 2] == 3 and scripted.sum() == 3
    truth, floor = sd.truth_and_floor(5, 400, seed=0)
    assert np.array_equal(truth, sd.target_first_tokens(sd.TARGET, 5, 2)) and 0 < floor < 0.2


def test_clocked_returns_seconds_and_the_value():
    seconds, value = sd.clocked(lambda: 42)
    assert value == 42 and 0 <= seconds < 1


def test_blas_name_is_a_string():
    assert isinstance(sd.blas_name(), str) and sd.blas_name()


def test_calibrate_prices_a_wide_pass_and_k_draft_passes_per_repeat():
    W, W_draft, X = np.ones((64, 64), np.float32), np.ones((8, 64), np.float32), np.ones((64, 17), np.float32)
    c, v = sd.calibrate(W, W_draft, X, k=3, reps=4)
    assert c.shape == v.shape == (4,) and (c > 0).all() and (v > 0).all()


def test_predict_uses_the_medians_and_reports_the_spread():
    c, v = np.array([0.1, 0.1, 0.1, 0.1]), np.array([1.0, 2.0, 3.0, 4.0])
    refined, spread = sd.predict((c, v), 3.0, k=2)
    assert refined == pytest.approx(3.0 / (2.5 + 0.2))
    each = sorted(3.0 / (v_r + 0.2) for v_r in v)
    q25, q75 = np.percentile(each, [25, 75])
    assert spread == pytest.approx((q75 - q25) / refined)
    assert sd.predict((c, np.full(4, 2.0)), 3.0, k=2)[1] == 0


def test_usage_error(capsys):
    assert sd.usage_error("bad") == 2
    assert capsys.readouterr().err == "usage error: bad (see --help)\n"


def test_every_public_function_is_named_in_a_test():
    # demos are pinned through what they print (test_demos, test_break_it)
    source = Path(sd.__file__).read_text()
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    public = [node.name for node in ast.parse(source).body
              if isinstance(node, (ast.FunctionDef, ast.ClassDef))
              and not node.name.startswith(("_", "demo", "main"))]
    assert [f for f in public if f"sd.{f}(" not in tests and f"sd.{f}," not in tests] == []
