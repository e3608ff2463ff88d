"""--trace: real rounds read off the verifier's own calls, under every rule and
every README edit, in output that grows with the rounds and ends in a summary."""
import re

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_break_it import EDITS


def traced(capsys, module=sd, **kwargs):
    module.trace(**kwargs)
    return capsys.readouterr().out


def emitted_tokens(out):
    """Every token the 'emits:' lines show, marks stripped."""
    lines = [line.split("emits:")[1] for line in out.splitlines() if "emits:" in line]
    return [sd.TOKENS.index(c) for line in lines for c in re.sub(r"[\[\]{}]", "", line).split()]


def generated(module, rule, n_tokens, seed, k=4, weight=sd.MIDDLING_WEIGHT):
    """What the generator emits for a rule and seed: the trace must show the same."""
    Q = sd.blend(sd.TARGET, sd.UNRELATED, weight)
    D, verify = next(((d, v) for r, d, v, _ in module.verifier_settings(sd.TARGET, Q) if r == rule),
                     (Q, module.verify_round))
    return module.spec_generate(sd.TARGET, D, [0], n_tokens, k, np.random.default_rng(seed), verify)[0]


@pytest.mark.parametrize("rule", sd.TRACE_RULES)
def test_the_trace_shows_the_tokens_the_rule_generates_and_never_contradicts_its_rows(capsys, rule):
    module = sd.bugged(rule) if rule in sd.BUGS else sd
    out = traced(capsys, n_rounds=6, seed=3, rule=rule)
    tokens = emitted_tokens(out)
    assert tokens == generated(module, rule, len(tokens), seed=3)
    assert "the round returned" not in out  # what its calls produced is what it returned
    assert out.isascii() and max(map(len, out.splitlines())) <= 80
    assert re.search(r"6 rounds: \d+ tokens in 6 target calls", " ".join(out.split()))


@pytest.mark.parametrize("edit", [e for e in EDITS if e != "unweighted block_residual"])
def test_the_trace_agrees_with_its_rounds_under_every_readme_edit(capsys, edit):
    module = sd.edited((EDITS[edit],))
    out = traced(capsys, module, n_rounds=8, seed=0)
    assert "the round returned" not in out
    assert emitted_tokens(out) == generated(module, "probabilistic", len(emitted_tokens(out)), seed=0)


def test_the_trace_names_the_row_a_token_is_really_drawn_from(capsys):
    # with the bonus drawn from the last draft's row instead of the row after it,
    # the trace must name that row, not claim the bonus row
    module = sd.edited((EDITS["bonus from p"],))
    out = " ".join(traced(capsys, module, n_rounds=1, seed=0, rule="probabilistic").split())
    drafted = re.search(r"proposes ([a-f ]+)\.", out)[1].split()
    if "(the bonus token)" in out:
        assert f"p after '{drafted[-2]}'" in out and f"p after '{drafted[-1]}'" not in out


def test_a_rejection_a_replacement_and_a_bonus(capsys):
    out = " ".join(traced(capsys, seed=0).split())
    assert "rejected" in out and "draws 'f' in its place" in out
    assert "(the bonus token)" in out and "{d}" in out and "[f]" in out


def test_strict_matching_shows_the_draft_the_probabilistic_rule_keeps(capsys):
    out = " ".join(traced(capsys, n_rounds=2, seed=3, rule="strict").split())
    assert "1.000" in out and "the probabilistic rule keeps it with 1.000" in out


def test_block_verification_keeps_up_to_the_last_position_that_passes(capsys):
    out = traced(capsys, n_rounds=6, seed=0, rule="block")
    for block in out.split("Round ")[1:]:
        verdicts = re.findall(r"(passes|fails)\s*$", block, re.M)
        tau = max((i + 1 for i, v in enumerate(verdicts) if v == "passes"), default=0)
        assert f"up to position {tau} (tau)" in block


