"""Drafts with no draft model, on text that copies (chapter 11): prompt lookup as
vLLM's ngram proposer does it, with vLLM's own test cases; the character model
of Python's documentation; heads on the target; APEX-1's two generator bugs.
The documentation differs between Python versions, so these tests check
properties, not digits."""
import contextlib
import io
import sys
from itertools import product

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from helpers import ScriptedRng

V = len(sd.ALPHABET)

# tests/v1/spec_decode/test_ngram.py at vLLM commit 016e8ede87: (tokens, min_n, max_n, k) -> the proposal
VLLM_CASES = [
    ([1, 2, 3, 4, 1, 2, 3, 5, 6], 2, 2, 2, []),
    ([1, 2, 3, 4, 1, 2, 3], 2, 2, 3, [4, 1, 2]),
    ([1, 2, 3, 4, 1, 2, 3], 2, 2, 2, [4, 1]),
    ([1, 2, 3, 4, 1, 2, 3], 1, 1, 3, [4, 1, 2]),
    ([1, 2, 3, 4, 1, 2, 3], 1, 1, 2, [4, 1]),
    ([1, 3, 6, 2, 3, 4, 1, 2, 3], 2, 2, 3, [4, 1, 2]),
    ([1, 3, 6, 2, 3, 4, 1, 2, 3], 1, 1, 2, [6, 2]),  # "Return on the first match"
    ([1, 2, 3, 4, 5], 2, 2, 2, []),  # no match
    ([1, 2, 3, 4, 1, 2, 3], 4, 4, 2, []),  # no 4-gram match
    ([1, 2, 3, 4, 1, 2, 3], 3, 4, 2, [4, 1]),  # a 3-gram, not a 4-gram
    ([2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4], 3, 4, 2, [1, 2]),  # the 4-gram wins: "Not [5, 1]"
    ([3, 4, 5, 2, 3, 4, 1, 2, 3, 4], 2, 4, 2, [1, 2]),  # "Not [5, 2]"
    ([1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3], 3, 3, 2, [100, 1]),  # "always pick the first one"
    ([1, 2, 3, 4, 2, 3], 2, 3, 4, [4, 2, 3]),  # the proposer's docstring: fewer than k when the text ends
]


@pytest.mark.parametrize("tokens, n_min, n_max, k, proposal", VLLM_CASES)
def test_prompt_lookup_proposes_what_vllms_ngram_proposer_proposes(tokens, n_min, n_max, k, proposal):
    assert sd.prompt_lookup(tokens, k, n_min, n_max) == proposal


def by_definition(tokens, k, n_min, n_max):
    """The longest n-gram ending the text that occurred earlier (ending before
    the last token), at its earliest occurrence; what followed it, at most k."""
    for n in range(n_max, n_min - 1, -1):
        for j in range(len(tokens) - n):
            if n <= len(tokens) - 1 and tokens[j:j + n] == tokens[len(tokens) - n:]:
                return tokens[j + n:j + n + k]
    return []


def test_prompt_lookup_against_its_definition_on_random_texts():
    rng = np.random.default_rng(0)
    for _ in range(400):
        tokens = rng.integers(0, 3, rng.integers(0, 14)).tolist()
        n_min = int(rng.integers(1, 4))
        n_max, k = n_min + int(rng.integers(0, 3)), int(rng.integers(0, 5))
        assert sd.prompt_lookup(tokens, k, n_min, n_max) == by_definition(tokens, k, n_min, n_max), tokens


def test_transformers_prompt_lookup_is_the_same_search_from_two_down_to_one():
    # PromptLookupCandidateGenerator: n from min(2, len - 1) down to 1, the
    # leftmost window whose continuation is not empty
    rng = np.random.default_rng(1)
    for _ in range(300):
        t = rng.integers(0, 3, rng.integers(2, 12)).tolist()
        want = []
        for n in range(min(2, len(t) - 1), 0, -1):
            starts = [i for i in range(len(t) - n + 1) if t[i:i + n] == t[-n:] and i + n < len(t)]
            if starts:
                want = t[starts[0] + n:starts[0] + n + 4]
                break
        assert sd.prompt_lookup(t, 4, 1, 2) == want


