"""What the demos compute and print: each demo's rows against an independent
computation, and each verdict sentence against the rows it follows. The demos
run once in this process (demo 6 on a small W with a fake clock); the full run
is read as a reader sees it.

Every exact check here uses tables whose rows differ from context to context.
A table that repeats one row at every position (what most upstream tests use)
hides a verifier that reads a distribution from the wrong position."""
import contextlib
import inspect
import io
import re
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


def printed(f, *args, **kwargs):
    """(what f returned, what it printed, as one line)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = f(*args, **kwargs)
    return result, flat(out.getvalue())


@pytest.fixture(scope="session")
def demo():
    """n -> (what demo n returned, what it printed), each run once; demo 6 on a
    256 x 256 W and a clock that always says 1 ms."""
    runs = {}
    for n, (_, function) in sd.DEMOS.items():
        if n == "6":
            saved, sd.clocked = sd.clocked, lambda f: (1e-3, f())
            try:
                runs[n] = printed(function, clock_size=256)
            finally:
                sd.clocked = saved
        else:
            runs[n] = printed(function)
    return runs


# --- the run as a whole -------------------------------------------------------------

def test_full_run_shows_every_demo_fits_80_columns_and_ends_each_with_a_takeaway(full_run):
    for n, (title, _) in sd.DEMOS.items():
        assert f"Demo {n}. {title}" in full_run and title.endswith("?")  # each demo asks its question
        assert "\nTakeaway: " in section(full_run, n)
    assert max(len(line) for line in full_run.splitlines()) <= 80
    assert full_run.isascii()  # any stdout encoding can print it
    assert "Now break it" in full_run and " stopped: " not in full_run and "Not checked" not in full_run


def test_nothing_printed_depends_on_rounding(full_run, full_run_one_ulp):
    # every np.exp result one ulp larger, as another libm or SIMD path could round
    # it: the same text, wall-clock lines aside
    assert full_run_one_ulp != "" and unclocked(full_run_one_ulp) == unclocked(full_run)


def test_selected_demos_print_exactly_what_the_full_run_prints(full_run):
    # a fresh process, a different selection and order: the same bytes (every demo seeds itself)
    out = subprocess.run([sys.executable, sd.__file__, "7", "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for n in (1, 7):
        assert section(out.stdout, n) == section(full_run, n)
    assert out.stdout.index("Demo 7.") < out.stdout.index("Demo 1.")


def test_every_line_with_a_wall_clock_figure_is_marked(full_run, monkeypatch):
    # demos 6 and 12 measure this machine; every other demo has no (clock) line
    for n in sd.DEMOS:
        marked = sum(line.endswith("(clock)") for line in section(full_run, n).splitlines())
        assert (marked > 5) if n in ("6", "12") else (marked == 0), n
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


def test_terms_are_defined_where_the_reader_first_meets_them(full_run):
    legend = full_run[:full_run.index("Demo 1.")]
    for term in ("round", "alpha", "TV", "fit", "exact", '"the paper"', "Leviathan"):
        assert term in legend, term
    text = flat(full_run)
    for name, definition in (("vLLM", "an open-source serving engine"), ("APEX-1", "a public from-scratch"),
                             ("vllm-ascend", "for Huawei's accelerators"), ("SpecInfer", "a tree verifier"),
                             ("EAGLE-1", "a trained draft head"), ("MTP", "multi-token prediction"),
                             ("HF", "Hugging Face")):
        first = text.index(name)
        assert definition in text[max(0, first - 120):first + 120], name


def test_no_stage_numbers_and_no_function_named_but_the_ones_a_reader_edits(full_run):
    assert not re.search(r"\bstage \d|\b5[bcde]\)|\bdemo \d+'s (own )?(lines|function)", full_run)
    invited = {"accept_prob", "residual", "verify_round"}  # the stages the reader is asked to edit
    functions = {n for n, f in vars(sd).items() if inspect.isfunction(f) and "_" in n} - invited
    assert [n for n in functions if re.search(rf"\b{n}\b", full_run)] == []


# --- demo by demo -------------------------------------------------------------------

def test_demo1_the_proof_closes_and_its_sentences_follow_the_table(demo):
    result, text = demo["1"]
    p, q = sd.TARGET[0], sd.MIDDLING[0]
    assert result.gap < 1e-12 and "Emitted = p." in text and "is < 1e-9" in text
    assert result.accept[result.under] == 1.0 and q[result.under] <= p[result.under]
    assert result.accept[result.over] == pytest.approx(p[result.over] / q[result.over], abs=1e-15)
    assert f"it is kept with p/q = {p[result.over] / q[result.over]:.3f}." in text
    assert f"under-proposes '{sd.name(result.under)}'" in text and "it is always kept" in text


def test_demo2_the_correct_rule_is_the_target_and_every_bug_is_caught(demo):
    result, text = demo["2"]
    assert result.verdicts == {"correct": "the target", "argmax": "NOT the target",
                               "no_resample": "NOT the target", "continue": "NOT by the fit",
                               "uniform_q": "NOT the target"}
    rows = {r[0]: r for r in result.rows}
    assert rows["correct"][2] >= sd.P_REJECT and rows["correct"][3] < 1e-12
    # the exact column is exact_first_tokens of the edited module, against the truth
    for bug in ("argmax", "no_resample"):
        exact = sd.bugged(bug).exact_first_tokens(sd.TARGET, sd.UNRELATED, 5, 2, 2)
        assert rows[bug][3] == pytest.approx(sd.tv_distance(exact, result.truth), abs=1e-15)
        assert rows[bug][4] == pytest.approx(sd.tv_distance(exact.sum(axis=1), sd.TARGET[5]), abs=1e-15)
    assert "Both checks catch argmax, no_resample, uniform_q. Only the fit catches continue" in text
    assert "The correct rule emits the target's distribution by both checks." in text
    assert f"the target sampled alike has {sd.floor_tv(sd.TARGET, 5, sd.DEMO2_RUNS, 2):.4f}" in text
    assert [row[1] for row in result.greedy] == [1000, 1000] and "Both are argmax decoding" in text


@pytest.mark.parametrize("verdicts, said", [
    (dict(correct="NOT the target"), "The correct rule, as you have it, is NOT the target: both checks catch it."),
    (dict(correct="NOT by the fit"), "is NOT the target: only the fit catches it. The exact check follows"),
    (dict(correct="NOT by exact"), "is NOT the target: only the exact check catches it."),
    (dict(argmax="the target"), "Neither catches argmax."),
    (dict(argmax="NOT by exact"), "Only the exact check catches argmax."),
    (dict(continue_="your edit changed a line it edits"), "Not checked: continue (your edit changed a line it edits)."),
])
def test_demo2_every_verdict_sentence_follows_its_verdicts(verdicts, said):
    base = {"correct": "the target", "argmax": "NOT the target", "no_resample": "NOT the target",
            "continue": "NOT by the fit", "uniform_q": "NOT the target"}
    base.update({k.rstrip("_"): v for k, v in verdicts.items()})
    text = printed(sd.demo2_verdicts, base)[1]
    assert said in text
    assert ("The correct rule emits" in text) == (base["correct"] == "the target")


def test_demo3_every_exact_column_is_the_exact_value_and_every_row_fits(demo):
    result, text = demo["3"]
    for label, rate, alpha, measured, se, eq1, exact, fits, _ in result.rows:
        assert fits == ("yes" if abs(measured - exact) <= 4 * se else "NO")
        assert eq1 == pytest.approx(sum(alpha**i for i in range(5)))
    middling = next(r for r in result.rows if r[0] == "blend weight 0.50")
    assert middling[2] == sd.pair_alpha(sd.TARGET, sd.MIDDLING)
    assert middling[6] == sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, 4)
    assert "Every row fits." in text
    assert [r[7] for r in result.temperatures] == ["the target"] * 5
    assert "Every temperature emits its tempered target by both checks." in text
    alphas = [r[1] for r in result.temperatures]
    assert ("Here alpha rises with T." in text) == (alphas[1] < alphas[2] < alphas[3] < alphas[4])
    rate1 = sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, 1) - 1
    assert f"at k = 1 it is {rate1:.4f}, alpha {sd.pair_alpha(sd.TARGET, sd.MIDDLING):.4f}" in text


def test_demo3_in_detail_the_two_shipped_temperature_bugs():
    rows, text = printed(sd.demo3_one_sided, 4, 1000)
    assert [r[4] for r in rows] == ["NOT the target"] * 2
    assert "It emits the T = 1 target by both checks" in text and "the temperature is lost" in text


def test_demo4_the_best_k_sentence_names_the_largest_speedups(demo):
    rows, text = demo["4"]
    measured, exact = (max(rows, key=lambda r: r[i])[0] for i in (6, 7))
    assert f"The best k is {measured} measured, {exact} exact." in text
    assert 1 < exact < len(rows)  # an interior peak, not an endpoint
    assert [r[5] for r in rows] == ["yes" if abs(r[2] - r[4]) <= 4 * r[3] else "NO" for r in rows]
    assert [r[7] for r in rows] == pytest.approx([sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, k) / (1 + k / 10)
                                                  for k in range(1, 13)])


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
    assert result.edge == [f"{c:.3g}" for c in edge] == ["0.7"]
    assert "So at c = 0.7 no k helps, although alpha > c." in text
    assert f"rounds start where a draft passes {exact[0] - 1:.3f}, not {alpha:.3f}" in text


def test_demo6_the_roofline_the_batch_and_their_sentences(demo):
    result, text = demo["6"]
    assert [r[0] for r in result.rows] == [1, 2, 4, 8, 16]
    free = int(sd.ridge() // result.rows[0][3])
    assert f"One decoding step does 0.50, so up to {free} positions cost what one does" in text
    assert f"memory-bound below {sd.H100.flops / 2 / sd.H100.bandwidth:.0f} MACs per byte" in text
    fit = sd.sequences_that_fit(16)
    for row in result.batch.rows:
        assert row[1] == pytest.approx(sd.pass_traffic(sd.LLAMA2_7B, 16, 1, row[0])[1] / 1e9)
        assert ("does not fit" in str(row[2])) == (row[0] > fit)
    for alpha, b in result.batch.ends.items():
        # the first B (up to what fits) at which no k beats plain decoding, by a scan
        tokens = sd.expected_tokens(alpha, np.arange(1, 33))
        scan = next((b for b in range(1, fit + 1) if sd.batch_speedups(tokens, b, 16).max() <= 1), None)
        assert b == scan and f"Alpha = {alpha}: no k helps from B = {b:,}." in text
    assert "A plain pass reaches the ridge at B = 363" in text


def test_demo6_in_detail_512_tokens_stay_memory_bound_up_to_5_positions(monkeypatch):
    monkeypatch.setattr(sd, "median_time", lambda f, **kw: 1e-3)
    _, text = printed(sd.demo6_detail, size=64)
    m, w = sd.pass_traffic(sd.LLAMA2_7B, 512, 1, 1)[0], sd.pass_traffic(sd.LLAMA2_7B, 512, 1, 0)[1]
    kv = sd.pass_traffic(sd.LLAMA2_7B, 512, 1, 1)[1] - w
    n = max(j for j in range(1, 100) if j * m / kv < sd.ridge())
    assert n == 5 and f"So up to {n} positions per sequence (k <= {n - 1}) stay memory-bound at any batch;" in text
    assert "1.58x   2.53x" in " ".join(text.split("  ")) or "1.58x 2.53x" in text  # the paper's Table 1 row


def test_demo7_distillation_beats_fitting_the_text(demo):
    result, text = demo["7"]
    assert result.alpha_kd > result.alpha_fit and result.alpha_tv > result.alpha_kd
    assert result.alpha_world < result.alpha_kd
    assert f"Distilling the target beats fitting the text, {result.alpha_kd:.3f} to {result.alpha_fit:.3f}" in text
    assert "Climbing alpha itself gains more." in text


def test_demo7_the_objective_column_is_what_its_row_names(demo):
    result, _ = demo["7"]
    (_, _, ce, fit), (_, _, kl, kd), (_, _, one_minus_alpha, tv), _ = result.rows
    S = sd.visit_joint(result.P)  # how often the target writes context c, then x
    assert kl == pytest.approx(float((S * np.log(result.P / kd)).sum()), abs=1e-12) and kl > 0
    assert one_minus_alpha == pytest.approx(1 - sd.pair_alpha(result.P, tv), abs=1e-15)


def test_demo7_says_so_when_distilling_does_not_win(monkeypatch):
    world = sd.random_table(101, sharpness=2.5)
    monkeypatch.setattr(sd, "distill", lambda P: sd.fit_text(sd.plain_decode(world, [0], 20_000,
                                                                            np.random.default_rng(7))))
    _, text = printed(sd.demo7_distillation)
    assert "Distilling the target does NOT beat fitting the text" in text


def test_demo8_the_mask_and_the_tree_verdicts(demo):
    result, text = demo["8"]
    assert result.mask_error == 0 and result.causal_error > 0.5
    verdicts = {r[0]: r[3] for r in result.exactness}
    assert verdicts == {"independent": "consistent", "distinct": "consistent", "independent, no_update": "NOT the target"}
    assert "Both ways are consistent with the target; without the update, NOT the target." in text
    nodes = {r[0]: r[2] for r in result.rates}
    assert nodes["tree, branching 2"] == 2 + 4 + 8 and nodes["tree, branching 3"] == 3 + 9 + 27  # no root
    chain, widest = result.rates[0][3], result.rates[2][4]
    assert f"makes {widest:.2f}, {'more' if widest > chain else 'NOT more'} than the chain's {chain:.2f}" in text


def test_demo8_says_so_when_one_correct_tree_fails(capsys):
    m = sd.edited((("draft_children", "children.append(sample_from(without(q, children) if distinct else q, "
                    "rng.random()))", "children.append(sample_from(q, rng.random()))"),))  # distinct ones repeat
    rows = m.demo8_exactness(600)
    text = " ".join(capsys.readouterr().out.split())
    assert [r[3] for r in rows] == ["consistent", "raised", "NOT the target"]
    assert "NOT every correct tree is consistent; without the update, NOT the target." in text


def test_demo9_exactness_sentences_follow_each_row(demo, capsys):
    rows = [list(r) for r in demo["9"][0].exactness]
    rows[3][5] = "NOT by exact"  # block
    rows[6][5] = "the target"  # cumulative, uncaught
    rows[5] = [rows[5][0], None, None, None, None, "not run", "your edit changed a line it edits", None]
    sd.demo9_exactness_verdicts(rows, sd.target_first_tokens(sd.TARGET, 5, 3), 3)
    text = " ".join(capsys.readouterr().out.split())
    assert "NOT every setting emits the target's distribution: block passes its fit while its exact" in text
    assert "tokenwise_residual: not checked, your edit changed a line it edits." in text
    assert "cumulative emits the target's distribution by both checks." in text
    assert "vllm-ascend, Triton is NOT the target." in text and "Both edits and both" not in text


def test_demo9_every_verifier_row_and_verdict(demo):
    result, text = demo["9"]
    assert [(r[0], round(r[1], 12)) for r in result.row] == [("probabilistic", 0.5), ("one-hot", 0.9),
                                                              ("strict", 0.39)]
    for label, *values, most in result.pairs:
        tokens = values[3:]
        names = ["prob", "1-hot", "strict", "block", "b 1-hot"]
        assert most == names[next(i for i, t in enumerate(tokens) if t >= max(tokens) - 1e-9)]
        assert tokens[3] >= tokens[0] - 1e-12  # block never keeps fewer than the token-wise rule
        assert tokens[4] == pytest.approx(tokens[1], abs=1e-12)  # block over one-hot drafts is the one-hot rule
    verdicts = {r[0]: r[5] for r in result.exactness}
    assert verdicts == {"probabilistic": "the target", "one-hot": "the target", "strict": "the target",
                        "block": "the target", "block, one-hot": "the target", "tokenwise_residual": "NOT by exact",
                        "cumulative": "NOT the target", "vllm-ascend, PyTorch": "NOT the target",
                        "vllm-ascend, Triton": "NOT the target"}
    pytorch = next(r for r in result.exactness if r[0] == "vllm-ascend, PyTorch")
    assert pytorch[1] == pytest.approx(0.0730, abs=5e-5) and pytorch[2] == pytest.approx(0.2098, abs=5e-5)
    assert "All five settings emit the target's distribution by both checks." in text
    assert "Both edits and both shipped paths are caught." in text
    assert "to see tokenwise_residual's bias at token 3" in text
    kept = {r[0]: r[7] for r in result.exactness if r[7] is not None}
    block_kept = sd.exact_block_tokens_per_call(sd.TARGET, sd.MIDDLING, 3) - 1
    assert min(kept.values()) > block_kept and f"block verification {block_kept:.2f}" in text
    assert all(g[3] >= -1e-12 for g in result.block.gains) and "Every measured value fits" in text
    assert max(r[1] for r in result.block.example) <= result.block.ideal and "Neither keeps more than the ideal" in text


def test_demo10_routes_and_their_sentences(demo):
    result, text = demo["10"]
    assert result.picks == {"--per-position": 3, "--mean-acceptance-length": 3, "--draft-acceptance-rate": 3,
                            "the rate taken as alpha": 0}
    L, R, rates = result.metrics
    assert L == pytest.approx(1 + 5 * R)  # every draft has K = 5 tokens here
    for c, label, alpha, k, predicted, true in result.rows:
        assert true == pytest.approx(sd.speedup(sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, k), k, 0.1 if c is
                                                None else c) if k else 1.0, abs=0.0) or c is None
    by_cost = [result.rows[i:i + 5] for i in range(0, len(result.rows), 5)]
    for block in by_cost:
        c = block[0][0]
        for _, label, alpha, k, predicted, true in block:
            assert true == (sd.speedup(sd.exact_tokens_per_call(sd.TARGET, sd.MIDDLING, k), k, c) if k else 1.0)
    assert "The per-position rates pick the true best k at 3 of 3 costs, with no model." in text
    assert "Taken as alpha, the rate picks it at 0 of 3" in text
    assert "the mean acceptance length does at 3 of 3, the draft acceptance rate at 3 of 3." in text


def test_demo10_in_detail_plans_and_policies(demo):
    result, text = printed(sd.demo10_detail, demo["10"][0])
    for n_ctx, (buckets, shortfall) in result.plans.items():
        assert shortfall <= 0.01 and buckets[0][0] == 1
        assert all(a[1] + 1 == b[0] for a, b in zip(buckets, buckets[1:]))  # no gap, no overlap
    assert result.plans[512][0][-1][1] == sd.sequences_that_fit(512)
    for out in result.policies.values():
        assert all(r[7] == "yes" for r in out.rows[2:])
        assert out.rows[1][0] == "best k per context"
    assert "Every simulated policy fits its exact chain." in text
    # the oracle is not a policy a server can run: it is never among the winners
    assert "Beating the best fixed k: confidence" in text and "best k per context for" not in text


def test_demo11_every_draft_is_the_target_heads_lose_and_apex_bugs_are_caught(demo):
    result, text = demo["11"]
    assert [r[4] for r in result.rows] == ["the target"] * 3
    assert all(r[2] < 1e-12 for r in result.rows)
    assert "Every draft emits the target's distribution by both checks." in text
    reached = result.heads.reached
    assert reached[0] == pytest.approx(1.0) and reached[1] < 1 and reached[2] < reached[1]
    assert "Medusa's heads lose: each guess is checked after drafts its head never saw." in text
    lams = [r[0] for r in result.sweep.rows]
    vllm = [r[1] for r in result.sweep.rows]
    assert lams == sorted(lams) and vllm[-1] > 2 * vllm[0]  # copying text drafts itself
    assert all(r[3] == pytest.approx(r[1]) and r[4] < r[3] for r in result.sweep.rows)  # B = 1: v = 1
    assert result.sweep.config == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
                                   "prompt_lookup_max": 4}
    assert [r[2] for r in result.apex.rows] == ["consistent", "NOT the target", "NOT the target"]
    assert result.apex.tables >= sd.P_REJECT and "A table reads only the last token and cannot see it" in text


def test_demo12_the_wide_pass_the_texts_and_the_ties(demo):
    result, text = demo["12"]
    share, ulps, worst, flips, margin = result.widths
    assert 0 <= share <= 1 and (worst == 0) == (share == 0)
    assert ("NOT bit-identical" in text) == (share > 0)
    parts = {r[0]: r[1] for r in result.rows}
    assert parts["float32, each alone"].startswith("0/")  # width-independent arithmetic: plain and speculative agree
    n = parts["the bonus bug, alone"].split("/")[1]
    assert parts["the bonus bug, alone"] == f"{n}/{n}"  # a real bug parts them whatever the arithmetic
    assert [r[1] for r in result.ties] == ["all the same", "part at token 1"]
    assert "One tie-break everywhere keeps the text; another in verification changes it." in text
