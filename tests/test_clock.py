"""Demo 6's real clock and roofline rows, pinned with a fake clock and fake
weight matrices: never a wall-clock figure."""
import contextlib
import io

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_stages import P3, Q3


class RecordingW:
    """Stands in for a weight matrix: records the width of every product."""
    dtype = np.float32

    def __init__(self, rows=4, cols=4):
        self.shape, self.widths = (rows, cols), []

    def __matmul__(self, X):
        self.widths.append(X.shape[1])


def test_priced_charges_one_column_per_draft_step_and_k_plus_one_to_verify():
    W_target, W_draft = RecordingW(), RecordingW()
    P, Q = sd.Priced(P3, W_target), sd.Priced(Q3, W_draft)
    drafted, q_rows = sd.draft_tokens(Q, [0], 3, np.random.default_rng(0))
    sd.verify_round(P, [0], drafted, q_rows, np.random.default_rng(1))
    assert W_draft.widths == [1, 1, 1]
    assert W_target.widths == [4]  # one pass over the context and 3 drafts


def test_priced_changes_nothing_about_the_tokens():
    W = np.ones((8, 8), np.float32)
    assert sd.measure(P3, Q3, 3, 200, seed=5) == sd.measure(sd.Priced(P3, W), sd.Priced(Q3, W), 3, 200, seed=5)


def test_median_time_is_the_median_of_repeats_of_back_to_back_calls(monkeypatch):
    # repeats take 3, 6 and 30 seconds for 3 calls each: per call 1, 2, 10 -> the median 2
    times = iter([3.0, 6.0, 30.0])
    monkeypatch.setattr(sd, "clocked", lambda f: (next(times), f()))
    calls = []
    assert sd.median_time(lambda: calls.append(1), repeats=3, calls=3) == 2.0
    assert len(calls) == 1 + 3 * 3  # one warm-up call first


def test_calibrate_prices_k_draft_passes_and_a_k_plus_one_column_pass(monkeypatch):
    # the fake clock: a target pass of n columns takes 1 + 0.5 (n - 1) seconds, a draft pass 0.1
    W, W_draft, X = RecordingW(), RecordingW(2, 4), np.ones((4, 17), np.float32)

    def clocked(f):
        before = (len(W.widths), len(W_draft.widths))
        out = f()
        if len(W_draft.widths) > before[1]:
            return 0.1, out
        return 1 + 0.5 * (W.widths[-1] - 1), out
    monkeypatch.setattr(sd, "clocked", clocked)
    c, v = sd.calibrate(W, W_draft, X, k=3, reps=4)
    assert c == pytest.approx([0.1] * 4)  # the mean of the 3 draft passes, not their sum
    assert v == pytest.approx([2.5] * 4)  # 4 columns: 1 + 0.5 * 3, in one-column passes
    assert W.widths.count(4) == 4 and W_draft.widths == [1] * 12


def test_predict_uses_the_medians():
    c, v = np.array([0.1, 0.1, 0.1, 0.1]), np.array([1.0, 2.0, 3.0, 4.0])
    assert sd.predict((c, v), 3.0, k=2) == pytest.approx(3.0 / (2.5 + 0.2))  # the median v, 2.5, and 2 c