@pytest.mark.parametrize("k, n_min, n_max, message", [
    (2, 0, 2, "1 <= n_min <= n_max and k >= 0, got n_min = 0"), (2, 3, 2, "got n_min = 3, n_max = 2"),
    (-1, 1, 2, "k = -1"), (2.5, 1, 2, "must be integers"),
])
def test_prompt_lookup_refuses_settings_that_cannot_search(k, n_min, n_max, message):
    with pytest.raises(ValueError, match=message):
        sd.prompt_lookup([1, 2, 1, 2], k, n_min, n_max)


def test_an_empty_or_short_text_proposes_nothing_and_the_round_is_a_plain_step():
    assert sd.prompt_lookup([], 3) == [] and sd.prompt_lookup([5], 3, 1, 2) == [] and sd.prompt_lookup([7, 8], 3, 2, 2) == []
    assert sd.prompt_lookup(np.int64([1, 2, 1]), np.int64(2) * 0 + 2, 1, 1) == [2, 1]  # numpy ints are ints
    drafted, q_rows = sd.lookup_draft(sd.Lookup(2, 3, 6), [0, 1, 2], 4, None)
    assert drafted == [] and q_rows == []
    P = sd.TARGET
    assert sd.verify_round(P, [0], drafted, q_rows, ScriptedRng([0.5])) == [sd.sample_from(P[0], 0.5)]


def test_a_deterministic_drafts_q_is_one_hot_and_the_same_stages_give_vllms_rule():
    drafted, q_rows = sd.lookup_draft(sd.Lookup(1, 2, 6), [0, 1, 2, 0, 1], 2, None)
    assert drafted == [2, 0] and [list(q) for q in q_rows] == [list(sd.one_hot(2, 6)), list(sd.one_hot(0, 6))]
    p = sd.TARGET[3]
    assert sd.accept_prob(p, q_rows[0], 2) == p[2]  # keep x with chance p(x)
    assert np.allclose(sd.residual(p, q_rows[0]), np.where(np.arange(6) == 2, 0, p) / (1 - p[2]))  # p without x


# --- the character model --------------------------------------------------------------

def test_the_corpus_is_pythons_documentation_and_says_which_python():
    ids, where = sd.docs_corpus()
    assert len(ids) > 100_000 and max(ids) < V and min(ids) >= 0
    assert f"Python {sys.version.split()[0]}" in where and f"{len(ids):,} characters" in where
    assert sd.decode(sd.encode("print(x)\n")) == "print(x)\n" and sd.encode("\t")[0] == sd.encode(" ")[0]
    assert sd.decode(sd.encode("\u201chi\u201d")) == "?hi?"  # outside the alphabet


def test_the_trigram_rows_are_distributions_with_nothing_impossible():
    T = sd.trigram_table()
    assert T.shape == (V, V, V) and np.allclose(T.sum(axis=2), 1) and T.min() > 0
    after_q = T[sd.ALPHABET.index(" "), sd.ALPHABET.index("q")]
    assert sd.ALPHABET[int(np.argmax(after_q))] == "u"  # the documentation spells English


def test_the_copy_model_continues_the_longest_earlier_match():
    P = sd.CopyModel(0.9)
    text = sd.encode("the cat sat. the ca")
    row = sd.forward(P, text)[0]
    assert np.isclose(row.sum(), 1) and row.min() > 0
    assert row[sd.ALPHABET.index("t")] >= 0.9  # "the ca" occurred before, followed by "t"
    plain = sd.CopyModel(0.0)
    assert np.array_equal(sd.forward(plain, text)[0], sd.trigram_table()[text[-2], text[-1]])
    assert np.array_equal(sd.forward(P, sd.encode("xyz"))[0], sd.trigram_table()[text[0] * 0 + sd.encode("y")[0],
                                                                                 sd.encode("z")[0]])


def test_a_pass_is_its_rows_position_by_position_and_a_cache_skips_the_first():
    P, text, new = sd.CopyModel(0.7), sd.prompts()["edit"], sd.encode("text, pre")
    rows = sd.forward(P, text, new)
    for i in range(len(new) + 1):
        assert np.array_equal(rows[i], sd.forward(P, [*text, *new[:i]])[0])
    assert all(np.array_equal(a, b) for a, b in zip(sd.forward(P, text, new, cached=4), rows[4:]))


def test_the_prompts_are_real_passages():
    prompts = sd.prompts()
    assert set(prompts) == {"summarise", "edit"}
    assert "In short, the loop" in sd.decode(prompts["summarise"]) and len(prompts["summarise"]) > 200
    assert sd.decode(prompts["edit"]).rstrip().endswith("def indent(")


