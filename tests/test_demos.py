"""What the demos compute and print: each demo's rows against an independent
computation, and each verdict sentence against the rows it follows. The demos
run once in this process (demo 6 without its clock); the full run is read as
a reader sees it."""
import contextlib
import io
import subprocess
import sys

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd


def flat(text):
    """The text with every run of white space as one space: sentences wrapped
    at run time are found whole."""
    return " ".join(text.split())


def section(text, n):
    """The lines of demo n, from its title to the next demo (or the closing note)."""
    start = text.index(f"Demo {n}. ")
    ends = [i for i in (text.find("\n" + "=" * 78 + "\nDemo", start), text.find("\nNow break it", start)) if i > 0]
    return text[start:min(ends)]


def unclocked(text):
    """The text with every run of lines marked '(clock)' as one '<clock>' line: a
    paragraph of measured words may wrap to more or fewer lines."""
    lines = ["<clock>" if line.endswith("(clock)") else line for line in text.splitlines()]
    return "\n".join(line for i, line in enumerate(lines) if not (line == "<clock>" and i and lines[i - 1] == "<clock>"))


@pytest.fixture(scope="session")
def demo():
    """n -> (what demo n returned, what it printed), each run once."""
    runs = {}
    for n, (_, function) in sd.DEMOS.items():
        if n == "6":
            function = sd.demo6_batch  # the roofline part; the clock is tested with a fake clock below
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = function()
        runs[n] = result, flat(out.getvalue())
    return runs


# --- the run as a whole -------------------------------------------------------------

def test_full_run_shows_every_demo_and_fits_80_columns(full_run):
    for n, (title, _) in sd.DEMOS.items():
        assert f"Demo {n}. {title}" in full_run
    assert max(len(line) for line in full_run.splitlines()) <= 80
    assert full_run.isascii()  # any stdout encoding can print it
    assert "Now break it" in full_run