@pytest.mark.parametrize("clocks, at_runs, v4, words", [
    ((0.5, 2.2), (0.6, 2.15), 3.0, ["The middling draft loses (0.50x).", "The blend draft wins (2.20x).",
                                    "Refined is nearer the clock than the paper's for both drafts.",
                                    "At that price, only the draft that agrees often wins."]),
    ((1.2, 2.2), (1.3, 2.15), 3.0, ["The middling draft wins (1.20x).", "Even so, both drafts win."]),
    ((0.5, 0.5), (0.7, 0.7), 3.0, ["The blend draft loses (0.50x).", "At that price, neither draft wins."]),
    ((0.5, 2.5), (0.6, 1.0), 3.0, ["Refined is nearer the clock than the paper's for the middling draft only."]),
    ((0.5, 2.5), (2.5, 2.5), 3.0, ["Refined is nearer the clock than the paper's for the blend draft only."]),
    ((0.5, 2.2), (0.6, 2.15), 1.1, ["So k+1 positions cost about one."]),
    # refined* off the clock the same way for both drafts says so, with each gap (read 1806 found both 12% low)
    ((0.6, 2.0), (0.54, 1.76), 3.0, ["Refined* itself runs 10% below the clock for the middling draft and 12% below"
                                     " the clock for the blend draft: this run's rounds cost less than the calibrated"
                                     " v + k c priced them."]),
    ((0.5, 2.0), (0.505, 2.2), 3.0, ["Refined* itself runs 10% above the clock for the blend draft: this run's rounds"
                                    " cost more than the calibrated v + k c priced them."]),
    ((0.5, 2.0), (0.45, 2.2), 3.0, ["Refined* itself runs 10% below the clock for the middling draft and 10% above"
                                    " the clock for the blend draft: this run's rounds cost other than the calibrated"
                                    " v + k c priced them."]),
])
def test_chapter13_verdicts_follow_the_clock(capsys, clocks, at_runs, v4, words):
    # (label, k, paper, refined, tokens per call, clock, refined*), the middling draft first; the paper says 2.0x,
    # and refined and refined* alike say at_run (the verdict judges refined; the detail, refined*)
    rows = [(label, 4, 2.0, at_run, 2.8, clock, at_run) for label, clock, at_run in zip(("middling", "blend"), clocks,
                                                                                        at_runs)]
    sd.demo36_verdicts(rows, v4=v4)
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    # how far refined* runs from the clock is the detail's: readers checked its percentages and asked its cause for 2
    # to 2.5 minutes (reads 2022 and 2046)
    assert "Refined* itself" not in text
    text += " " + sd.refined_off_words(rows)
    assert all(w in text for w in words), text
    assert f"Here v is {v4:.2f} at k = 4; the roofline gives {sd.verify_cost(4, 1, 512):.2f}." in text
    assert ("agrees often" in text) == (v4 > 1.25 and clocks[0] <= 1 < clocks[1])
    off = [a / c - 1 for c, a in zip(clocks, at_runs)]  # said where a draft misses by over 2%
    assert ("Refined* itself runs" in text) == any(abs(x) > 0.02 for x in off)
    # the takeaway stands only where v in place of 1 came nearer the clock than the paper's 2.0x, for both drafts
    assert ("Takeaway: priced with v, measured here, the prediction comes nearer the clock than the paper's formula"
            " for both drafts. Price the verifying pass on your machine, not at one plain pass." in text) == all(
        abs(a - c) < abs(2.0 - c) for c, a in zip(clocks, at_runs))


def test_chapter13_every_clock_line_is_marked_and_demo6_rows(monkeypatch):
    # a small W and a clock that returns random times: every line that changes
    # between two runs must end in (clock)
    outputs = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        monkeypatch.setattr(sd, "clocked", lambda f: (rng.uniform(1e-4, 1e-2), f()))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sd.demo13_clock(size=256)
            sd.demo36_clock_model(size=256)
        outputs.append(out.getvalue())
    assert outputs[0] != outputs[1]
    assert all("\n\n\n" not in o for o in outputs)  # a paragraph withheld leaves no second blank line
    unclocked = ["\n".join("<clock>" if l.endswith("(clock)") else l for l in o.splitlines()) for o in outputs]
    assert [u.replace("<clock>\n", "") for u in unclocked][0] == [u.replace("<clock>\n", "") for u in unclocked][1]
    with contextlib.redirect_stdout(io.StringIO()):
        rows = sd.demo6_free_compute().rows
    # one position at 512 tokens: 6.61e9 MACs over 13.22 GB of weights + 0.27 GB of KV cache
    weights, kv = 2 * sd.macs_per_token(4096, 11008, 32, 0, 32000), 2 * 2 * 32 * 512 * 4096
    assert rows[0][2] == pytest.approx((weights + kv) / 1e9) and round(rows[0][2], 2) == 13.48
    assert rows[0][1] == pytest.approx(sd.macs_per_token(4096, 11008, 32, 512, 32000) / 1e9)
    assert [r[2] for r in rows] == pytest.approx([rows[0][2]] * len(rows))  # the bytes do not grow with positions
    assert rows[0][3] == pytest.approx(rows[0][1] / rows[0][2]) and round(rows[0][3], 2) == 0.50


