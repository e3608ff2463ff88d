"""--tune: from alpha or from a server's figures to a draft length, each
route against a hand-worked value, eq. 1, or the exact answer."""
import re

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd


def geometric(alpha, k):
    """Eq. 1 written as the sum it is: 1 + alpha + ... + alpha^k."""
    return sum(alpha**i for i in range(k + 1))


def tune(capsys, *args):
    code = sd.main(["--tune", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def rows(out):
    return [line.split() for line in out.splitlines() if line[:3].strip().isdigit()]


# --- the server's figures, by hand ------------------------------------------------

def test_server_metrics_by_hand():
    # rounds at k = 3 that emitted 1, 2 and 4 tokens: 0, 1, 3 accepted
    L, R, per = sd.server_metrics([1, 2, 4], 3)
    assert L == pytest.approx(1 + 4 / 3) and R == pytest.approx(4 / 9)
    assert per == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert L == pytest.approx(1 + 3 * R)  # the two carry the same information


def test_inverting_eq1_by_hand():
    # alpha = .8, k = 5: L = 1 + .8 + .64 + .512 + .4096 + .32768 = 3.68928, and
    # the draft acceptance rate (L - 1) / 5 = .537856
    assert sd.alpha_from_mean_length(3.68928, 5) == pytest.approx(0.8, abs=1e-9)
    assert sd.alpha_from_draft_rate(0.537856, 5) == pytest.approx(0.8, abs=1e-9)
    assert sd.alpha_from_mean_length(1.0, 5) == pytest.approx(0.0, abs=1e-9)
    assert sd.alpha_from_mean_length(6.0, 5) == pytest.approx(1.0, abs=1e-6)  # eq. 1 is flat-topped


def test_increasing_root():
    assert sd.increasing_root(lambda x: x * x, 0.25) == pytest.approx(0.5, abs=1e-12)
    assert sd.increasing_root(lambda x: x, 3.0, lo=0.0, hi=10.0) == pytest.approx(3.0, abs=1e-12)


@pytest.mark.parametrize("alpha", [0.3, 0.8, 0.95])
def test_per_position_rates_from_one_alpha_reproduce_eq1(alpha):
    rates = [alpha**i for i in range(1, 7)]  # all of the first i pass: alpha^i
    for k, tokens in enumerate(sd.per_position_tokens(rates), start=1):
        assert tokens == pytest.approx(sd.expected_tokens(alpha, k), abs=1e-12)


# --- the command line ---------------------------------------------------------------

def test_tune_marks_the_best_k_and_gives_a_verdict(capsys):
    code, out, _ = tune(capsys, 0.8, 0.05, "--k-max", 10)
    assert code == 0
    table = rows(out)
    assert [int(r[0]) for r in table] == list(range(1, 11))
    speeds = {int(r[0]): float(r[2]) for r in table}
    best = max(speeds, key=speeds.get)
    assert [r[0] for r in table if "<-" in r] == [str(best)] and best == 8
    assert float(table[best - 1][1]) == pytest.approx(geometric(0.8, best), abs=5e-4)
    assert out.rstrip().endswith(f"speculate with k = {best}, expected speedup "
                                 f"{geometric(0.8, best) / (1 + best * 0.05):.2f}x")
    assert out.isascii()


def test_flags_in_any_order(capsys):
    assert tune(capsys, 0.8, 0.05, "--k-max", 10)[1] == tune(capsys, "--k-max", 10, 0.8, 0.05)[1]
    assert sd.main(["--k-max", "10", "--tune", "0.8", "0.05"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("expected speedup 3.09x")


def test_tune_falls_back_when_alpha_is_not_above_c(capsys):
    code, out, _ = tune(capsys, 0.2, 0.2)
    assert code == 0 and "<- best" not in out and len(rows(out)) == 32
    assert out.rstrip().endswith("fall back to plain decoding (no k in 1..32 beats it: alpha <= c)")


def test_a_draft_cost_above_one_is_legal_and_falls_back(capsys):
    code, out, _ = tune(capsys, 0.9, 1.5)
    assert code == 0 and out.rstrip().splitlines()[-1].startswith("fall back to plain decoding")


def test_the_cap_is_named_when_it_is_the_best_k(capsys):
    _, out, _ = tune(capsys, 1.0, 0.01, "--k-max", 3)
    assert "the best k is the cap k_max = 3; raise --k-max" in out
    assert out.rstrip().endswith("speculate with k = 3, expected speedup 3.88x")


def test_the_verifying_pass_cost_v(capsys):
    # tokens / (v + k c): alpha .99 at k = 2 makes 2.9701 tokens; v = 3, c = .001
    _, out, _ = tune(capsys, 0.99, 0.001, "--k-max", 2, "--v", 3)
    assert float(rows(out)[1][2]) == pytest.approx(2.9701 / 3.002, abs=5e-4)


def test_mean_acceptance_length_route(capsys):
    _, out, _ = tune(capsys, "--mean-acceptance-length", 3.68928, "--k", 5, 0.05)
    assert "alpha = 0.800000 from a mean acceptance length" in out
    assert out.rstrip().endswith("speculate with k = 8, expected speedup 3.09x")


def test_draft_acceptance_rate_route_warns_that_it_is_not_alpha(capsys):
    _, out, _ = tune(capsys, "--draft-acceptance-rate", 0.537856, "--k", 5, 0.05)
    assert "alpha = 0.800000" in out and "NOT alpha" in " ".join(out.split())
    assert out.rstrip().endswith("speculate with k = 8, expected speedup 3.09x")
    # the mistake it guards against: the rate passed as ALPHA
    assert tune(capsys, 0.538, 0.05)[1].rstrip().endswith("speculate with k = 3, expected speedup 1.72x")


def test_per_position_route_needs_no_model(capsys):
    _, out, _ = tune(capsys, "--per-position", "0.8,0.6,0.3", 0.2)
    table = rows(out)
    assert [float(r[3]) for r in table] == pytest.approx([1.8, 2.4, 2.7])
    assert [float(r[2]) for r in table] == pytest.approx([0.8, 0.75, 0.5], abs=5e-4)  # conditional
    assert "assumed" not in " ".join(" ".join(r) for r in table)
    # speedups 1.8 / 1.2, 2.4 / 1.4, 2.7 / 1.6: k = 2 at 1.71x
    assert out.rstrip().endswith("speculate with k = 2, expected speedup 1.71x")


def test_per_position_extrapolates_only_when_asked_and_says_so(capsys):
    _, out, _ = tune(capsys, "--per-position", "0.8,0.6", 0.01, "--k-max", 4)
    table = rows(out)
    assert ["assumed" in r for r in table] == [False, False, True, True]
    # past K = 2 each draft passes with the last conditional rate, .6 / .8 = .75
    assert float(table[2][1]) == pytest.approx(0.45) and float(table[3][1]) == pytest.approx(0.3375, abs=1e-3)
    assert "the last conditional rate, 0.750" in out


@pytest.mark.parametrize("args, message", [
    ((1.5, 0.1), "ALPHA must lie in [0, 1], got 1.5"),
    ((-0.1, 0.1), "ALPHA must lie in [0, 1]"),
    ((0.5, -1), "C must be finite and >= 0, got -1"),
    ((0.5, "inf"), "C must be finite and >= 0"),
    ((0.5, 0.1, "--k-max", 0), "--k-max must be >= 1, got 0"),
    ((0.5, 0.1, "--k-max", 2.5), "--k-max must be an integer, got 2.5"),
    (("x", 0.1), "ALPHA must be a number, got x"),
    ((0.5,), "--tune takes ALPHA C, or a server's figure and C"),
    ((0.5, 0.1, "--kmax", 3), "unknown option --kmax for --tune"),
    ((0.5, 0.1, "--v", -1), "--v must be finite and >= 0, got -1"),
    ((0.5, 0.1, "--v"), "--v needs a value"),
    ((0.5, 0.1, "--v", 1, "--v", 2), "--v given twice"),
    (("--mean-acceptance-length", 7, "--k", 5, 0.1), "--mean-acceptance-length must lie in [1, K + 1] = [1, 6], got 7"),
    (("--mean-acceptance-length", 0.5, "--k", 5, 0.1), "--mean-acceptance-length must lie in [1, K + 1]"),
    (("--mean-acceptance-length", 3, 0.1), "--k K, the draft length the server ran at, is needed"),
    (("--draft-acceptance-rate", 1.2, "--k", 5, 0.1), "--draft-acceptance-rate must lie in [0, 1], got 1.2"),
    (("--draft-acceptance-rate", 0.5, "--k", 0, 0.1), "--k must be >= 1, got 0"),
    (("--per-position", "0.5,0.7", 0.1), "--per-position rates cannot rise"),
    (("--per-position", "0.5,1.2", 0.1), "--per-position rates must lie in [0, 1]"),
    (("--per-position", "0.5,x", 0.1), "--per-position must be numbers separated by commas"),
    ((0.8, "--mean-acceptance-length", 3, "--k", 5, 0.1), "give one source of alpha"),
    (("--per-position", "0.5", "--draft-acceptance-rate", 0.4, "--k", 1, 0.1), "give one source of alpha"),
    ((0.5, 0.1, "--k", 3), "--k goes with --mean-acceptance-length or --draft-acceptance-rate"),
])
def test_tune_rejects_bad_input_in_one_line(capsys, args, message):
    code, out, err = tune(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("usage error: ") and message in err and err.count("\n") == 1


# --- demo 10: the advice against the truth ---------------------------------------------

def test_demo10_per_position_route_picks_the_exact_best_k(full_run):
    start = full_run.index("Demo 10. ")
    text = full_run[start:full_run.index("Now break it", start)]
    blocks = re.findall(r"^ *(\d\.\d+) +truth \(exact_tokens_per_call\) +- +(\d+).*\n"
                        r" +--per-position +- +(\d+)", text, re.M)
    assert len(blocks) == 3
    exact = {k: sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, k) for k in range(1, 33)}
    for c, k_truth, k_per in blocks:
        assert k_per == k_truth
        assert int(k_truth) == sd.fastest_k(lambda k: sd.speedup(exact[k], k, float(c)), 32)[0]
    assert "The per-position route picks the true best k at 3 of 3" in " ".join(text.split())


def test_parse_tune_returns_tunes_keyword_arguments():
    assert sd.parse_tune(["0.8", "0.05"]) == {"alpha": 0.8, "c": 0.05}
    assert sd.parse_tune(["--v", "2", "0.8", "0.05", "--k-max", "5"]) == \
        {"alpha": 0.8, "c": 0.05, "v": 2.0, "k_max": 5}
    assert sd.parse_tune(["--per-position", ".5,.25", "0.1"]) == {"per_position": [0.5, 0.25], "c": 0.1}


def test_tune_value_and_check_tune():
    assert sd.tune_value("--k", "3") == 3 and sd.tune_value("C", "1.5") == 1.5
    with pytest.raises(ValueError, match="--k must be an integer, got 3.0"):
        sd.tune_value("--k", "3.0")
    sd.check_tune({"mean_length": 2.0, "k": 1})  # L = K + 1 is the top of its range
    with pytest.raises(ValueError, match=r"\[1, 2\], got 2.5"):
        sd.check_tune({"mean_length": 2.5, "k": 1})


def test_the_tune_helpers_print_tables_and_verdicts(capsys):
    sd.tune_alpha(0.5, 0.0, 1.0, 3)
    out = capsys.readouterr().out
    # 1 + .5 + .25 + .125 tokens at no cost: k = 3, the cap, 1.875x
    assert len(rows(out)) == 3 and out.rstrip().endswith("speculate with k = 3, expected speedup 1.88x")
    sd.tune_per_position([0.5], 0.0, 1.0, 1)
    assert capsys.readouterr().out.rstrip().endswith("speculate with k = 1, expected speedup 1.50x")
    sd.tune_verdict(0, 1.0, 5, "why not")
    assert capsys.readouterr().out == "\nfall back to plain decoding (why not)\n"
    sd.tune(c=0.0, alpha=0.5, k_max=2)
    assert capsys.readouterr().out.rstrip().endswith("speculate with k = 2, expected speedup 1.75x")


def test_tune_numbers_and_check_tune_range():
    assert sd.tune_numbers(["0.5", "0.1"], {}) == {"alpha": 0.5, "c": 0.1}
    assert sd.tune_numbers(["0.1"], {"per_position": [0.5]}) == {"c": 0.1}
    sd.check_tune_range("--per-position", [0.5, 0.5], "0.5,0.5")  # equal rates may stay flat
    with pytest.raises(ValueError, match="--v must be finite"):
        sd.check_tune_range("--v", float("nan"), "nan")
