"""Areas the earlier tests left silent, each pinned against a hand-worked case
or an independent computation: the copying model's match rule, the drafters'
own settings, APEX-1's port and the fit it is judged by, chapter 11's and
chapters 12 and 38's numbers, the text trace, sentences and cells that read a row,
bad input, and the edit machinery."""
import contextlib
import io
import re

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_demos import section


def ids(text):
    return sd.encode(text)


def copied(text):
    """What CopyModel(1.0) copies after text: the one token its row is sure of, or None (no match)."""
    seq = bytes(ids(text))
    row = sd.CopyModel(1.0).row(seq, len(seq))
    return sd.decode([int(np.argmax(row))]) if row.max() == 1.0 else None


# --- the copying model's match rule ---------------------------------------------------------------

def test_the_longest_earlier_match_wins():
    # 'abcd' occurred once (then 'Y'); its tail 'bcd' occurred later too (then 'Z'): the longest wins
    assert copied("XabcdYQbcdZabcd") == "Y"


def test_of_equal_length_the_most_recent_match_wins():
    assert copied("abcXabcYabc") == "Y"


def test_a_match_may_end_right_before_the_text_does():
    # 'aaaa': the text's last three 'aaa' also start at 0, followed by the text's last character
    assert copied("aaaa") == "a"
    assert copied("abcab") is None  # 'cab', 'bab'... no three-character repeat


def test_a_match_shorter_than_three_is_not_copied():
    assert copied("abXab") is None and copied("abcXabc") == "X"


# --- the drafters' own settings ---------------------------------------------------------------------

def test_each_lookup_uses_its_own_ngram_sizes():
    text = ids("zqx1 abzq2 ab")  # the last 2 characters ' ab' ... vLLM's 2..4 and HF's 1..2 differ here
    vllm, hf = sd.Lookup(2, 4, len(sd.ALPHABET)), sd.Lookup(1, 2, len(sd.ALPHABET))
    assert sd.lookup_draft(vllm, text, 3, None)[0] == sd.prompt_lookup(text, 3, 2, 4)
    assert sd.lookup_draft(hf, text, 3, None)[0] == sd.prompt_lookup(text, 3, 1, 2)
    t = [5, 1, 2, 7, 3, 2, 8, 2]  # '8 2' never came before; '2' did, first followed by 7
    assert sd.prompt_lookup(t, 1, 2, 4) == [] and sd.prompt_lookup(t, 1, 1, 2) == [7]
    assert sd.lookup_draft(sd.Lookup(2, 4, 10), t, 1, None)[0] == [] and sd.lookup_draft(sd.Lookup(1, 2, 10), t, 1,
                                                                                         None)[0] == [7]


def test_chapter26s_two_lookups_give_different_columns(in_process):
    rows = in_process[0]["26"].rows
    assert all(r[1] != r[2] for r in rows)


# --- APEX-1's port, and the fit that judges it --------------------------------------------------------

def test_the_port_drafts_after_the_token_it_just_sampled(monkeypatch):
    seen = []
    real = sd.lookup_draft

    def spy(L, text, k, rng):
        seen.append(list(text))
        return real(L, text, k, rng)
    monkeypatch.setattr(sd, "lookup_draft", spy)
    out = sd.apex_generate(sd.TARGET, sd.Lookup(2, 4, 6), [0, 1, 2, 0, 1], 12, 3, np.random.default_rng(5))
    prompt = [0, 1, 2, 0, 1]
    for text in seen:  # each lookup reads the prompt, then what has come out, up to the token just sampled
        assert text[:5] == prompt and text[5:] == out[:len(text) - 5]
    assert len(seen[0]) == 6  # the first draft already reads the first sampled token