def test_a_bug_says_where_its_distribution_shows(capsys):
    out = " ".join(traced(capsys, n_rounds=3, seed=0, rule="no_resample").split())
    assert "demo 2 tests 1,000 of them" in out and "'no_resample' bug" in out
    assert "The probabilistic verifier emits the same" in out or "part from these at token" in out


def test_k_and_the_draft_are_the_readers_choice(capsys):
    out = traced(capsys, n_rounds=2, seed=1, k=2, weight=0.0)
    assert "blend weight 0, k = 2" in " ".join(out.split())
    assert all(len(m.split()) == 2 for m in re.findall(r"proposes ([a-f ]+)\.", out))
    assert emitted_tokens(out) == generated(sd, "probabilistic", len(emitted_tokens(out)), seed=1, k=2, weight=0.0)


def test_the_output_grows_linearly_with_the_rounds(capsys):
    short, long_ = traced(capsys, n_rounds=100), traced(capsys, n_rounds=200)
    assert 1.8 < len(long_) / len(short) < 2.2


def test_recorded_round_is_the_real_round():
    drafted, q_rows, emitted, calls = sd.recorded_round(sd.TARGET, sd.MIDDLING, 0, 4, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    assert emitted == sd.spec_round(sd.TARGET, sd.MIDDLING, [0], 4, rng)
    names = [name for name, _, _ in calls]
    assert names.count("accept_prob") == min(len(emitted), 4)
    assert sd.accept_prob.__name__ == "accept_prob"  # the stages were put back


def test_marks_and_colour():
    assert sd.marked([0, 4, 2, 1], ["kept", "kept", "drawn", "bonus"]) == "a e [c] {b}"
    assert sd.marked([4, 1], ["kept", "bonus"], colour=True) == "\033[32me\033[0m \033[36m{b}\033[0m"
    assert sd.row_text([0.5, 0.0, 0.5]) == "a .500  c .500"


def test_round_lines_reads_everything_off_the_record():
    # a hand-made record: draft 'c' after 'a' rejected (u .9 >= .183), then a
    # residual row [1, 0, 0, 0, 0, 0] drawn with u .4 -> 'a'
    row = np.array([1.0, 0, 0, 0, 0, 0])
    p, q = sd.TARGET[0], sd.MIDDLING[0]
    calls = [("u", (), 0.9), ("accept_prob", (p, q, 2), 0.183), ("residual", (p, q), row),
             ("u", (), 0.4), ("sample_from", (row, 0.4), 0)]
    rows, lines, produced = sd.round_lines(sd.TARGET, 0, [2, 3], [q, q], calls)
    assert rows[0][-1] == "rejected" and rows[0][5] == 0.183 and rows[0][7] == 0.9
    assert lines == ["the residual: a 1.00; u = 0.400 draws 'a' in its place"]
    assert produced == [(0, "drawn")]


def test_the_readme_debugger_session_breaks_on_the_acceptance_test():
    readme = open(sd.__file__.replace("speculative_decoding_from_scratch.py", "README.md")).read()
    line = int(re.search(r"\(Pdb\) b (\d+), ctx == 5", readme)[1])
    source = open(sd.__file__).read().splitlines()
    assert source[line - 1].strip() == "if u < accept_prob(p, q, x):"
    assert f"({line})verify_round()\n-> if u < accept_prob(p, q, x):" in readme
    assert f"({line + 1})verify_round()\n-> {source[line].strip()}" in readme


@pytest.mark.parametrize("weight", [sd.MIDDLING_WEIGHT, 0.9])
def test_a_bug_is_compared_with_the_correct_verifier_on_the_same_draft(capsys, weight):
    raw = traced(capsys, n_rounds=5, seed=1, rule="continue", weight=weight)
    tokens, out = emitted_tokens(raw), " ".join(raw.split())
    correct = generated(sd, "probabilistic", len(tokens), seed=1, weight=weight)
    first = next((i for i, (a, b) in enumerate(zip(tokens, correct)) if a != b), None)
    assert (f"emits the same {len(tokens)} tokens" in out if first is None
            else f"part from these at token {first + 1}." in out)
