"""The script as a reader runs it: the command line, and what the demos print."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import speculative_decoding_from_scratch as sd

SCRIPT = Path(sd.__file__)


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def full_run():
    out = run()
    assert out.returncode == 0, out.stderr
    return out.stdout


def unclocked(text):
    """The text with every wall-clock line (marked '(clock)') blanked out."""
    return "\n".join("<clock>" if line.endswith("(clock)") else line for line in text.splitlines())


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
    assert "Now break it" in full_run


def test_selected_demos_print_exactly_what_the_full_run_prints(full_run):
    # a fresh process, a different selection and order: the same bytes (every
    # demo seeds itself), except demo 6's lines measured on the clock
    out = run("7", "6", "5")
    assert out.returncode == 0
    for n in (5, 7):
        assert section(out.stdout, n) == section(full_run, n)
    assert unclocked(section(out.stdout, 6)) == unclocked(section(full_run, 6))
    assert unclocked(section(out.stdout, 6)).count("<clock>") == 9
    assert out.stdout.index("Demo 7.") < out.stdout.index("Demo 6.") < out.stdout.index("Demo 5.")


def test_demo1_proof_closes(full_run):
    largest = float(re.search(r"Largest \|emitted - p\| over the tokens: (\S+)", full_run)[1])
    assert largest < 1e-12


def test_demo2_correct_at_the_floor_and_every_broken_rule_ten_times_above(full_run):
    rows = dict(re.findall(r"^(\w+) +\d\.\d{4} +(\d+\.\d)", section(full_run, 2), re.M))
    assert set(rows) == set(sd.RULES) | {"floor"}
    assert float(rows["correct"]) < 3
    for rule in sd.RULES[1:]:
        assert float(rows[rule]) >= 10, rule


def test_demo3_exact_alpha_column_is_pair_alpha(full_run):
    line = re.search(r"^blend weight 0\.50 +(\S+) +(\S+)", section(full_run, 3), re.M)
    assert float(line[2]) == round(sd.pair_alpha(sd.TARGET, sd.MIDDLING), 3)
    assert abs(float(line[1]) - float(line[2])) < 0.03


def test_demo4_best_k_lines_name_the_largest_speedups(full_run):
    text = section(full_run, 4)
    rows = re.findall(r"^ *(\d+) +0\.\d{3} +\S+ +\S+ +(\S+) +(\S+)$", text, re.M)
    assert len(rows) == 16
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
    assert "= 148 MACs per byte" in text


def test_demo7_distillation_beats_fitting_the_text(full_run):
    text = section(full_run, 7)
    alphas = {m[0]: float(m[1]) for m in re.findall(r"^\((\w)\) .*? (0\.\d{3}) +\S+ +\S+$", text, re.M)}
    assert alphas["b"] > alphas["a"] and alphas["c"] >= alphas["b"]
    assert "distillation beats fitting the data" in text


def test_demo8_mask_identity_and_tree_exactness(full_run):
    text = section(full_run, 8)
    assert "evaluated alone: 0.0e+00." in text
    rows = re.findall(r"^(independent|distinct) +(correct|no_update) +\S+ +(\S+)$", text, re.M)
    assert len(rows) == 3
    for _, rule, ratio in rows:
        assert (float(ratio) < 3) if rule == "correct" else (float(ratio) >= 10)


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