def by_hand_calibration(tokens, P, text, edges=(0, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.8, 1.01)):
    """The calibration statistic written out: per bin, landings minus expected; their covariance is the
    sum over tokens of the multinomial covariance diag(m) - m m^T; bins expected fewer than 5 landings
    are summed into one, and the last group is left out (the others imply it); the statistic d^T C^-1 d
    has as many degrees of freedom as groups remain."""
    rows = [P[t] for t in [text[-1], *tokens[:-1]]]
    B = len(edges) - 1
    landed, expected, cov = np.zeros(B), np.zeros(B), np.zeros((B, B))
    for p, t in zip(rows, tokens):
        m = np.array([p[(p >= edges[b]) & (p < edges[b + 1])].sum() for b in range(B)])
        landed[next(b for b in range(B) if edges[b] <= p[t] < edges[b + 1])] += 1
        expected += m
        cov += np.diag(m) - np.outer(m, m)
    groups = [[b] for b in range(B) if expected[b] >= 5] + [[b for b in range(B) if expected[b] < 5]]
    groups = [g for g in groups if sum(expected[b] for b in g) > 0][:-1]  # the last is implied by the rest
    d = np.array([sum(landed[b] - expected[b] for b in g) for g in groups])
    C = np.array([[sum(cov[a, b] for a in g for b in h) for h in groups] for g in groups])
    return sd.chi2_sf(float(d @ np.linalg.inv(C) @ d), len(groups))


def test_the_calibration_fit_against_the_statistic_written_out():
    rng = np.random.default_rng(40)
    for _ in range(3):
        tokens = sd.plain_decode(sd.TARGET, [2], 300, rng)
        assert sd.calibration_p_value(tokens, sd.TARGET, [2]) == pytest.approx(
            by_hand_calibration(tokens, sd.TARGET, [2]), rel=1e-9)


def test_the_calibration_fit_is_uniform_on_the_targets_own_text():
    # a p-value is uniform when the text is the target's: about 10% fall below 0.1
    rng = np.random.default_rng(41)
    p = [sd.calibration_p_value(sd.plain_decode(sd.TARGET, [0], 200, rng), sd.TARGET, [0]) for _ in range(150)]
    below = sum(x < 0.1 for x in p) / len(p)
    assert 0.03 <= below <= 0.2 and sum(x < sd.P_REJECT for x in p) <= 1 and 0.35 <= float(np.median(p)) <= 0.65


# --- chapter 11's and chapter 16's numbers ----------------------------------------------------------------

def test_mtp_heads_make_k_plus_one_tokens_per_call(in_process):
    result, text = in_process[0]["16"], " ".join(in_process[1].split())
    assert result.heads.tokens < 4 and "MTP 1.000 1.000 1.000 4.00" in text


def test_a_verifying_pass_is_priced_at_k_plus_one_positions():
    for k, b in ((5, 256), (4, 64), (3, 1)):
        one = sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 16, 1, b))[0]
        assert sd.verify_cost(k, b) == sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 16, k + 1, b))[0] / one
    assert sd.verify_cost(5, 256) != sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 16, 5, 256))[0] / \
        sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 16, 1, 256))[0]


# --- chapters 12 and 38 --------------------------------------------------------------------------------

def test_ulps_are_counted_in_the_spacing_at_each_value(monkeypatch):
    # a layer whose wide product is 1000 everywhere and whose narrow one is two float32 spacings above:
    # two ulps each, where counting in machine epsilons would say 1024
    class Layer:
        shape, dtype = (16, 8), np.float32

        def __matmul__(self, H):
            return np.full((16, H.shape[1]), 1000.0, np.float32)
    up = np.float32(1000.0) + 2 * np.spacing(np.float32(1000.0))
    monkeypatch.setattr(sd, "products_alone", lambda W, H: np.full((16, H.shape[1]), up, np.float32))
    share, ulps, worst, flips, margin = sd.widths_differ(type("Head", (), {"W": Layer()})(), n=4)
    assert share == 1.0 and ulps == 2.0 and worst == pytest.approx(2 * float(np.spacing(np.float32(1000.0))))


def test_the_margin_is_read_where_the_texts_part():
    head, D = sd.GreedyHead(gap=1e-6), sd.GreedyHead(gap=1e-6, alone=True)
    for prompt in ([3, 7], [1, 2], [5, 9], [0, 4], [8, 8], [6, 1]):
        i, margin = sd.first_divergence(head, D, prompt, 32, 4)
        if i is not None:
            plain = sd.plain_decode(head, prompt, 32, np.random.default_rng(0))
            assert margin == float(sd.top_margin(head.logits([*prompt, *plain[:i]]))[0])
            return
    pytest.skip("no text parts on this machine's BLAS")


