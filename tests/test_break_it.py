"""The README's "Break it" edits, applied to the script's own source text: the
verdict of every demo the edit breaks must flip, and no other must.

Each edit is the literal one-line change a reader makes. The demos run with
fewer samples than the full run (the flips are far from their thresholds),
so the whole file stays fast.
"""
import contextlib
import io
import types
import warnings
from pathlib import Path

import pytest

import speculative_decoding_from_scratch as sd

SOURCE = Path(sd.__file__).read_text()

EDITS = {  # name -> (old text, new text), each old text found exactly once
    "residual returns p": ("return d / total if total > 0 else p", "return p"),
    "accept_prob q/p": ("return min(1.0, float(p[x] / q[x]))",
                        "return min(1.0, float(q[x] / p[x]))"),
    "no bonus token": ("    emitted.append(sample_from(p_rows[-1], rng.random()))  # bonus token\n",
                       ""),
    "residual(q, p) in verify_round": ("else residual(p, q)\n        emitted.append",
                                       "else residual(q, p)\n        emitted.append"),
    "bonus from p": ("sample_from(p_rows[-1], rng.random()))  # bonus",
                     "sample_from(p, rng.random()))  # bonus"),
    "unweighted block_residual": ("    return residual(weight * p, q)",
                                  "    return residual(p, q)"),
}


def edited(edit):
    """The script with one edit applied, loaded as a fresh module."""
    old, new = EDITS[edit]
    assert SOURCE.count(old) == 1, f"the edit {edit!r} no longer matches the script"
    module = types.ModuleType(f"edited: {edit}")
    exec(compile(SOURCE.replace(old, new), sd.__file__, "exec"), module.__dict__)
    return module


def printed(demo, **kwargs):
    """What a demo function prints, as one line of words (wraps undone)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # q/p divides by p = 0 for a token
        demo(**kwargs)
    return " ".join(out.getvalue().split())


# the unedited script prints these (test_demos.py checks them in the full run)
DEMO1_OK = "Emitted = p."
DEMO2_OK = "The correct rule emits the target's distribution"
DEMO3_FITS = "Every row fits"
DEMO3_TEMPS = "Every temperature emits its tempered target"


def demo2(module):
    return printed(module.demo2_distribution, n_runs=400)


def demo3(module):
    return printed(module.demo3_acceptance, n_rounds=300)


def test_residual_returning_p():
    module = edited("residual returns p")
    one = printed(module.demo1_rule_by_hand)
    assert DEMO1_OK not in one and "Emitted != p" in one
    two = demo2(module)
    assert DEMO2_OK not in two
    assert "The 'correct' rule does NOT emit the target's distribution" in two


def test_accept_prob_inverted():
    module = edited("accept_prob q/p")
    one = printed(module.demo1_rule_by_hand)
    assert "always accepted" not in one and "accepted only" in one
    assert "NOT p/q" in one and "Emitted != p" in one
    assert "The 'correct' rule does NOT emit the target's distribution" in demo2(module)


def test_deleting_the_bonus_token_keeps_the_distribution_and_loses_tokens():
    # still exact: a round that passes all k drafts just stops one token early
    module = edited("no bonus token")
    assert DEMO2_OK in demo2(module)
    three = demo3(module)
    assert DEMO3_FITS not in three and "NOT every row fits: blend weight 1.00 measures 4.00" in three
    assert DEMO3_TEMPS in three


def test_residual_arguments_swapped_at_the_call_site():
    # accept_prob and residual are untouched, so only the sampled checks,
    # which run verify_round itself, can see it; the demo says so
    module = edited("residual(q, p) in verify_round")
    two = demo2(module)
    assert DEMO2_OK not in two
    assert "though its exact TV is rounding error" in two and "lives in verify_round" in two
    three = demo3(module)
    assert DEMO3_TEMPS not in three and "NOT every temperature emits" in three


def test_bonus_token_from_the_wrong_row():
    # rare in demo 2 (two tokens from an unrelated draft); demo 3 sees it
    module = edited("bonus from p")
    three = demo3(module)
    assert DEMO3_TEMPS not in three and "NOT every temperature emits" in three


@pytest.mark.parametrize("edit", EDITS)
def test_every_edit_is_listed_in_the_readme(edit):
    readme = (Path(sd.__file__).parent / "README.md").read_text()
    assert edit in readme


def test_the_unweighted_residual_in_verify_block():
    # the token-wise residual vllm-ascend #7807 shipped: exact for two tokens here,
    # biased at the third
    text = printed(edited("unweighted block_residual").demo9_exactness, n_runs=300)
    assert "verify_block emits the target's distribution" not in text
    assert "verify_block is NOT (exact)" in text