# --- exact, by both checks --------------------------------------------------------------

@pytest.mark.parametrize("lam", [0.0, 0.6, 0.95])
def test_prompt_lookup_on_the_copying_target_is_the_target_exactly(lam):
    P, L = sd.CopyModel(lam), sd.Lookup(2, 4, V)
    prompt = sd.encode("a rose is a rose is a ro")  # short: the exact walk stays small
    exact = sd.exact_draft_first_tokens(P, lambda t: [(*sd.lookup_draft(L, t, 5, None), 1.0)], prompt, 2)
    assert np.abs(exact - sd.target_first_tokens_text(P, prompt, 2)).max() < 1e-12


def test_a_proposal_the_target_would_not_copy_is_still_exact():
    # the HF settings propose after a 1-gram match: often a token the target gives little
    P, L = sd.CopyModel(0.9), sd.Lookup(1, 2, V)
    prompt = sd.encode("abcabd ab")
    exact = sd.exact_draft_first_tokens(P, lambda t: [(*sd.lookup_draft(L, t, 4, None), 1.0)], prompt, 2)
    assert np.abs(exact - sd.target_first_tokens_text(P, prompt, 2)).max() < 1e-12


def test_the_exact_walk_sees_a_broken_residual():
    module = sd.edited((("residual", "return d / total if total > 0 else p", "return p"),))
    P, L = module.CopyModel(0.9), module.Lookup(2, 4, V)
    prompt = sd.encode("a rose is a rose is a ro")
    exact = module.exact_draft_first_tokens(P, lambda t: [(*module.lookup_draft(L, t, 5, None), 1.0)], prompt, 2)
    assert sd.tv_distance(exact, sd.target_first_tokens_text(P, prompt, 2)) > 0.01


def test_medusa_heads_on_the_tables_are_exact_and_lose_acceptance():
    heads = sd.medusa_heads(sd.TARGET, 3)
    assert np.allclose(heads[1], sd.TARGET @ sd.TARGET)
    exact = sd.exact_draft_first_tokens(sd.TARGET, sd.heads_proposals(heads, 3), [5], 3, reads_text=False)
    assert np.abs(exact - sd.target_first_tokens(sd.TARGET, 5, 3)).max() < 1e-12
    # the second draft passes with sum_x1 P[d, x1] sum_x2 min(P[x1, x2], P^2[d, x2]), averaged over pi
    pi, P, P2 = sd.stationary(sd.TARGET), sd.TARGET, sd.TARGET @ sd.TARGET
    second = sum(pi[d] * P[d, a] * np.minimum(P[a], P2[d]).sum() for d in range(6) for a in range(6))
    with contextlib.redirect_stdout(io.StringIO()):
        reached = sd.demo16_acceptance(3).reached
    assert reached[0] == pytest.approx(1.0) and reached[1] == pytest.approx(second, abs=1e-12) and reached[1] < 1


def test_heads_draft_samples_each_head_on_its_own():
    heads = (np.eye(6)[[1, 2, 3, 4, 5, 0]], np.eye(6)[[2, 3, 4, 5, 0, 1]])  # deterministic heads
    drafted, q_rows = sd.heads_draft(heads, [0], 2, ScriptedRng([0.5, 0.5]))
    assert drafted == [1, 2] and np.array_equal(q_rows[1], heads[1][0])  # both read the text's last token


# --- APEX-1's generator, ported ---------------------------------------------------------

def test_the_ported_generator_emits_the_targets_first_two_tokens_on_the_tables():
    L, counts = sd.Lookup(1, 3, 6), np.zeros((6, 6))
    rng = np.random.default_rng(3)
    for _ in range(3000):
        x1, x2 = sd.apex_generate(sd.TARGET, L, [0, 4, 0, 4, 0], 2, 3, rng)
        counts[x1, x2] += 1
    truth = sd.target_first_tokens(sd.TARGET, 0, 2)
    assert sd.chi2_sf(*sd.pearson(counts, truth)) > 1e-3


def test_a_table_cannot_see_the_cache_bug():
    # a table reads only the last token, so the rejected drafts left in the cache change nothing
    L, prompt = sd.Lookup(1, 3, 6), [0, 4, 0, 4, 0, 4]
    fixed = sd.apex_generate(sd.TARGET, L, prompt, 300, 4, np.random.default_rng(5))
    cache = sd.bugged("cache", sd.APEX_BUGS).apex_generate(sd.TARGET, L, prompt, 300, 4, np.random.default_rng(5))
    assert fixed == cache
    next_row = sd.bugged("next row", sd.APEX_BUGS).apex_generate(sd.TARGET, L, prompt, 300, 4, np.random.default_rng(5))
    assert next_row != fixed