@pytest.mark.parametrize("float64_parts", [False, True])
def test_chapter12s_float64_sentence_reads_its_own_row(monkeypatch, capsys, float64_parts):
    real = sd.first_divergence

    def fake(P, D, prompt, n_tokens, k, verify=sd.verify_round):
        if P.W.dtype == np.float64:
            return (3, 1e-7) if float64_parts else (None, None)
        if not P.alone:  # float32, one wide product: it parts, as on this machine's BLAS
            return (12, 4e-7)
        return real(P, D, prompt, n_tokens, k, verify)
    monkeypatch.setattr(sd, "first_divergence", fake)
    monkeypatch.setattr(sd, "median_time", lambda f, **kw: 1e-3)
    sd.demo38_texts(4, 16, 4, 1e-6)
    text = " ".join(capsys.readouterr().out.replace("(clock)", "").split())
    assert ("Float64, with one wide product, does NOT agree." in text) == float64_parts
    assert ("Float64, with one wide product, agrees too: it rounds at about 2e-16 of a logit, float32 at about 1e-7;"
            " only float32's reaches the smallest of the 1e-6 near-ties." in text) != float64_parts  # why, which reads
    # 1538 and 1553 supplied; read 1737 took float32's rounding, also below 1e-6, to say float32 should agree too
    assert f"{np.finfo(np.float32).eps:.0e}" == "1e-07"
    assert f"{np.finfo(np.float64).eps:.0e}" == "2e-16"


# --- the text trace --------------------------------------------------------------------------------------

def test_the_text_trace_drafts_with_the_ngram_sizes_its_header_states(capsys, monkeypatch):
    seen, real = [], sd.lookup_draft

    def spy(L, text, k, rng):
        seen.append((list(text), real(L, text, k, rng)[0]))
        return real(L, text, k, rng)
    monkeypatch.setattr(sd, "lookup_draft", spy)
    sd.trace(3, seed=1, text="edit")
    out = capsys.readouterr().out
    assert "n 2..4" in " ".join(out.split()) and len(seen) == 3
    proposals = [line.split("proposes ", 1)[1][:-1] for line in out.splitlines() if line.startswith("Round ")]
    for (text, drafted), shown in zip(seen, proposals):
        assert drafted == sd.prompt_lookup(text, 4, 2, 4)  # the sizes the header states, not others
        assert shown == (" ".join(sd.glyph(x, sd.decode) for x in drafted) or "nothing, so the round is one plain step")


def test_a_round_with_nothing_to_check_marks_its_draw_the_bonus(capsys):
    for seed in range(8):
        sd.trace(4, seed=seed, text="summarise")
        out = capsys.readouterr().out
        blocks = out.split("\nRound ")[1:]
        empty = [b for b in blocks if "proposes nothing" in b]
        if empty:
            assert all("(the bonus token)" in b and "{" in b.split("emits: ")[1] for b in empty)
            return
    pytest.skip("no empty proposal in these seeds")


# --- sentences and cells that read a row -------------------------------------------------------------------

def test_demo10s_stop_sentence_reads_the_default_thresholds_row(capsys):
    out = sd.demo10_policies(n_rounds=60)
    text = " ".join(capsys.readouterr().out.split())
    drafts = [sd.confidence_value(sd.TARGET, Q, sd.HF_THRESHOLD, 20, 0.1)[1]
              for Q in (sd.MIDDLING, sd.blend(sd.TARGET, sd.UNRELATED, 0.9))]
    assert f"drafting stops after about {drafts[0]:.1f} / {drafts[1]:.1f} drafts" in text
    assert all(o.rows[4][0] == f"confidence {sd.HF_THRESHOLD}" for o in out.values())


def test_the_plans_bound_column_names_both_ends():
    tokens = sd.expected_tokens(0.8, np.arange(1, 17))
    for lo, hi, k in [(1, 1, 4), (1, 400, 4), (300, 400, 4)]:
        ends = [str(sd.roofline_time(*sd.pass_traffic(sd.LLAMA2_7B, 512, k + 1, b))[1]) for b in (lo, hi)]
        want = ends[0] if ends[0] == ends[1] else f"{ends[0]} to {ends[1]}"
        assert sd.bound_text(sd.LLAMA2_7B, 512, k, lo, hi, sd.H100) == want
    assert sd.bound_text(sd.LLAMA2_7B, 16, 4, 1, 400, sd.H100) == "memory to compute"
    assert sd.bound_text(sd.LLAMA2_7B, 512, 0, 1, 400, sd.H100) == ""
    assert tokens[0] > 1


