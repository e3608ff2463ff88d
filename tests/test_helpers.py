"""The small helpers the demos lean on, each pinned by a hand-worked value."""
import contextlib
import dis
import inspect
import io
import re

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_stages import P3, Q3


def printed(f, *args, **kwargs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        f(*args, **kwargs)
    return out.getvalue()


def test_name_and_prob3():
    assert [sd.name(x) for x in range(6)] == list("abcdef")
    assert [sd.prob3(x) for x in (0.05, 0.5, 0.0, 1.0)] == [".050", ".500", ".000", "1.00"]


def test_say_wraps_at_78_and_marks_clock_lines():
    lines = printed(sd.say, " ".join(["word"] * 40), "", "end.").splitlines()
    assert all(len(line) <= 78 for line in lines) and " ".join(lines).endswith("word end.")
    clocked = printed(sd.say, " ".join(["tick"] * 30), clock=True).splitlines()
    assert len(clocked) >= 2 and all(line.endswith("(clock)") and len(line) <= 78 for line in clocked)


def test_table_by_hand():
    text = printed(sd.table, [("k", 3, "d"), ("name", 8, "<"), ("value", 8, ".2f"), ("p", 10, sd.p_text)],
                   [(1, "ab", 0.5, 0.5), (12, "c", None, 1e-13)], groups=[("g", 2, 3)])
    # widths 3, 8, 8, 10; a text column gets a two-space gutter; the group is
    # centred over the last two columns (18 wide, starting at 11)
    assert text.splitlines() == ["                   g", "  k  name     value         p",
                                 "  1  ab        0.50      0.50", " 12  c                < 1e-12"]


def test_table_two_line_headers_sit_low_and_clock_rows_are_marked():
    text = printed(sd.table, [("a\nb", 4, "d"), ("c", 4, "d")], [(1, 2)], clock=True)
    assert text.splitlines() == ["   a", "   b   c", "   1   2  (clock)"]


@pytest.mark.parametrize("row, flaw", [
    ([0.0, 0.0, 0.0], "no positive mass"), ([0.5, float("nan")], "NaN"),
    ([0.7, -0.2, 0.5], "entry 1 is negative (-0.2)"), ([1.0, float("inf")], "inf"),
])
def test_sample_from_refuses_a_row_that_is_not_a_distribution(row, flaw):
    assert flaw in sd.row_flaw(row)
    with pytest.raises(ValueError, match=f"cannot sample from .*{re.escape(flaw)}"):
        sd.sample_from(row, 0.5)


def test_an_unnormalised_residual_fails_where_it_is_sampled():
    # a learner's slip: residual without the max(0, .) samples from p - q
    with pytest.raises(ValueError, match="entry 1 is negative"):
        sd.sample_from(np.array([0.5, 0.3, 0.2]) - np.array([0.2, 0.6, 0.2]), 0.3)


def test_as_table_and_check_inputs():
    T = sd.as_table([[0.5, 0.5], [1, 0]], "T")
    assert T.dtype == float and T.shape == (2, 2)
    with pytest.raises(ValueError, match="T row 1 sums to 0.9"):
        sd.as_table([[0.5, 0.5], [0.9, 0]], "T")
    P, Q, text = sd.check_inputs(P3.tolist(), Q3, (2,), n_tokens=3, k=np.int64(2))
    assert isinstance(P, np.ndarray) and isinstance(Q, np.ndarray) and text == [2]
    with pytest.raises(ValueError, match=r"text\[0\] = 1.0 is not a token id in 0..2"):
        sd.check_inputs(P3, Q3, [1.0], k=2)
    with pytest.raises(ValueError, match="text must be a non-empty list of token ids, got 1"):
        sd.check_inputs(P3, Q3, 1, k=2)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got True"):
        sd.check_inputs(P3, Q3, [1], k=True)


def test_without_by_hand():
    assert np.allclose(sd.without(np.array([0.5, 0.3, 0.2]), [0]), [0, 0.6, 0.4])
    assert np.allclose(sd.without(np.array([0.5, 0.3, 0.2]), []), [0.5, 0.3, 0.2])


def test_bigram_counts_and_visit_joint():
    assert sd.bigram_counts([0, 1, 1], 2).tolist() == [[0, 1], [0, 1]]
    J = sd.visit_joint(P3)
    assert J.sum() == pytest.approx(1)
    assert np.allclose(J.sum(axis=1), sd.stationary(P3))  # how often each context
    assert np.allclose(J.sum(axis=0), sd.stationary(P3))  # ... and each next token


def test_low_rank_step_is_one_gradient_step_through_u_v_and_b():
    u, v, b = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.5, 0.5])
    G = np.array([[1.0, 0.0], [0.0, 1.0]])
    u2, v2, b2 = sd.low_rank_step([u, v, b], G, 0.1)
    assert np.allclose(u2, u - 0.1 * np.array([3.0, 4.0]))   # G @ v
    assert np.allclose(v2, v - 0.1 * np.array([1.0, 2.0]))   # G.T @ u
    assert np.allclose(b2, b - 0.1 * np.array([1.0, 1.0]))   # column sums