def test_the_calibration_fit_is_uniform_for_the_target_and_catches_a_wrong_model():
    P, prompt = sd.CopyModel(0.5), sd.prompts()["edit"]
    ps = [sd.calibration_p_value(sd.plain_decode(P, prompt, 300, np.random.default_rng(s)), P, prompt) for s in range(8)]
    # the text differs by Python, so a margin: two of eight below 1e-3, or one below 1e-6, has chance < 1e-4
    assert sum(p < 1e-3 for p in ps) <= 1 and min(ps) > 1e-6
    wrong = sd.plain_decode(sd.CopyModel(0.0), prompt, 300, np.random.default_rng(0))
    assert sd.calibration_p_value(wrong, sd.CopyModel(0.99), prompt) < 1e-6


def test_every_position_of_a_heads_proposal_is_enumerated():
    heads = sd.medusa_heads(sd.TARGET, 2)
    proposals = sd.heads_proposals(heads, 2)([3])
    assert len(proposals) == 36 and sum(p for _, _, p in proposals) == pytest.approx(1)
    assert {tuple(d) for d, _, _ in proposals} == set(product(range(6), repeat=2))


def test_chapter11_says_which_earlier_place_the_target_copies_and_the_fits_bins(all_run):
    from test_demos import flat, section
    text = flat(section(all_run, "11"))
    # by hand: 'abcX' then 'abcY' earlier, the text ending 'abc': the target puts lam on 'Y', what followed the most
    # recent earlier place (read 1631 asked which place, when the ending appears more than once)
    model = sd.CopyModel(0.9)
    seq = bytes(sd.encode("abcX abcY abc"))
    row = model.row(seq, len(seq))
    trigram = model.T[seq[-2], seq[-1]]
    assert row[sd.encode("Y")[0]] == pytest.approx(0.9 + 0.1 * trigram[sd.encode("Y")[0]])
    assert row[sd.encode("X")[0]] == pytest.approx(0.1 * trigram[sd.encode("X")[0]])
    assert ("the target copies. It finds the longest ending of the text so far (prompt and output), of 3 to 12"
            " characters, that also appears earlier. It writes the character that followed its most recent earlier"
            " place.") in text
    # the draft looks where the target does not (reads 1689 and 1696 asked whether the mismatch is meant): after
    # ' abcX abcY abc' the target copies 'Y', the most recent place's; vLLM's and HF's lookups both propose 'X'
    seq = sd.encode(" abcX abcY abc")
    assert np.argmax(model.row(bytes(seq), len(seq))) == sd.encode("Y")[0]
    for L in (sd.VLLM_LOOKUP, sd.HF_LOOKUP):
        assert sd.prompt_lookup(seq, 1, L.n_min, L.n_max) == sd.encode("X")
    assert ("At the earliest place they occur, it proposes up to k characters that followed (here k = 5). The target"
            " copies from the most recent place, so a guess can be wrong.") in text
    assert ("It finds the earliest place the text's last 4 characters occurred (else its last 3, then 2), and proposes"
            " up to k characters that followed them there, so it can guess wrong even when the target copies.") in flat(
        section(all_run, "26"))
    # the bins' edges, all of them, from the fit's own CALIBRATION_EDGES (read 1631: 'and so on' left them out), and
    # what a bin's expected count is (reads 1689, 1716 and, in chapter 17, 1704 and 1719 worked it out): the detail's
    # since stop 77, the body saying what a bin is in one clause
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sd.DETAILS["11"](sd.SimpleNamespace(n_text=600))
    detail = " ".join(out.getvalue().split())
    assert "The bins' edges are 0.001, 0.01, 0.05, 0.2, 0.5 and 0.8." in detail and "edges" not in text
    assert ("the fit puts each written character in a bin by the probability the target gave it there (--detail gives"
            " the bins). It compares each bin's count with its expected count: at each position, the target's total"
            " chance for the characters in that bin, summed over the positions.") in text  # read 1936 could not
    # rebuild the count with only 'the count the target's chances predict'
    assert sd.CALIBRATION_EDGES[1:-1] == (1e-3, 0.01, 0.05, 0.2, 0.5, 0.8)