def test_speedup_with_a_priced_verifying_pass():
    # tokens / (v + k c): 2.8 tokens, k = 4, c = .05, v = 3.3 -> 2.8 / 3.5
    assert sd.speedup(2.8, 4, 0.05, v=3.3) == pytest.approx(0.8)
    assert sd.speedup(2.8, 4, 0.05) == sd.speedup(2.8, 4, 0.05, v=1.0) == pytest.approx(2.8 / 1.2)


@pytest.mark.parametrize("two, dearer", [(3e-3, True), (1.1e-3, False)])
def test_chapter13_says_what_a_second_column_costs(capsys, monkeypatch, two, dearer):
    # a clock that charges two columns 3x one, or 1.1x: the sentence follows it, and the three ways are always timed
    monkeypatch.setattr(sd, "median_time", lambda f, calls=1, **kw: {1: 1e-3, 2: two}.get(f().shape[1], 4e-3))
    asked = []
    monkeypatch.setattr(sd, "demo13_why", lambda *a, **kw: asked.append(a))
    sd.demo13_times(np.ones((8, 8), np.float32), np.ones((8, 17), np.float32), (4, 16))
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert len(asked) == 1
    assert ("Two positions cost 3.0x one here, where the roofline charges 1.0x." in text) == dearer
    assert ("Two positions cost about what one does here, as on the roofline." in text) == (not dearer)


def test_chapter13s_ratios_are_its_printed_times_divided(capsys, monkeypatch):
    # read 1763 divided 14.01 by 2.97 and got 4.717, where the unrounded times gave 4.71: the ratio is the printed
    # times', 4.72 here, not the unrounded 14.014 / 2.974 = 4.712
    monkeypatch.setattr(sd, "median_time", lambda f, calls=1, **kw: {1: 2.974e-3, 2: 5e-3}.get(f().shape[1], 14.014e-3))
    monkeypatch.setattr(sd, "demo13_why", lambda *a, **kw: None)
    sd.demo13_times(np.ones((8, 8), np.float32), np.ones((8, 17), np.float32), (4, 16))
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert f"{14.014 / 2.974:.2f} {14.01 / 2.97:.2f}" == "4.71 4.72" and "5 14.01 ms 4.72" in text


def test_chapter13_why_a_second_column_costs(capsys, monkeypatch):
    # ratios by hand: one 2-column product 3 ms, two 1-column products 2 ms, in cache 2 columns 0.3 ms against 0.1
    times = iter([3e-3, 2e-3, 0.3e-3, 0.1e-3])
    monkeypatch.setattr(sd, "median_time", lambda f, **kw: next(times))
    two, twice, in_cache = sd.demo13_why(np.ones((8, 8), np.float32), np.ones((8, 17), np.float32), 1e-3, n_small=4)
    assert (two, twice) == pytest.approx((3.0, 2.0)) and in_cache == pytest.approx(3.0)
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert ("With W in cache the extra cost stays, so it is not the memory. Two 1-column products beat one 2-column"
            " product, so it is not the arithmetic either: it is how this BLAS handles a few columns.") in text
    times = iter([1.1e-3, 2e-3, 0.3e-3, 0.1e-3])  # a second column that costs 1.1x one: nothing to explain
    monkeypatch.setattr(sd, "median_time", lambda f, **kw: next(times))
    sd.demo13_why(np.ones((8, 8), np.float32), np.ones((8, 17), np.float32), 1e-3, n_small=4)
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert "A second column costs little here, as on the roofline." in text and "not the memory" not in text


