"""The script as a reader runs it: the command line, and what the demos print."""
import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd

SCRIPT = Path(sd.__file__)


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60)


def unclocked(text):
    """The text with every run of wall-clock lines (marked '(clock)') as one
    '<clock>' line: a paragraph of measured words may wrap to more or fewer lines."""
    lines = ["<clock>" if line.endswith("(clock)") else line for line in text.splitlines()]
    return "\n".join(line for i, line in enumerate(lines)
                     if not (line == "<clock>" and i and lines[i - 1] == "<clock>"))


def flat(text):
    """The text with every run of white space, line breaks too, as one space:
    sentences wrapped at run time are found whole."""
    return " ".join(text.split())


def section(text, n):
    """The lines of demo n, from its title to the next demo (or the closing note)."""
    start = text.index(f"Demo {n}. ")
    ends = [i for i in (text.find("\n" + "=" * 78 + "\nDemo", start),
                        text.find("\nNow break it", start)) if i > 0]
    return text[start:min(ends)]


def test_full_run_shows_every_demo_and_fits_80_columns(full_run):
    for n, (title, _) in sd.DEMOS.items():
        assert f"Demo {n}. {title}" in full_run
    assert max(len(line) for line in full_run.splitlines()) <= 80
    assert full_run.isascii()  # any stdout encoding can print it
    assert "Now break it" in full_run


def test_selected_demos_print_exactly_what_the_full_run_prints(full_run):
    # a fresh process, a different selection and order: the same bytes (every
    # demo seeds itself)
    out = run("7", "1")
    assert out.returncode == 0
    for n in (1, 7):
        assert section(out.stdout, n) == section(full_run, n)
    assert out.stdout.index("Demo 7.") < out.stdout.index("Demo 1.")


def test_every_line_with_a_wall_clock_figure_is_marked(full_run, monkeypatch):
    # only demo 6 times anything; every other demo has no (clock) line
    for n in sd.DEMOS:
        marked = sum(line.endswith("(clock)") for line in section(full_run, n).splitlines())
        assert (marked > 10) if n == "6" else (marked == 0), n
    # run demo 6 twice on a small W with a clock that returns random times:
    # every line that changes must be marked
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


def test_demo1_proof_closes_and_its_sentences_follow_the_table(full_run):
    text = section(full_run, 1)
    largest = float(re.search(r"Largest \|emitted - p\| over the tokens: (\S+)", text)[1])
    assert largest < 1e-12 and "Emitted = p." in flat(text)
    under = re.search(r"Draft '(\w)': q = \S+ <= p = \S+, under-proposed: always accepted", text)
    over = re.search(r"Draft '(\w)': q = (\S+) >  p = (\S+), over-proposed: accepted with "
                     r"p/q = (\S+),", text)
    acc = {m[0]: float(m[1]) for m in re.findall(r"^    (\w)  \S+  \S+ +(\S+)", text, re.M)}
    assert acc[under[1]] == 1.0
    assert acc[over[1]] == float(over[4]) == pytest.approx(float(over[3]) / float(over[2]), abs=2e-3)


def rule_rows(text):
    """Demo 2's rule table: rule -> (sampled TV, p-value text, exact TV, exact TV(x1), verdict)."""
    rows = re.findall(r"^(\w+) +(\d\.\d{4}) +(p [=<] \S+) +(\S+) +(\S+)  (.+)$", text, re.M)
    return {r[0]: r[1:] for r in rows}


def test_demo2_correct_rule_is_the_target_and_every_broken_rule_is_not(full_run):
    text = section(full_run, 2)
    rows = rule_rows(text)
    assert set(rows) == set(sd.RULES)
    _, fit, exact, exact_first, verdict = rows["correct"]
    assert verdict == "the target" and float(exact) < 1e-12 and float(exact_first) < 1e-12
    assert fit.startswith("p = ") and float(fit[4:]) >= sd.P_REJECT
    for rule in sd.RULES[1:]:
        assert rows[rule][1] == "p < 1e-12" and float(rows[rule][2]) > 0.1, rule
        assert rows[rule][4] == "NOT the target", rule
    assert float(rows["continue"][3]) < 1e-12  # the first token alone is right
    assert "The correct rule emits the target's distribution" in flat(text)
    assert "Caught by both checks: greedy, no_resample, continue, uniform_q." in flat(text)
    assert "Both are argmax decoding, token for token." in flat(text)


def test_demo2_exact_column_is_exact_first_tokens(full_run):
    rows = rule_rows(section(full_run, 2))
    truth = sd.target_first_tokens(sd.TARGET, 5, 2)
    for rule in ("greedy", "no_resample"):
        exact = sd.exact_first_tokens(sd.TARGET, sd.UNRELATED, 5, 2, 2, rule)
        assert float(rows[rule][2]) == round(sd.tv_distance(exact, truth), 4)


