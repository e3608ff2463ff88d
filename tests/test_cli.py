"""The command line: --tune's routes against hand-worked values, --plan, and
every bad value a one-line usage error with exit status 2."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd

SCRIPT = sd.__file__


def geometric(alpha, k):
    """Eq. 1 written as the sum it is: 1 + alpha + ... + alpha^k."""
    return sum(alpha**i for i in range(k + 1))


def cli(capsys, *args):
    try:
        code = sd.main([str(a) for a in args]) or 0
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def rows(out):
    return [line.split() for line in out.splitlines() if line[:3].strip().isdigit()]


def run(*args, **env):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


# --- the server's figures, by hand ------------------------------------------------

def test_server_metrics_by_hand():
    # rounds at k = 3 that emitted 1, 2 and 4 tokens: 0, 1, 3 accepted
    L, R, per = sd.server_metrics([1, 2, 4], 3)
    assert L == pytest.approx(1 + 4 / 3) and R == pytest.approx(4 / 9)
    assert per == pytest.approx([2 / 3, 1 / 3, 1 / 3])


def test_inverting_eq1_by_hand():
    # alpha = .8, k = 5: L = 1 + .8 + .64 + .512 + .4096 + .32768 = 3.68928, and
    # the draft acceptance rate (L - 1) / 5 = .537856
    assert sd.alpha_from_mean_length(3.68928, 5) == pytest.approx(0.8, abs=1e-9)
    assert sd.alpha_from_draft_rate(0.537856, 5) == pytest.approx(0.8, abs=1e-9)
    assert sd.alpha_from_mean_length(1.0, 5) == pytest.approx(0.0, abs=1e-9)
    assert sd.alpha_from_mean_length(6.0, 5) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("alpha", [0.3, 0.8, 0.95])
def test_per_position_rates_from_one_alpha_reproduce_eq1(alpha):
    rates = [alpha**i for i in range(1, 7)]  # all of the first i pass: alpha^i
    for k, tokens in enumerate(sd.per_position_tokens(rates), start=1):
        assert tokens == pytest.approx(sd.expected_tokens(alpha, k), abs=1e-12)


def test_route_tokens_extrapolates_per_position_rates_only_past_K():
    tokens, alpha, note = sd.route_tokens(4, per_position=[0.8, 0.6])
    # past K = 2 each draft passes with the last conditional rate .6 / .8 = .75
    assert tokens == pytest.approx([1.8, 2.4, 2.85, 3.1875]) and alpha is None and "0.750 (assumed)" in note
    assert sd.route_tokens(2, per_position=[0.8, 0.6])[2] == "no model: every row is the server's own"
    # rates that reach exactly 0 extrapolate as 0, with no division by zero
    assert sd.route_tokens(3, per_position=[0.5, 0.0])[0] == pytest.approx([1.5, 1.5, 1.5])


# --- --tune ---------------------------------------------------------------------------

def test_tune_marks_the_best_k_and_gives_a_verdict(capsys):
    code, out, _ = cli(capsys, "--tune", 0.8, 0.05, "--k-max", 10)
    assert code == 0
    table = rows(out)
    assert [int(r[0]) for r in table] == list(range(1, 11))
    best = max(range(1, 11), key=lambda k: geometric(0.8, k) / (1 + 0.05 * k))
    assert [r[0] for r in table if "<-" in r] == [str(best)] and best == 8
    assert out.rstrip().endswith(f"speculate with k = 8, expected speedup {geometric(0.8, 8) / 1.4:.2f}x")
    assert out.isascii()


def test_options_in_any_order_and_with_equals(capsys):
    first = cli(capsys, "--tune", 0.8, 0.05, "--k-max", 10)[1]
    assert cli(capsys, "--k-max", 10, "--tune", 0.8, 0.05)[1] == first
    assert cli(capsys, "0.8", "--k-max=10", "--tune", "0.05")[1] == first


def test_tune_falls_back_when_alpha_is_not_above_c(capsys):
    code, out, _ = cli(capsys, "--tune", 0.2, 0.2)
    assert code == 0 and "<- best" not in out and len(rows(out)) == 32
    assert out.rstrip().endswith("fall back to plain decoding (no k in 1..32 beats it: alpha <= c)")


def test_alpha_zero_and_a_draft_cost_above_one_fall_back(capsys):
    assert cli(capsys, "--tune", 0, 0.1)[1].rstrip().endswith("alpha <= c)")
    assert cli(capsys, "--tune", 0.9, 1.5)[1].rstrip().splitlines()[-1].startswith("fall back")


def test_the_cap_is_named_when_it_is_the_best_k(capsys):
    _, out, _ = cli(capsys, "--tune", 1.0, 0.01, "--k-max", 3)
    assert "the best k is the cap, k = 3: raise --k-max" in out
    assert out.rstrip().endswith("speculate with k = 3, expected speedup 3.88x")


def test_the_verifying_pass_cost_v(capsys):
    # tokens / (v + k c): alpha .99 at k = 2 makes 2.9701 tokens; v = 3, c = .001
    _, out, _ = cli(capsys, "--tune", 0.99, 0.001, "--k-max", 2, "--v", 3)
    assert float(rows(out)[1][2]) == pytest.approx(2.9701 / 3.002, abs=5e-4)


def test_mean_acceptance_length_route(capsys):
    _, out, _ = cli(capsys, "--tune", "--mean-acceptance-length", 3.68928, "--k", 5, 0.05)
    assert "alpha = 0.800000 from a mean acceptance length" in " ".join(out.split())
    assert out.rstrip().endswith("speculate with k = 8, expected speedup 3.09x")


def test_draft_acceptance_rate_route_warns_that_it_is_not_alpha(capsys):
    _, out, _ = cli(capsys, "--tune", "--draft-acceptance-rate", 0.537856, "--k", 5, 0.05)
    assert "alpha = 0.800000" in out and "NOT alpha" in " ".join(out.split())
    assert out.rstrip().endswith("speculate with k = 8, expected speedup 3.09x")
    # the mistake it guards against: the rate passed as ALPHA
    assert cli(capsys, "--tune", 0.538, 0.05)[1].rstrip().endswith("speculate with k = 3, expected speedup 1.72x")


def test_per_position_route_needs_no_model(capsys):
    _, out, _ = cli(capsys, "--tune", "--per-position", "0.8,0.6,0.3", 0.2)
    table = rows(out)
    assert [float(r[3]) for r in table] == pytest.approx([1.8, 2.4, 2.7])
    assert [float(r[2]) for r in table] == pytest.approx([0.8, 0.75, 0.5], abs=5e-4)  # conditional
    assert "assumed" not in out
    # speedups 1.8 / 1.2, 2.4 / 1.4, 2.7 / 1.6: k = 2 at 1.71x
    assert out.rstrip().endswith("speculate with k = 2, expected speedup 1.71x")


def test_per_position_with_v_and_extrapolation(capsys):
    _, out, _ = cli(capsys, "--tune", "--per-position", "0.8,0.6", 0.01, "--k-max", 4, "--v", 1.5)
    table = rows(out)
    assert ["assumed" in r for r in table] == [False, False, True, True]
    assert float(table[1][4]) == pytest.approx(2.4 / (1.5 + 0.02), abs=5e-4)
    assert "the last conditional rate, 0.750 (assumed)" in " ".join(out.split())


@pytest.mark.parametrize("args, message", [
    (("--tune", 1.5, 0.1), "ALPHA must be in [0, 1], got 1.5"),
    (("--tune", -0.1, 0.1), "ALPHA must be in [0, 1], got -0.1"),
    (("--tune", 0.5, -1), "C must be in [0, 1,000], got -1"),
    (("--tune", 0.5, "inf"), "C must be in [0, 1,000], got inf"),
    (("--tune", 0.5, "nan"), "C must be in [0, 1,000], got nan"),
    (("--tune", 0.8, "1e20"), "C must be in [0, 1,000], got 1e20"),
    (("--tune", 0.8, "1000.1"), "C must be in [0, 1,000], got 1000.1"),
    (("--tune", "x", 0.1), "ALPHA must be a number, got 'x'"),
    (("--tune", 0.5), "--tune needs ALPHA and C, got only 0.5"),
    (("--tune",), "--tune needs ALPHA and C"),
    (("--tune", "--mean-acceptance-length", 3, "--k", 5), "--tune needs C, a draft pass's cost in target passes"),
    (("--tune=0.8",), "--tune takes no value: write --tune 0.8"),
    (("--tune", 0.5, 0.1, "--k-max", 0), "argument --k-max: must be in [1, 64], got 0"),
    (("--tune", 0.5, 0.1, "--k-max", 65), "argument --k-max: must be in [1, 64], got 65"),
    (("--tune", 0.5, 0.1, "--k-max", 2.5), "argument --k-max: must be an integer, got '2.5'"),
    (("--tune", 0.5, 0.1, "--kmax", 3), "unrecognized arguments: --kmax"),
    (("--tune", 0.5, 0.1, "--k-ma", 3), "unrecognized arguments: --k-ma"),  # no abbreviations
    (("--tun", 0.5, 0.1), "unrecognized arguments: --tun"),
    (("--tune", 0.5, 0.1, "--v", 0), "argument --v: must be in [1, 1,000], got 0"),
    (("--tune", 0.5, 0.1, "--v", 0.999), "argument --v: must be in [1, 1,000], got 0.999"),
    (("--tune", 0.5, 0.1, "--v", "1e308"), "argument --v: must be in [1, 1,000], got 1e308"),
    (("--tune", 0.5, 0.1, "--v"), "argument --v: expected one argument"),
    (("--tune", 0.5, 0.1, "--v", 1, "--v", 2), "--v given twice"),
    (("--tune", "--mean-acceptance-length", 6.001, "--k", 5, 0.1), "must lie in [1, K + 1] = [1, 6], got 6.001"),
    (("--tune", "--mean-acceptance-length", 0.5, "--k", 5, 0.1), "argument --mean-acceptance-length: must be in [1, 65]"),
    (("--tune", "--mean-acceptance-length", 3, 0.1), "--k K, the k the server ran at, is needed to read a mean "
                                                      "acceptance length"),
    (("--tune", "--draft-acceptance-rate", 0.3, 0.1), "is needed to read a draft acceptance rate"),
    (("--tune", "--draft-acceptance-rate", 39.6, "--k", 5, 0.1), "got 39.6: a percent? write 0.396 or 39.6%"),
    (("--tune", "--draft-acceptance-rate", "100.1%", "--k", 5, 0.1), "must be in [0, 100], got 100.1"),
    (("--tune", "--draft-acceptance-rate", 101, "--k", 5, 0.1), "must be in [0, 1], got 101"),
    (("--tune", "--draft-acceptance-rate", "x", "--k", 5, 0.1), "must be a rate such as 0.396 or 39.6%, got 'x'"),
    (("--tune", "--draft-acceptance-rate", 0.5, "--k", 0, 0.1), "argument --k: must be in [1, 64], got 0"),
    (("--tune", "--per-position", "0.5,0.7", 0.1), "cannot rise"),
    (("--tune", "--per-position", "0.5,-0.2", 0.1), "must be in [0, 1], got -0.2"),
    (("--tune", "--per-position", "0.5,x", 0.1), "must be a rate such as 0.396 or 39.6%, got 'x'"),
    (("--tune", 0.8, "--mean-acceptance-length", 3, "--k", 5, 0.1), "give one source of alpha"),
    (("--tune", "--per-position", "0.5", "--draft-acceptance-rate", 0.4, "--k", 1, 0.1), "give one source of alpha"),
    (("--tune", 0.5, 0.1, "--k", 3), "--k goes with --mean-acceptance-length or --draft-acceptance-rate, not with "
                                     "ALPHA or --per-position"),
    (("--tune", "--per-position", "0.5", "--k", 3, 0.1), "--k goes with --mean-acceptance-length"),
    (("--tune", 0.5, 0.1, "--context", 16), "--context goes with --plan"),
    (("--plan", 0.5, "--v", 2), "--v goes with --tune"),
    (("--plan", 0.5, "--bandwidth", 0), "argument --bandwidth: must be above 0 and at most 10,000, got 0"),
    (("--plan", 0.5, "--flops", -1), "argument --flops: must be above 0 and at most 1,000,000, got -1"),
    (("--plan", 0.5, "--memory", 0), "argument --memory: must be above 0 and at most 1,000,000, got 0"),
    (("--plan", 0.7, "--memory", "1e308"), "argument --memory: must be above 0 and at most 1,000,000, got 1e308"),
    (("--plan", 0.5, "--context", 0), "argument --context: must be in [1, 10,000,000], got 0"),
    (("--plan", 0.5, "--context", 2_000_000), "one sequence of 2,000,000 tokens does not fit in 80 GB"),
    (("--plan", 0.5, "--target-shape", "4096,11008,32"), "takes 4 numbers separated by commas"),
    (("--plan", 0.5, "--draft-shape", "0,1,1,1"), "argument --draft-shape: must be in [1, 1,000,000], got 0"),
    (("--plan", 0.5, "--max-batch", 0), "argument --max-batch: must be in [1, 65,536], got 0"),
    (("--plan", 0.5, "--max-batch", 65537), "argument --max-batch: must be in [1, 65,536], got 65537"),
    (("--plan",), "--plan needs ALPHA, the acceptance rate"),
    (("--plan", 0.5, 0.6), "--plan takes at most 1 number, got 0.5 0.6"),
    (("--tune", 0.5, 0.1, "--plan"), "give one of --tune, --plan"),
])
def test_bad_input_is_one_usage_line_and_exit_2(capsys, args, message):
    code, out, err = cli(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("usage error: ") and message in err and err.count("\n") == 1


# --- --plan ---------------------------------------------------------------------------

def test_plan_prints_a_schedule_vllm_accepts(capsys):
    code, out, _ = cli(capsys, "--plan", 0.7, "--context", 16, "--max-batch", 400)
    assert code == 0
    text = " ".join(out.split())
    schedule = [[int(x) for x in row] for row in re.findall(r"\[(\d+), (\d+), (\d+)\]", text)]
    # vLLM's rules for the schedule: starts at 1, sorted, no overlap, k >= 0
    assert schedule[0][0] == 1 and schedule[-1][1] == 400
    assert all(a[1] + 1 == b[0] for a, b in zip(schedule, schedule[1:])) and min(r[2] for r in schedule) >= 0
    assert f'"num_speculative_tokens": {max(r[2] for r in schedule)}' in text
    buckets, _ = sd.plan_schedule(sd.expected_tokens(0.7, np.arange(1, 33)), 16, 400)
    assert schedule == [list(b) for b in buckets] and schedule[-1][2] == 0


def test_plan_from_a_server_figure_on_another_accelerator(capsys):
    code, out, _ = cli(capsys, "--plan", "--mean-acceptance-length", 3, "--k", 5, "--context", 512,
                       "--bandwidth", 2, "--flops", 400, "--memory", 40, "--max-batch", 64)
    assert code == 0 and "accelerator as given" in out
    text = " ".join(out.split())
    fit = sd.sequences_that_fit(512, sd.Accelerator("x", 400e12, 2e12, 40e9), drafts=(sd.DRAFT_SHAPE,))
    assert f"{fit:,} sequences fit in 40 GB" in text and "k is at most 32 (--k-max)" in text


def test_list_and_help(capsys):
    code, out, _ = cli(capsys, "--list")
    assert code == 0 and out.count("\n") == len(sd.DEMOS) + 2  # two headings: the lesson, the chapters
    assert all(f"{n:>2}. {title}" in out for n, (title, _) in sd.DEMOS.items()) and "every one with all" in out
    code, out, _ = cli(capsys, "--help")
    assert code == 0 and "usage:" in out and "Which k for my server?" in out
    assert all(rule in out for rule in sd.TRACE_RULES)  # the rule names are listed
    assert cli(capsys, "--help", "2")[0] == 0


@pytest.mark.parametrize("args, message", [
    (["99"], "unknown demo '99'; the lesson is 1-6, the chapters 7-38, and all runs every chapter"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["2", "x"], "unknown demo 'x'"), (["--list", "2"], "--list takes no numbers, got 2"),
    (["--seed", "5"], "--seed goes with --trace"), (["--rule", "argmax"], "--rule goes with --trace"),
    (["--detail", "--trace"], "--detail goes with"), (["--text", "edit"], "--text goes with --trace"),
    (["--trace", "--rule", "greedy"], "invalid choice: 'greedy'"),
    (["--trace", "--text", "poem"], "invalid choice: 'poem'"),
    (["--trace", "--text", "edit", "--rule", "one-hot"], "with --text the draft is prompt lookup"),
    (["--trace", "0"], "--trace N must be in [1, 10,000], got 0"),
    (["--trace", "10001"], "--trace N must be in [1, 10,000], got 10001"),
    (["--trace", "x"], "--trace N must be an integer, got 'x'"),
    (["--trace", "2", "3"], "--trace takes at most 1 number, got 2 3"),
    (["--trace=3"], "--trace takes no value: write --trace 3"),
    (["--trace", "--rule", "argmax", "--rule", "continue"], "--rule given twice"),
    (["--trace", "--draft", "1.5"], "argument --draft: must be in [0, 1], got 1.5"),
    (["--trace", "--k", "65"], "argument --k: must be in [1, 64], got 65"),
    (["--trace", "--seed", "-1"], "argument --seed: must be in [0, 4,294,967,295], got -1"),
    (["--trace", "--seed", "4294967296"], "argument --seed: must be in [0, 4,294,967,295], got 4294967296"),
])
def test_other_bad_arguments_give_one_usage_line(capsys, args, message):
    code, out, err = cli(capsys, *args)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


@pytest.mark.parametrize("draft, weight", [("unrelated", "0"), ("middling", "0.5"), ("0.9", "0.9")])
def test_the_trace_takes_a_named_draft_or_a_weight(capsys, draft, weight):
    code, out, _ = cli(capsys, "--trace", "1", "--draft", draft)
    assert code == 0 and f"a draft q of blend weight {weight}," in " ".join(out.split())


def test_a_bad_argument_exits_2_without_a_traceback():
    out = run("--bogus")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage error:") and "Traceback" not in out.stderr


@pytest.mark.parametrize("args", [["1"], ["--tune", "0.99", "0.001", "--k-max", "64"], ["--trace", "50"]])
def test_a_closed_pipe_ends_quietly(args):
    # what `| head -3` does: read three lines, then close the pipe
    proc = subprocess.Popen([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(3):
        proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_is_one_error_line_and_exit_1():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, SCRIPT, "--tune", "0.5", "0.1"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("error: cannot write the output")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_output_survives_a_stdout_that_cannot_encode_non_ascii():
    out = run("--tune", "0.3", "0.4", PYTHONIOENCODING="cp1252")
    assert out.returncode == 0 and out.stderr == "" and out.stdout.rstrip().endswith("alpha <= c)")


def test_trace_seed_zero_is_the_default_stream_and_needs_trace(capsys):
    _, default, _ = cli(capsys, "--trace", "1")
    code, seeded, _ = cli(capsys, "--seed", "0", "--trace", "1")
    assert code == 0 and seeded == default and "seed 0," in " ".join(seeded.split())
    assert cli(capsys, "--seed", "0")[0] == 2  # a seed with nothing to seed


def test_a_context_from_argmax_is_a_context():
    # np.argmax returns np.int64: every entry point takes it as the int it is
    ctx = np.argmax(sd.TARGET[0])
    assert isinstance(ctx, np.integer)
    same = [sd.spec_generate(sd.TARGET, sd.MIDDLING, [c], 12, 3, np.random.default_rng(4))[0] for c in (ctx, int(ctx))]
    assert same[0] == same[1]
    assert np.array_equal(sd.exact_first_tokens(sd.TARGET, sd.MIDDLING, ctx, 2, 2),
                          sd.exact_first_tokens(sd.TARGET, sd.MIDDLING, int(ctx), 2, 2))


# --- every rule at its boundary: equal passes, one past is refused -------------------

@pytest.mark.parametrize("args", [
    ("--tune", 1, 0.1), ("--tune", 0, 0.1), ("--tune", 0.5, 0), ("--tune", 0.5, 1000),
    ("--tune", 0.5, 0.1, "--k-max", 64), ("--tune", 0.5, 0.1, "--k-max", 1), ("--tune", 0.5, 0.1, "--v", 1),
    ("--tune", 0.5, 0.1, "--v", 1000), ("--tune", "--mean-acceptance-length", 6, "--k", 5, 0.1),
    ("--tune", "--mean-acceptance-length", 1, "--k", 5, 0.1), ("--tune", "--draft-acceptance-rate", "100%", "--k", 5, 0.1),
    ("--tune", "--draft-acceptance-rate", 1, "--k", 5, 0.1), ("--tune", "--per-position", "0.5,0.5,0", 0.1),
    ("--trace", "1", "--seed", "4294967295"), ("--trace", "1", "--k", "64"),
    ("--plan", 0.5, "--max-batch", 1), ("--plan", 0.5, "--context", 1),
])
def test_a_value_at_the_edge_of_its_range_is_taken(capsys, args):
    code, out, err = cli(capsys, *args)
    assert code == 0 and err == "" and out


def test_vllm_percent_is_its_fraction(capsys):
    with_percent, as_fraction = (cli(capsys, "--tune", "--draft-acceptance-rate", r, "--k", 5, 0.1)[1]
                                 for r in ("39.6%", "0.396"))
    assert with_percent == as_fraction and "a draft acceptance rate of 0.396" in with_percent


def test_k_max_cuts_the_per_position_route_too(capsys):
    _, out, _ = cli(capsys, "--tune", "--per-position", "0.9,0.8,0.7,0.6", 0.05, "--k-max", 2)
    assert [r[0] for r in rows(out)] == ["1", "2"]


def test_a_plan_where_no_k_helps_still_names_a_draft_length_vllm_accepts(capsys):
    code, out, _ = cli(capsys, "--plan", 0.0, "--context", 16, "--max-batch", 8)
    text = " ".join(out.split())
    assert code == 0 and '"num_speculative_tokens_per_batch_size": [[1, 8, 0]]' in text
    assert '"num_speculative_tokens": 1' in text  # vLLM needs at least 1; every bucket turns it off


def test_the_plan_prices_the_draft_it_is_given(capsys):
    small = cli(capsys, "--plan", 0.8, "--context", 16, "--max-batch", 300)[1]
    large = cli(capsys, "--plan", 0.8, "--context", 16, "--max-batch", 300, "--draft-shape", "4096,11008,32,32000")[1]
    assert small != large  # a draft the target's own size leaves no k that helps
    assert '[[1, 300, 0]]' in " ".join(large.split())


def test_help_names_every_metavariable(capsys):
    code, out, _ = cli(capsys, "--help")
    text = " ".join(out.split())
    assert code == 0 and "model width, MLP width, layers and vocabulary" in text
    assert "ALPHA: the acceptance rate; C: a draft pass's cost" in text and "PROMPT" in text


def test_all_runs_every_chapter_in_order_and_numbers_can_join_it(capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(sd, "DEMOS", {n: (t, lambda n=n: ran.append(n)) for n, (t, _) in sd.DEMOS.items()})
    assert cli(capsys, "all")[0] == 0 and ran == list(sd.CHAPTERS)
    ran.clear()
    code, out, _ = cli(capsys, "2", "all", "9")
    assert code == 0 and ran == ["2", *sd.CHAPTERS] and "The chapters go beyond" not in out
    ran.clear()
    code, out, _ = cli(capsys)
    assert code == 0 and ran == list(sd.LESSON) and "The chapters go beyond the paper" in out