def test_the_plan_prices_everything_on_the_accelerator_it_is_given(capsys):
    slow = sd.Accelerator("a slow one", 100e12, 1e12, 80e9)  # ridge: 50 MACs per byte, not 148
    buckets, _ = sd.print_plan(sd.expected_tokens(0.8, np.arange(1, 9)), 512, 256, "alpha = 0.8", hw=slow)
    capsys.readouterr()
    scan = np.array([sd.batch_speedups(sd.expected_tokens(0.8, np.arange(1, 9)), b, 512, hw=slow)
                     for b in range(1, 257)])
    h100 = np.array([sd.batch_speedups(sd.expected_tokens(0.8, np.arange(1, 9)), b, 512)
                     for b in range(1, 257)])
    assert not np.allclose(scan, h100)
    planned = min(sd.sequences_that_fit(512, slow, sd.LLAMA2_7B, drafts=(sd.DRAFT_SHAPE,)), 256)  # both models
    assert buckets == sd.plan_schedule(sd.expected_tokens(0.8, np.arange(1, 9)), 512, planned, hw=slow)[0]
    assert buckets != sd.plan_schedule(sd.expected_tokens(0.8, np.arange(1, 9)), 512, planned)[0]
    for lo, hi, k in buckets:
        assert (k == 0) == (scan[lo - 1:hi].max(axis=1) <= 1).all()


def test_chapter9s_one_hot_wins_are_counted_with_the_one_hot_table_and_every_win_is_a_liked_context(in_process):
    result = in_process[0]["9"]
    pairs = [(sd.TARGET, sd.MIDDLING), (sd.TARGET, sd.UNRELATED), (sd.TARGET, sd.blend(sd.TARGET, sd.UNRELATED, 0.9)),
             (sd.temper(sd.TARGET, 0.3), sd.temper(sd.TARGET, 3))]
    for (P, Q), (label, wins, liked, every) in zip(pairs, result.reasons):
        x = Q.argmax(axis=1)
        one_hot_keeps = P[np.arange(6), x]  # the one-hot rule keeps the argmax with chance p(x)
        beats = one_hot_keeps > np.minimum(P, Q).sum(axis=1) + 1e-12
        like = P[np.arange(6), x] > Q[np.arange(6), x]
        assert wins == int(beats.sum()) and liked == int(like.sum())
        assert every == bool((beats <= like).all())  # every win is a liked context, not the reverse
    counts = [wins for _, wins, _, _ in result.reasons]
    assert counts == [0, 0, 0, 3]  # all three wins are in the last pair, and the chapter says so
    liked = [n for _, _, n, _ in result.reasons]
    assert sum(liked) == 13 > sum(counts)  # the condition is needed, not enough: it holds where one-hot still loses
    assert ("in 3 of the 24 cases (4 pairs, 6 contexts each, a context being the token before the draft), all in 'p at"
            " T=0.3, q at T=3'. Probabilistic accepts with chance the sum over all tokens y of min(p(y), q(y)) (demo"
            " 1). Where p(x) <= q(x) at the draft's argmax x, one-hot's chance p(x) = min(p(x), q(x)) is one term of"
            " that sum, so probabilistic accepts at least as often. So one-hot can win only where p(x) > q(x). The"
            " condition p(x) > q(x) holds in 13 of the 24, yet one-hot wins in only 3: it is needed, not enough."
            in result.cases)  # the detail's (read 1515 spent 1.5 minutes on counts it could not check)
    # with the criterion, by hand above (one-hot keeps p(x), probabilistic sum min(p, q)), and where it holds: read
    # 1569 worked it out for a minute when only --detail gave it; read 1586 found a ratio p/q above 1 no criterion
    assert ("One-hot keeps x with chance p(x), probabilistic with sum min(p, q) (demo 1), so one-hot wins where p(x) is"
            " the larger. One-hot wins only on 'p at T=0.3, q at T=3', a sharpened p against a flattened q. Tempering"
            " keeps each row's order, so there the draft's argmax is p's likeliest token; --detail counts the contexts"
            " where it wins." in " ".join(section(in_process[1], "9").split())) and \
        "of the 24 cases" not in section(in_process[1], "9")
    # the reason, by hand: where q(x) >= p(x) at the argmax x, min(p, q) at x alone is p(x), what one-hot keeps
    for P, Q in pairs:
        x = Q.argmax(axis=1)
        not_liked = P[np.arange(6), x] <= Q[np.arange(6), x]
        assert (np.minimum(P, Q).sum(axis=1)[not_liked] >= P[np.arange(6), x][not_liked] - 1e-12).all()
    # with the acceptance rule broken, one-hot wins where the rule could not, and the chapter says so
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sd.bugged("argmax").demo9_verifiers()
    text = " ".join(out.getvalue().split())
    assert ("It wins also where p(x) <= q(x) at the draft's argmax x, which min(1, p/q) cannot do: the acceptance rule"
            " as you have it is suspect.") in text and "needed, not enough" not in text
    # with the ratio squared, one-hot still wins only where p(x) > q(x), but the reason (probabilistic keeps sum
    # min(p, q)) no longer holds, so it is not given
    squared = {"squared": [("accept_prob", "return min(1.0, float(p[x] / q[x]))",
                            "return min(1.0, float(p[x] / q[x]) ** 2)")]}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bent = sd.bugged("squared", squared).demo9_verifiers()
    text = " ".join(out.getvalue().split())
    assert "One-hot accepts more than probabilistic in 2 of the 24 cases" in bent.cases
    assert "Probabilistic accepts with chance" not in bent.cases and "It wins also where" not in text
    # there one-hot wins in 2 contexts of the tempered pair but loses the pair (1.61 against 2.05): the sentence says
    # contexts, where 'beats probabilistic only on' the pair read as the pair's tokens per call
    row = next(r for r in bent.pairs if r[0] == "p at T=0.3, q at T=3")
    assert row[2] < row[1] and "One-hot beats probabilistic only on 'p at T=0.3, q at T=3', in 2 of its 6 contexts." in text