def test_selected_demos_print_exactly_what_the_full_run_prints(full_run):
    # a fresh process, a different selection and order: the same bytes (every demo seeds itself)
    out = subprocess.run([sys.executable, sd.__file__, "7", "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for n in (1, 7):
        assert section(out.stdout, n) == section(full_run, n)
    assert out.stdout.index("Demo 7.") < out.stdout.index("Demo 1.")


def test_every_line_with_a_wall_clock_figure_is_marked(full_run, monkeypatch):
    # only demo 6 times anything; every other demo has no (clock) line
    for n in sd.DEMOS:
        marked = sum(line.endswith("(clock)") for line in section(full_run, n).splitlines())
        assert (marked > 10) if n == "6" else (marked == 0), n
    # demo 6 twice on a small W with a clock that returns random times: every
    # line that changes must be marked
    outputs = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        monkeypatch.setattr(sd, "clocked", lambda f: (rng.uniform(1e-4, 1e-2), f()))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sd.demo6_free_compute(clock_size=256)
        outputs.append(out.getvalue())
    assert outputs[0] != outputs[1]
    assert unclocked(outputs[0]) == unclocked(outputs[1])


def test_every_term_is_defined_before_the_demo_that_uses_it(full_run):
    legend = full_run[:full_run.index("Demo 1.")]
    for term in ("bonus token", "round", "beta", "alpha", "TV", "fit", "exact", "floor"):
        assert term in legend, term
    assert full_run.index("Temperature T reshapes") < full_run.index("Demo 3.")


# --- demo by demo -------------------------------------------------------------------

def test_demo1_the_proof_closes_and_its_sentences_follow_the_table(demo):
    result, text = demo["1"]
    p, q = sd.TARGET[0], sd.MIDDLING[0]
    assert result.gap < 1e-12 and "Emitted = p." in text
    assert result.accept[result.under] == 1.0 and q[result.under] <= p[result.under]
    assert result.accept[result.over] == pytest.approx(p[result.over] / q[result.over], abs=1e-15)
    assert f"accepted with p/q = {p[result.over] / q[result.over]:.3f}," in text


def test_demo2_the_correct_rule_is_the_target_and_every_bug_is_caught(demo):
    result, text = demo["2"]
    assert result.verdicts == {"correct": "the target", "argmax": "NOT the target",
                               "no_resample": "NOT the target", "continue": "NOT by the fit",
                               "uniform_q": "NOT the target"}
    assert result.checks["correct"][0] >= sd.P_REJECT and result.checks["correct"][1] < 1e-12
    # the exact column is exact_first_tokens of the edited module, against the truth
    for bug in ("argmax", "no_resample"):
        exact = sd.bugged(bug).exact_first_tokens(sd.TARGET, sd.UNRELATED, 5, 2, 2)
        assert result.checks[bug][1] == pytest.approx(sd.tv_distance(exact, result.truth), abs=1e-15)
    assert "Caught by both checks: argmax, no_resample, uniform_q. Caught by the fit alone: continue" in text
    assert "The correct rule emits the target's distribution" in text
    assert [row[1] for row in result.greedy] == [1000, 1000] and "Both are argmax decoding" in text


def test_demo3_every_exact_column_is_the_exact_value_and_every_row_fits(demo):
    result, text = demo["3"]
    for label, rate, alpha, measured, se, eq1, exact, fits, _ in result.rows:
        assert fits == ("yes" if abs(measured - exact) <= 4 * se else "NO")
    middling = next(r for r in result.rows if r[0] == "blend weight 0.50")
    assert middling[2] == sd.pair_alpha(sd.TARGET, sd.MIDDLING)
    assert middling[6] == sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, 4)
    assert "Every row fits." in text
    assert [r[7] for r in result.temperatures] == ["the target"] * 5
    assert "Every temperature emits its tempered target by both checks." in text
    assert [r[4] for r in result.one_sided] == ["NOT the target"] * 2
    assert "by both checks it emits the T = 1 target" in text


def test_demo4_the_best_k_sentence_names_the_largest_speedups(demo):
    rows, text = demo["4"]
    measured, exact = (max(rows, key=lambda r: r[i])[0] for i in (6, 7))
    assert f"Best k: {measured} measured, {exact} exact." in text
    assert 1 < exact < len(rows)  # an interior peak, not an endpoint
    assert [r[5] for r in rows] == ["yes" if abs(r[2] - r[4]) <= 4 * r[3] else "NO" for r in rows]


def test_demo5_slower_where_below_one_and_the_corollary_only_where_alpha_exceeds_c(demo):
    result, text = demo["5"]
    alpha = sd.pair_alpha(sd.TARGET, sd.MIDDLING)
    for c, s, slower, k_eq, s_eq, k_ex, s_ex, bound in result.rows:
        assert (slower == "slower") == (s < 1 - 1e-9)
        assert (k_eq > 0) == (s_eq > 1) and (k_ex > 0) == (s_ex > 1)
        assert (bound is None) == (alpha <= c)
        if bound is not None:
            assert s_eq >= bound - 1e-12  # eq. 1 is the corollary's own model: its bound holds there
    # the edge: alpha > c, yet no real k helps (the best k >= 1 loses), by a scan
    exact = np.array([sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, j) for j in range(1, 17)])
    edge = [c for c in (r[0] for r in result.rows) if alpha > c and sd.speedup(exact, np.arange(1, 17), c).max() < 1]
    assert [e.split()[0] for e in result.edge] == [f"{c:.3g}" for c in edge] == ["0.7"]
    assert "its own direction fails at c = 0.7 (best k >= 1: 0.994)" in text


def test_demo6_the_batch_tables_and_their_sentences(demo):
    out, text = demo["6"]
    for n_ctx, (rows, ends) in out.items():
        fit = sd.sequences_that_fit(n_ctx)
        for row in rows:
            assert row[1] == pytest.approx(sd.pass_traffic(sd.LLAMA2_7B, n_ctx, 1, row[0])[1] / 1e9)
            assert ("does not fit" in str(row[2])) == (row[0] > fit)
        for alpha, b in ends.items():
            # the first B (up to what fits) at which no k beats plain decoding, by a scan
            tokens = sd.expected_tokens(alpha, np.arange(1, 33))
            scan = next((b for b in range(1, fit + 1) if sd.batch_speedups(tokens, b, n_ctx).max() <= 1), None)
            assert b == scan
    # 512 tokens: the positions per sequence that stay under the ridge at any B, by a scan
    m, w = sd.pass_traffic(sd.LLAMA2_7B, 512, 1, 1)[0], sd.pass_traffic(sd.LLAMA2_7B, 512, 1, 0)[1]
    kv = sd.pass_traffic(sd.LLAMA2_7B, 512, 1, 1)[1] - w
    n = max(j for j in range(1, 100) if j * m / kv < sd.ridge())
    assert n == 5 and f"up to {n} positions per sequence (k <= {n - 1}) stays memory-bound" in text
    assert "At alpha = 0.7, no k helps from B = 291" in text