def test_chapter13_withholds_why_when_its_two_measures_of_one_product_disagree(capsys, monkeypatch):
    # read 1690 ran on a busy machine: the table's 2-column product at 1.33x one, the second table's at 2.20x, and
    # an in-cache row of 470x; the chapter drew 'so it is not the memory' from that. Same product, two times: busy
    for first, busy in ((1.33, True), (2.4, False)):
        times = iter([2.2e-3, 1.8e-3, 470e-3, 1e-3])
        monkeypatch.setattr(sd, "median_time", lambda f, **kw: next(times))
        sd.demo13_why(np.ones((8, 8), np.float32), np.ones((8, 17), np.float32), 1e-3, n_small=4, first=first)
        text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
        assert (f"The table above and this one time the same 2-column product, at {first:.2f}x and 2.20x one column."
                " Something else ran on this machine meanwhile, so these times cannot say why. Rerun it on a quiet"
                " machine." in text) == busy
        assert ("so it is not the memory" in text) == (not busy)


def test_chapter13_says_which_tokens_per_call_each_prediction_uses(in_process):
    text = " ".join(in_process[1][in_process[1].index("Chapter 36."):].replace("(clock)", "").split())
    rows = in_process[0]["36"].model  # (label, k, paper, refined, per call, clock, refined*)
    middling = next(r for r in rows if r[0] == "middling")
    # the paper's column is tokens per call / (1 + k c) with the exact count, as the sentence says, and the c measured
    # here (read 1849 took the lesson's 0.1 and got 1.98 for 1.78)
    assert middling[1] == sd.LESSON_K and "The paper predicts the speedup as tokens per call / (1 + k c), with c as" \
        " calibrated above and the exact tokens per call: 2.77 for the middling draft and 4.71 for blend 0.95, at" \
        " k = 4." in text and "alpha" not in text.split("Takeaway")[0]  # blend 0.95's at 4 and 16, as the clock picked its
    # k (reads 1487 and 1501 backed them out); its alpha, which reads 2608 and 2616 solved for from them, by hand, to
    # 4 places, where eq. 1 gives the exact counts: at 0.970 it gives 13.47 at k = 16, below the exact 13.50, which
    # readers took to contradict demo 3's "eq. 1 runs high". Side by side, in two rounds, reads 2737, 2739, 2741 and
    # 2743 took 13.5, 10.5, 11.5 and 10.5 minutes with 0.9703, 2738, 2740, 2742 and 2744 took 14, 10, 13 and 10.5
    # with 0.970; reads 2769, 2771, 2773 and 2775 took 9.5, 9.5, 9 and 11, reads 2770, 2772, 2774 and 2776 took 9.5,
    # 12, 9 and 10. Three of the eight 0.970 readers stalled on the 13.47 and two more noted it; none of the 0.9703
    # readers did. Without its alpha the chapter read faster still: readers put 0.9703 through eq. 1 at k = 16 by hand
    # for 1 to 2 minutes, and none of the four without it backed it out; reads 2809 to 2812 took 7.5, 10, 9 and 9
    # minutes without it, 2813 to 2816 11, 12, 10 and 12 with it
    good = sd.blend(sd.TARGET, sd.UNRELATED, 0.95)
    assert f"{sd.pair_alpha(sd.TARGET, good):.4f}" == "0.9703"
    assert [f"{sd.exact_tokens_per_call(sd.TARGET, good, k):.2f}" for k in (4, 16)] == ["4.71", "13.50"]
    assert [f"{sd.expected_tokens(0.9703, k):.2f}" for k in (4, 16)] == ["4.71", "13.50"]  # eq. 1 at the alpha shown
    assert f"{sd.expected_tokens(0.970, 16):.2f}" == "13.47"
    assert "Both run at the lesson's k = 4: the middling draft 20 rounds, blend 0.95 10." in text
    # refined, as a formula: v in place of the paper's 1; refined* (this run's tokens per call in place of the exact
    # ones) is the detail's since this stop: side by side, reads 2505 to 2508 took 8, 9.5, 9 and 8.5 minutes
    # without it, 2509 to 2512 took 10, 8, 10.5 and 8.5 with it, where readers re-read to tell the two apart
    assert ("The refined prediction puts v in place of that 1: tokens per call / (v + k c). Clock is the speedup"
            " measured") in text and "Refined*" not in text
    detail = io.StringIO()
    with contextlib.redirect_stdout(detail):
        sd.DETAILS["36"](in_process[0]["36"])
    detail = " ".join(detail.getvalue().replace("(clock)", "").split())
    assert ("Refined* is refined with the tokens per call this run got in place of the exact ones, so luck in the"
            " rounds does not count against it: draft k refined tokens/call clock refined* middling 4") in detail
    assert f"{middling[4]:.2f} {middling[5]:.2f}x {middling[6]:.2f}x" in detail  # its row: this run's, as the body's
    # c is a mean over a round's passes: at k = 4 and 16 nearly every reader stopped on 0.117 at k = 4 against 0.106
    # at k = 16 for one product (reads 2022, 2046, 2058, 2065, 2074), and the why was the detail's; since stop 88
    # both drafts run at the lesson's k, one calibration (side by side over four rounds, reads 3113 to 3136 and 3161
    # to 3168, 8.75 minutes' median at one k against 9 at two), and c is said not to differ
    assert ("The cost c is a draft pass, a 32 x 256 product, averaged over a round's 4 passes. v is one verifying pass"
            " over k+1 = 5 positions.") in text and "differ with k" not in text and "k = 16" not in text
    assert {r[1] for r in rows} == {sd.LESSON_K} and len(in_process[0]["36"].calib) == 2  # (c, v): one k's


