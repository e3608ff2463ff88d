"""The README's "Break it" edits, applied to the script's own text with
sd.edited: the verdicts each edit breaks must flip, and the others must not.
The demos run with fewer samples than the full run (the flips are far from
their thresholds), so the whole file stays fast."""
import contextlib
import io
import warnings
from pathlib import Path

import pytest

import speculative_decoding_from_scratch as sd

EDITS = {  # name -> (function, a fragment of the line, the line it becomes)
    "residual returns p": ("residual", "return d / total", "return p"),
    "accept_prob q/p": ("accept_prob", "return min(1.0", "return min(1.0, float(q[x] / p[x]))"),
    "no bonus token": ("verify_round", "# the bonus token", ""),
    "residual(q, p) in verify_round": ("verify_round", "residual(p, q)",
                                       "emitted.append(sample_from(residual(q, p), rng.random()))"),
    "bonus from p": ("verify_round", "# the bonus token", "emitted.append(sample_from(p, rng.random()))"),
    "unweighted block_residual": ("block_residual", "return residual(weight * p, q)", "return residual(p, q)"),
}


def run(edit, demo, **kwargs):
    """(what a demo of the edited script prints, as one line; what it returns)."""
    module = sd.edited((EDITS[edit],))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # q/p divides by p = 0 for a token
        result = getattr(module, demo)(**kwargs)
    return " ".join(out.getvalue().split()), result


def demo2(edit):
    return run(edit, "demo2_distribution", n_runs=400)


def demo3(edit):
    return run(edit, "demo3_acceptance", n_rounds=300)


def test_residual_returning_p():
    text, result = run("residual returns p", "demo1_rule_by_hand")
    assert "Emitted != p" in text and result.gap > 0.01
    text, result = demo2("residual returns p")
    assert result.verdicts["correct"] == "NOT the target" and "does NOT emit the target's distribution" in text
    text, result = demo3("residual returns p")
    assert "NOT every temperature emits its tempered target" in text


def test_accept_prob_inverted():
    text, result = run("accept_prob q/p", "demo1_rule_by_hand")
    assert "always accepted" not in text and "accepted only" in text
    assert "NOT p/q" in text and "Emitted != p" in text
    assert demo2("accept_prob q/p")[1].verdicts["correct"] == "NOT the target"
    # it keeps more than the paper's ideal verifier can: demo 9 says so
    text, result = run("accept_prob q/p", "demo9_block", n_rounds=200, ks=(2,))
    assert result.example[0][1] > result.ideal and "NOT within the ideal" in text


def test_deleting_the_bonus_token_keeps_the_distribution_and_loses_tokens():
    # still exact: a round that passes all k drafts just stops one token early
    text, result = demo2("no bonus token")
    assert result.verdicts["correct"] == "the target"
    text, result = demo3("no bonus token")
    assert "NOT every row fits: blend weight 1.00 measures 4.00 where the exact value is 5.00" in text
    assert "Every temperature emits its tempered target by both checks" in text


def test_residual_arguments_swapped_at_the_call_site():
    # accept_prob and residual are untouched, so only the sampled check, which
    # runs verify_round itself, can see it; the demo says so
    text, result = demo2("residual(q, p) in verify_round")
    assert result.verdicts["correct"] == "NOT by the fit" and "the bug lives in verify_round" in text
    text, result = demo3("residual(q, p) in verify_round")
    assert "NOT every temperature emits" in text


def test_bonus_token_from_the_wrong_row():
    # rare in demo 2 (two tokens from an unrelated draft); demo 3 sees it
    text, result = demo3("bonus from p")
    assert "NOT every temperature emits" in text
    assert [row[7] for row in result.temperatures][0] == "the target"  # T = 0: every row one-hot


def test_the_unweighted_residual_in_verify_block():
    # the token-wise residual: exact for two tokens here, biased at the third
    text, rows = run("unweighted block_residual", "demo9_exactness", k=3, n_runs=300)
    block = next(r for r in rows if r[0] == "block")
    assert block[5] == "NOT by exact" and block[1] < 1e-12 and block[3] > 1e-5


@pytest.mark.parametrize("edit", EDITS)
def test_every_edit_is_in_the_readme_and_the_run_lists_the_first_five(edit):
    readme = (Path(sd.__file__).parent / "README.md").read_text()
    assert edit in readme and EDITS[edit][2] in readme