def test_demo3_columns_and_verdicts(full_run):
    text = section(full_run, 3)
    line = re.search(r"^blend weight 0\.50 +(\S+) +(\S+)", text, re.M)
    assert float(line[2]) == round(sd.pair_alpha(sd.TARGET, sd.MIDDLING), 3)
    assert abs(float(line[1]) - float(line[2])) < 0.03
    fits = re.findall(r"^(?:blend weight|target at) .* (yes|NO) +\S+$", text, re.M)
    assert fits == ["yes"] * 10 and "Every row fits" in flat(text)
    temps = re.findall(r"^ *(\d\.\d) +\S+ +\S+ +\S+ +\S+ +\S+ +(p [=<] \S+) +(\S+)$", text, re.M)
    assert [t[0] for t in temps] == ["0.0", "0.5", "1.0", "1.5", "2.0"]
    assert all(float(t[2]) < 1e-12 for t in temps)
    assert "Every temperature emits its tempered target" in flat(text)
    bugs = re.findall(r"^(q is not|p untempered).* (NOT the target)$", text, re.M)
    assert len(bugs) == 2
    assert "it emits exactly the T = 1 target" in flat(text)


def test_demo4_best_k_lines_name_the_largest_speedups(full_run):
    text = section(full_run, 4)
    rows = re.findall(r"^ *(\d+) +0\.\d{3} +\S+ +\S+ +(\S+) +(\S+)$", text, re.M)
    assert len(rows) == 12
    measured = max(rows, key=lambda r: float(r[1]))[0]
    exact = max(rows, key=lambda r: float(r[2]))[0]
    assert f"Best k: {measured} measured, {exact} exact." in text
    assert 1 < int(exact) < 16  # an interior peak, not an endpoint


def test_demo5_marks_slower_exactly_where_speedup_is_below_one(full_run):
    rows = re.findall(r"^ *(\d\.\d{3}) +(\d+\.\d\d)(  slower)? +(\d+) +(\S+) +(\d+) +(\S+) +(\S+)$",
                      section(full_run, 5), re.M)
    assert len(rows) == 9
    for c, s, slower, k_eq, s_eq, k_ex, s_ex, bound in rows:
        assert bool(slower) == (float(s) < 1), c
        # eq. 1: a k > 0 exactly when it beats plain decoding, by at least the bound
        assert (int(k_eq) > 0) == (float(s_eq) > 1)
        if int(k_eq):
            assert float(s_eq) >= float(bound) - 0.0005


def test_demo6_half_a_mac_per_byte_and_the_h100_ridge(full_run):
    text = section(full_run, 6)
    assert re.search(r"^ +1 +\S+ +\S+ +0\.50 ", text, re.M)
    assert "= 148 MACs per byte" in flat(text)


def test_demo6_prints_the_computed_break_even(full_run):
    text = " ".join(full_run.split())
    for alpha in (0.7, 0.9):
        assert f"t alpha = {alpha}, no k helps from B = {sd.break_even_batch(alpha, 16):,}" in text
    assert re.search(r"At alpha = 0\.7, some k helps at every B up to 65,536", text)


def test_demo7_distillation_beats_fitting_the_text(full_run):
    text = section(full_run, 7)
    alphas = {m[0]: float(m[1]) for m in re.findall(r"^(\d)\. .*? (0\.\d{2,3}) +\S+ +\S+$", text, re.M)}
    assert alphas["2"] > alphas["1"] and alphas["3"] >= alphas["2"]
    assert "distillation beats fitting the data" in flat(text)


def test_demo8_mask_identity_and_tree_exactness(full_run):
    text = section(full_run, 8)
    assert "evaluated alone: 0.0e+00." in flat(text)
    rows = re.findall(r"^(independent|distinct) +(correct|no_update) +\S+ +(p [=<] \S+)  (.+)$",
                      text, re.M)
    assert len(rows) == 3
    for _, rule, fit, verdict in rows:
        if rule == "correct":
            assert float(fit[4:]) >= sd.P_REJECT and verdict == "consistent with the target"
        else:
            assert fit == "p < 1e-12" and verdict == "NOT the target"
    assert "Both ways of drafting children emit the target's distribution" in flat(text)


def main(capsys, *args):
    code = sd.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_and_help(capsys):
    code, out, _ = main(capsys, "--list")
    assert code == 0 and out.count("\n") == len(sd.DEMOS)
    code, out, _ = main(capsys, "--help")
    assert code == 0 and "usage:" in out and "Draft length" in out and "--tune" in out


@pytest.mark.parametrize("args", [["99"], ["--bogus"], ["2", "x"], ["--list", "2"]])
def test_bad_arguments_give_one_usage_line_and_exit_2(capsys, args):
    code, out, err = main(capsys, *args)
    assert code == 2
    assert out == "" and err.startswith("usage error:") and err.count("\n") == 1


def test_a_bad_argument_exits_2_without_a_traceback():
    out = run("--bogus")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage error:") and "Traceback" not in out.stderr