def test_first_two_counts_and_the_floor():
    counts = sd.first_two(lambda rng: sd.plain_decode(P3, [0], 2, rng), 50, seed=1)
    assert counts.sum() == 50 and counts.shape == (6, 6)
    scripted = sd.first_two(lambda rng: [1, 2, 0], 3, seed=0)
    assert scripted[1, 2] == 3 and scripted.sum() == 3
    # a one-hot table samples exactly its joint: no noise at all
    assert sd.floor_tv(sd.temper(sd.TARGET, 0), 0, 100, seed=0) == 0.0


def test_clocked_returns_seconds_and_the_value():
    seconds, value = sd.clocked(lambda: 42)
    assert value == 42 and 0 <= seconds < 1


# --- the deliberate bugs run as edits of the script's text ------------------------

def test_edited_changes_one_line_of_one_function_and_nothing_else():
    module = sd.edited((("residual", "return d / total if total > 0 else p", "return p"),))
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.6, 0.2])
    assert np.array_equal(module.residual(p, q), p) and np.allclose(sd.residual(p, q), [1, 0, 0])
    assert module.diff == [("residual", "return d / total if total > 0 else p", "return p")]
    # the other functions see the edited stage, and the script's own do not
    A_edited, R_edited = module.kept_and_replaced(P3, Q3)
    assert np.allclose(R_edited[0], 0.2 * P3[0]) and not np.allclose(sd.kept_and_replaced(P3, Q3)[1][0], 0.2 * P3[0])


def test_an_edited_function_keeps_its_line_numbers_for_tracebacks_and_pdb():
    # a deleted line becomes `pass`, so every line after it keeps its number
    source, first = inspect.getsourcelines(sd.verify_round)
    module = sd.bugged("continue")
    assert module.verify_round.__code__.co_firstlineno == first == sd.verify_round.__code__.co_firstlineno
    lines = [n for _, n in dis.findlinestarts(module.verify_round.__code__) if n]
    assert max(lines) == max(n for _, n in dis.findlinestarts(sd.verify_round.__code__) if n)
    # a traceback from an edited line names that line
    broken = sd.edited((("residual", "return d / total if total > 0 else p", "return 1 / 0"),))
    with pytest.raises(ZeroDivisionError) as caught:
        broken.residual(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    at = caught.traceback[-1]
    source, first = inspect.getsourcelines(sd.residual)
    line = next(i for i, text in enumerate(source, start=first) if "return d / total" in text)
    assert at.lineno + 1 == line  # pytest counts from 0


def test_an_edit_reaches_the_functions_that_take_it_as_a_default():
    # spec_generate's verify=verify_round must be the edited verify_round
    module = sd.bugged("continue")
    assert module.spec_generate.__defaults__[0] is module.verify_round is not sd.verify_round


def test_edited_names_a_line_that_is_not_there_and_bugged_says_why_it_cannot_run():
    with pytest.raises(LookupError, match=r"residual\(\) has 0 lines that read 'no such line', not exactly one"):
        sd.edited((("residual", "no such line", "return p"),))
    with pytest.raises(LookupError, match="verify_round"):  # the second edit finds the line the first changed
        sd.edited((("verify_round", "return emitted", ""), ("verify_round", "return emitted", "return []")))
    with pytest.raises(LookupError, match="there is no function"):
        sd.edited((("no_such_function", "x", "y"),))
    assert sd.bugged("no_resample", {"no_resample": [("residual", "no such line", "return p")]}) == \
        "your edit changed a line it edits"
    assert sd.bugged("bad", {"bad": [("residual", "return d / total if total > 0 else p", "return (")]}) == \
        "with your edit it does not compile"


def test_every_bug_is_one_line_per_edit_and_deletes_or_replaces_it():
    for bugs in (sd.BUGS, sd.BLOCK_BUGS, sd.TREE_BUGS, sd.SHIPPED_BUGS, sd.APEX_BUGS, sd.GREEDY_BUGS):
        for name_, edits in bugs.items():
            module = sd.edited(tuple(edits))
            assert len(module.diff) == len(edits)
            for function, old, new in module.diff:
                source = inspect.getsource(getattr(sd, function)).splitlines()
                assert [line.strip() for line in source].count(old) == 1 and new != old