def test_demo1_prints_the_chance_of_a_rejection_not_of_a_keep(in_process):
    text = " ".join(in_process[1].split())
    beta = float(np.minimum(sd.TARGET[0], sd.MIDDLING[0]).sum())
    assert f"rejected with chance 1 - sum min(p, q) = {1 - beta:.3f}" in text and 1 - beta != beta


# --- bad input, and the edit machinery -------------------------------------------------------------------------

def test_accept_prob_refuses_the_id_v():
    p = q = np.full(6, 1 / 6)
    for x in (6, 7, -1):
        with pytest.raises(ValueError, match=f"drafted token {x} is not a token id in 0..5"):
            sd.accept_prob(p, q, x)


def test_forward_names_the_position_past_a_kv_cache():
    with pytest.raises(ValueError, match=r"position 3 of the pass \(0: the text's last token\) holds 9"):
        sd.forward(sd.TARGET, [0], [1, 2, 9], cached=3)
    with pytest.raises(ValueError, match=r"position 2 of the pass .* holds 9"):
        sd.forward(sd.TARGET, [0], [1, 9, 2], cached=2)


def test_edited_matches_whole_lines_only_and_refuses_a_line_found_twice():
    with pytest.raises(LookupError, match="has 0 lines that read 'return d / total'"):
        sd.edited((("residual", "return d / total", "return p"),))  # a substring of a line is no line
    with pytest.raises(LookupError, match=r"demo1_rule_by_hand\(\) has \d+ lines that read 'print\(\)', not exactly one"):
        sd.edited((("demo1_rule_by_hand", "print()", "pass"),))


def test_sglangs_tiers_step_up_only_above_the_threshold():
    policy = sd.tiered_policy(tiers=(1, 3, 5), window=2)
    state = (1, (3,))  # tier 3, the last round accepted 3
    assert policy.step(state, 2)[0] == 1  # the average is 2.5 = 3 - 0.5: no step up (SGLang's strict >)
    assert policy.step(state, 3)[0] == 2  # 3 > 2.5: up


def test_the_strict_note_numbers_drafts_from_one(capsys):
    for seed in range(6):
        sd.trace(3, seed=seed, rule="strict")
        out = " ".join(capsys.readouterr().out.split())
        found = re.findall(r"draft (\d+) was drawn with q =", out)
        if found:
            assert min(map(int, found)) >= 1 and all(int(n) <= 4 for n in found)
            return
    pytest.skip("no strict rejection in these seeds")
