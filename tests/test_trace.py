"""--trace: real rounds read off verify_round's own calls, and a command line
that behaves like a Unix tool."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd

SCRIPT = sd.__file__


def traced(capsys, **kwargs):
    sd.trace(**kwargs)
    return capsys.readouterr().out


def text_tokens(out):
    """The letters of the last 'text:' line, marks stripped, start dropped."""
    line = [l for l in out.splitlines() if l.strip().startswith("text:")][-1]
    return [sd.TOKENS.index(c) for c in re.sub(r"[\[\]{}]", "", line.split("|")[1]).split()]


def test_recorded_round_is_the_real_round():
    # the same stream as spec_generate's first round, and the record holds
    # every accept_prob call and every uniform verify_round drew
    drafted, emitted, n_acc, calls = sd.recorded_round(sd.TARGET, sd.MIDDLING, 0, 4,
                                                       np.random.default_rng(5))
    rng = np.random.default_rng(5)
    assert (emitted, n_acc) == sd.verify_round(sd.TARGET, sd.MIDDLING, 0,
                                               sd.draft_tokens(sd.MIDDLING, 0, 4, rng), rng)
    names = [name for name, _, _ in calls]
    assert names.count("accept_prob") == min(n_acc + 1, 4)
    assert names.count("u") == min(n_acc + 1, 4) + 1  # one test per checked draft, one draw
    assert sd.accept_prob is not None and "recorder" not in repr(sd.accept_prob)  # restored


@pytest.mark.parametrize("seed", [0, 7])
def test_trace_marks_the_tokens_spec_generate_emits(capsys, seed):
    out = traced(capsys, n_rounds=5, seed=seed)
    tokens = text_tokens(out)
    expected = sd.spec_generate(sd.TARGET, sd.MIDDLING, 0, len(tokens), 4, np.random.default_rng(seed))[0]
    assert tokens == expected
    assert out.isascii() and max(map(len, out.splitlines())) <= 80


def test_trace_is_deterministic_and_moves_when_a_stage_is_edited(capsys, monkeypatch):
    first, again = traced(capsys, seed=0), traced(capsys, seed=0)
    assert first == again
    monkeypatch.setattr(sd, "residual", lambda p, q: p)  # the README's first edit
    broken = traced(capsys, seed=0)
    assert broken != first and "residual: a .094  b .310" in broken  # p itself, shown as residual


def test_trace_shows_a_rejection_a_replacement_and_a_bonus(capsys):
    out = traced(capsys, seed=0)
    assert "rejected" in out and "draws 'f' in its place" in out
    assert "all 4 passed: the bonus token" in out and "{d}" in out and "[f]" in out


def test_trace_of_a_broken_rule(capsys):
    out = traced(capsys, n_rounds=2, seed=1, rule="no_resample")
    assert "'no_resample' bug" in out and "p itself:" in out


def test_marks_and_colour():
    text = [(0, "start"), (4, "kept"), (2, "replaced"), (1, "bonus")]
    assert sd.marked(text) == "a | e [c] {b}"
    assert sd.marked(text, colour=True) == ("\033[0ma |\033[0m \033[32me\033[0m "
                                            "\033[33m[c]\033[0m \033[36m{b}\033[0m")
    assert sd.row_text([0.5, 0.0, 0.5]) == "a .500  c .500"


def test_slot_kinds():
    assert sd.slot_kinds([1, 2], [1, 2, 0], 2, "correct") == ["kept", "kept", "bonus"]
    assert sd.slot_kinds([1, 2], [3], 0, "correct") == ["replaced"]
    assert sd.slot_kinds([1, 2], [3, 2, 0], 1, "continue") == ["replaced", "kept", "bonus"]


def test_parse_trace():
    assert sd.parse_trace([]) == {}
    assert sd.parse_trace(["--seed", "3", "2", "--rule", "greedy"]) == \
        {"seed": 3, "n_rounds": 2, "rule": "greedy"}


def run(*args, **env):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


@pytest.mark.parametrize("args, message", [
    (["--trace", "x"], "--trace N must be an integer, got x"),
    (["--trace", "0"], "--trace N must be >= 1, got 0"),
    (["--trace", "--rule", "bogus"], "unknown rule 'bogus'"),
    (["--trace", "--seed"], "--seed needs a value"),
    (["--trace", "2", "3"], "--trace takes [N] [--rule NAME] [--seed S], got 3"),
    (["--list", "2"], "--list takes no other arguments"),
])
def test_cli_errors_exit_2_with_one_line(capsys, args, message):
    assert sd.main(args) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("usage error: ") and message in out.err
    assert out.err.count("\n") == 1


@pytest.mark.parametrize("args", [["1"], ["--tune", "0.99", "0.001", "--k-max", "3000"],
                                  ["--trace", "50"]])
def test_a_closed_pipe_ends_quietly(args):
    # what `| head -3` does: read three lines, then close the pipe
    proc = subprocess.Popen([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    for _ in range(3):
        proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


def test_output_survives_a_stdout_that_cannot_encode_non_ascii():
    out = run("--tune", "0.3", "0.4", PYTHONIOENCODING="cp1252")
    assert out.returncode == 0 and out.stderr == "" and out.stdout.rstrip().endswith("alpha <= c)")


def test_integer_arg():
    assert sd.integer_arg("--seed", "0", least=0) == 0
    with pytest.raises(ValueError, match="--seed must be an integer, got 1.5"):
        sd.integer_arg("--seed", "1.5", least=0)


def test_print_round_reads_everything_off_the_record(capsys):
    # a hand-made record: draft 'c' after 'a' rejected (u .9 >= .183), then a
    # residual row [1, 0, 0, 0, 0, 0] drawn with u .4 -> 'a'
    row = np.array([1.0, 0, 0, 0, 0, 0])
    p, q = sd.TARGET[0], sd.MIDDLING[0]
    calls = [("u", (), 0.9), ("accept_prob", (p, q, 2), 0.183),
             ("residual", (p, q), row), ("u", (), 0.4), ("sample_from", (row, 0.4), 0)]
    sd.print_round(0, [2, 3], ["replaced"], calls)
    out = capsys.readouterr().out
    assert "0.183   0.900  rejected" in out and "residual: a 1.000" in out
    assert "u = 0.400 draws 'a' in its place" in out


def test_the_readme_debugger_session_breaks_on_the_acceptance_test():
    readme = open(os.path.join(os.path.dirname(SCRIPT), "README.md")).read()
    line = int(re.search(r"\(Pdb\) b (\d+), ctx == 5", readme)[1])
    source = open(SCRIPT).read().splitlines()
    assert source[line - 1].strip().startswith("keep = x == p.argmax()")
    assert f"Line {line} is its acceptance test" in readme