@pytest.mark.parametrize("two, holds", [(3e-3, True), (1.1e-3, False)])
def test_chapter13s_takeaway_follows_what_two_positions_cost(capsys, monkeypatch, two, holds):
    # a second column that costs 3x one: time the check on your own machine; at 1.1x the roofline holds, and the
    # takeaway is withheld with the check that failed
    monkeypatch.setattr(sd, "demo13_times", lambda W, X, ks: {1: 1e-3, 2: two, 5: 4e-3, 17: 5e-3})
    sd.demo13_clock(size=8)
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert ("Takeaway: here two positions cost 3.0 times one, where demo 6's roofline says 1.0. Time a check on your"
            " own machine before you trust the roofline to price it." in text) == holds  # reads 1416 and 1440: the size
    assert ("two positions cost more than 1.25 times one here" in text) == (not holds)


def test_chapter13s_takeaway_judges_the_ratio_its_table_prints(capsys, monkeypatch):
    # 3.72 / 2.97 as printed is 1.2525, over 1.25, where the unrounded 3.7174 / 2.974 is under it: the body and the
    # takeaway judge the same, printed ratio (the review found the takeaway judged the unrounded one)
    assert 3.72 / 2.97 > 1.25 > 3.7174 / 2.974
    monkeypatch.setattr(sd, "demo13_times", lambda W, X, ks: {1: 2.974e-3, 2: 3.7174e-3, 5: 4e-3, 17: 5e-3})
    sd.demo13_clock(size=8)
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert "Takeaway: here two positions cost 1.3 times one" in text and "Takeaway withheld" not in text


def test_predict_divides_the_figures_as_chapter_36_prints_them():
    # reads 1535, 1539, 1547 and 1556 divided the printed tokens per call, c and v and found the paper's column 0.01
    # off: each prediction now takes them as printed (tokens to 2 decimals, c to 3, v to 2)
    c, v = np.array([0.12345] * 4), np.array([3.546] * 4)
    assert sd.predict((c, v), 2.7745, k=4) == 2.77 / (3.55 + 4 * 0.123)
    assert sd.predict((c, v), 13.4987, k=16, v=1.0) == 13.50 / (1.0 + 16 * 0.123)