def test_demo6_ridge_and_one_step(full_run):
    text = flat(section(full_run, 6))
    assert f"= {sd.H100.flops / 2 / sd.H100.bandwidth:.0f} MACs per byte" in text  # 148
    assert "One decoding step does 0.50 MACs per byte" in text


def test_demo7_distillation_beats_fitting_the_text(demo):
    result, text = demo["7"]
    assert result.alpha_kd > result.alpha_fit and min(result.alpha_tv) > result.alpha_kd
    assert result.alpha_world < result.alpha_kd
    assert "distillation beats fitting the data" in text


def test_demo8_the_mask_and_the_tree_verdicts(demo):
    result, text = demo["8"]
    assert result.mask_error == 0 and result.causal_error > 0.5
    verdicts = {r[0]: r[3] for r in result.exactness}
    assert verdicts == {"independent": "consistent with the target", "distinct": "consistent with the target",
                        "independent, no_update": "NOT the target"}
    assert "Both ways of drafting children emit the target's distribution" in text


def test_demo9_every_verifier_row_and_verdict(demo):
    result, text = demo["9"]
    assert [(r[0], round(r[1], 12)) for r in result.row] == [("probabilistic", 0.5), ("one-hot", 0.9),
                                                              ("strict", 0.39)]
    for label, *values, most in result.pairs:
        tokens = values[3:]
        assert most == ["probabilistic", "one-hot", "strict", "block"][int(np.argmax(tokens))]
        assert tokens[3] >= tokens[0] - 1e-12  # block never keeps fewer than the token-wise rule
    verdicts = {r[0]: r[5] for r in result.exactness}
    assert verdicts == {"probabilistic": "the target", "one-hot": "the target", "strict": "the target",
                        "block": "the target", "tokenwise_residual": "NOT by exact",
                        "cumulative": "NOT the target", "vllm-ascend": "NOT the target"}
    shipped = result.exactness[-1]
    assert shipped[1] == pytest.approx(0.0730, abs=5e-5) and shipped[2] == pytest.approx(0.2098, abs=5e-5)
    assert "its bias appears at token 3" in text and "must look past token 2" in text
    assert all(g[3] >= -1e-12 for g in result.block.gains) and "Every measured value fits" in text
    assert max(r[1] for r in result.block.example) <= result.block.ideal and "Neither keeps more than the ideal" in text


def test_demo10_routes_plans_and_policies(demo):
    result, text = demo["10"]
    assert result.picks["--per-position"] == 3 and result.picks["the rate passed as ALPHA"] == 0
    L, R, _ = result.metrics
    assert L == pytest.approx(1 + 5 * R)  # every draft has K = 5 tokens here
    for n_ctx, (buckets, shortfall) in result.plans.items():
        assert shortfall <= 0.01 and buckets[0][0] == 1
        assert all(a[1] + 1 == b[0] for a, b in zip(buckets, buckets[1:]))  # no gap, no overlap
    assert result.plans[512][0][-1][1] == sd.sequences_that_fit(512)
    for out in result.policies.values():
        assert all(r[7] == "yes" for r in out.rows[2:])
    assert "Every simulated policy fits its exact chain." in text


@pytest.mark.parametrize("in_cache, twice, said, not_said", [
    (3.0, 1.2, "it is in how this BLAS handles a few columns", "memory traffic"),
    (1.1, 1.2, "memory traffic is part of it; two separate 1-column products beat one 2-column product, so "
               "it is not the arithmetic.", "either"),
    (3.0, 2.5, "two separate 1-column products do not beat one 2-column product here", "BLAS handles"),
])
def test_demo6_why_says_only_what_its_numbers_show(monkeypatch, capsys, in_cache, twice, said, not_said):
    # median_time's results in demo6_why's order: 2 columns, two 1-column
    # products, the in-cache 2 and 1 columns, the square product; t1 = 1
    results = iter([2.0, twice, in_cache, 1.0, 0.01])
    monkeypatch.setattr(sd, "median_time", lambda f, **kw: next(results))
    W, X = np.ones((64, 64), np.float32), np.ones((64, 17), np.float32)
    assert sd.demo6_why(W, X, 1.0, n_small=32)[:3] == (2.0, twice, in_cache)
    text = " ".join(line.removesuffix("(clock)") for line in capsys.readouterr().out.splitlines())
    text = flat(text)
    assert said in text and not_said not in text
