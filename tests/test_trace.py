"""--trace: real rounds read off the verifier's own calls, under every rule,
every README edit and on real text, in output that grows with the rounds and
ends in a summary. Each column is checked against the round it describes."""
import re

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd
from test_break_it import EDITS

# the README edits as sd.edited takes them: (function, the line, the new line)
IN_MEMORY = {"residual returns p": "residual", "accept_prob q/p": "accept_prob", "no bonus token": "verify_round",
             "residual(q, p) in verify_round": "verify_round", "bonus from p": "verify_round"}


def edit(name):
    return sd.edited(((IN_MEMORY[name], *EDITS[name]),))


def traced(capsys, module=sd, **kwargs):
    module.trace(**kwargs)
    return capsys.readouterr().out


def emitted_tokens(out, spell=sd.TOKENS):
    """Every token the 'emits:' lines show, marks stripped."""
    lines = [line.split("emits:")[1] for line in out.splitlines() if "emits:" in line]
    glyphs = [g for line in lines for g in re.sub(r"[\[\]{}]", "", line.split("  (the round")[0]).split()]
    return [sd.TOKENS.index(g) for g in glyphs] if spell == sd.TOKENS else glyphs


def generated(module, rule, n_tokens, seed, k=4, weight=sd.MIDDLING_WEIGHT):
    """What the generator emits for a rule and seed: the trace must show the same."""
    Q = sd.blend(sd.TARGET, sd.UNRELATED, weight)
    if rule in sd.LOSSY:  # chapters 18 and 22's rules: drafts sampled, or the draft's argmax
        _, make, drafts = sd.LOSSY[rule]
        D = Q if drafts == "sampled" else sd.temper(Q, 0)
        return sd.spec_generate(sd.TARGET, D, [0], n_tokens, k, np.random.default_rng(seed),
                                sd.lossy_verifier(make()))[0]
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


@pytest.mark.parametrize("name", IN_MEMORY)
def test_the_trace_agrees_with_its_rounds_under_every_readme_edit(capsys, name):
    module = edit(name)
    out = traced(capsys, module, n_rounds=8, seed=0)
    assert "the round returned" not in out
    assert emitted_tokens(out) == generated(module, "probabilistic", len(emitted_tokens(out)), seed=0)


def test_every_column_is_the_round_it_describes(capsys):
    # the same seed, the round rebuilt by hand from draft_tokens and the uniforms
    out = traced(capsys, n_rounds=1, seed=4)
    rng = np.random.default_rng(4)
    drafted, q_rows = sd.draft_tokens(sd.MIDDLING, [0], 4, rng)
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+[a-f]\s+[a-f]\s", line)]
    contexts = [0, *drafted]
    for i, row in enumerate(rows):
        c, x, p = contexts[i], drafted[i], sd.TARGET[contexts[i]]
        u = rng.random()
        assert row[:2] == [sd.name(c), sd.name(x)]
        assert [float(v) for v in row[2:7]] == pytest.approx([q_rows[i][x], q_rows[i][x], p[x],
                                                              sd.accept_prob(p, q_rows[i], x), u], abs=5e-4)
        assert row[7] == ("kept" if u < sd.accept_prob(p, q_rows[i], x) else "rejected")
        if row[7] == "rejected":
            break
    assert len(rows) >= 1


def test_the_trace_names_the_row_a_token_is_really_drawn_from(capsys):
    # with the bonus drawn from the last draft's row instead of the row after it,
    # the trace must name that row, not claim the bonus row
    out = " ".join(traced(capsys, edit("bonus from p"), n_rounds=3, seed=0, rule="probabilistic").split())
    for drafted, rest in re.findall(r"proposes ([a-f ]+)\. (.*?)emits", out):
        if "(the bonus token)" in rest:
            row = re.search(r"(p after '[a-f]'|the residual|a row that is not p)[^;]*; u = [\d.]+ draws '[a-f]' "
                            r"\(the bonus token\)", rest)[1]
            assert row == f"p after '{drafted.split()[-2]}'" or drafted.split()[-2] == drafted.split()[-1]


def test_a_rejection_a_replacement_and_a_bonus(capsys):
    out = " ".join(traced(capsys, seed=0).split())
    assert "rejected" in out and "draws 'f' in its place" in out
    assert "(the bonus token)" in out and "{d}" in out and "[f]" in out


def test_each_printed_column_holds_what_its_header_names(capsys):
    # strict matching hands the verifier a one-hot q: "q seen" is 1 at the
    # drafted token while "q(x)" is the draft's own q(x) < 1
    out = traced(capsys, n_rounds=3, seed=3, rule="strict")
    header = next(line for line in out.splitlines() if line.strip().startswith("after"))
    names = re.split(r"\s{2,}|(?<=\))\s", header.strip())
    assert names[:4] == ["after draft", "q(x)", "q seen", "p(x)"]
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+[a-f]\s+[a-f]\s+\d", line)]
    assert rows and all(float(r[3]) == 1.0 and float(r[2]) < 1.0 for r in rows)


def test_strict_matching_shows_the_draft_the_probabilistic_rule_keeps(capsys):
    out = " ".join(traced(capsys, n_rounds=2, seed=3, rule="strict").split())
    assert "1.000" in out and "the probabilistic rule keeps it with 1.000" in out
    drafted = re.search(r"draft (\d) was drawn with q", out)
    assert drafted and int(drafted[1]) >= 1


def test_block_verification_keeps_up_to_the_last_position_that_passes(capsys):
    out = traced(capsys, n_rounds=6, seed=0, rule="block")
    assert "eta," in " ".join(out.split()) and "tau, the last position" in " ".join(out.split())  # defined first
    for block in out.split("Round ")[1:]:
        verdicts = re.findall(r"(passes|fails)\s*$", block, re.M)
        tau = max((i + 1 for i, v in enumerate(verdicts) if v == "passes"), default=0)
        assert f"up to position {tau} (tau)" in block


def test_a_bug_says_where_its_distribution_shows(capsys):
    out = " ".join(traced(capsys, n_rounds=3, seed=0, rule="no_resample").split())
    assert f"demo 2 tests {sd.DEMO2_RUNS} of them" in out and "'no_resample' bug" in out
    assert "The probabilistic verifier emits the same" in out or "part from these at token" in out


def test_k_and_the_draft_are_the_readers_choice(capsys):
    out = traced(capsys, n_rounds=2, seed=1, k=2, weight=0.0)
    assert "blend weight 0, k = 2" in " ".join(out.split())
    assert all(len(m.split()) == 2 for m in re.findall(r"proposes ([a-f ]+)\.", out))
    assert emitted_tokens(out) == generated(sd, "probabilistic", len(emitted_tokens(out)), seed=1, k=2, weight=0.0)


def test_counts_are_singular_and_plural(capsys):
    out = " ".join(traced(capsys, n_rounds=1, seed=0, k=1).split())
    assert re.search(r"1 round: \d+ tokens? in 1 target call \(", out)
    assert re.search(r"\d of the 1 draft (was|were) kept", out)


def test_the_output_grows_linearly_with_the_rounds(capsys):
    short, long_ = traced(capsys, n_rounds=100), traced(capsys, n_rounds=200)
    assert 1.8 < len(long_) / len(short) < 2.2


def test_the_trace_decodes_real_text_with_prompt_lookup(capsys):
    out = traced(capsys, n_rounds=6, seed=2, k=5, text="summarise")
    flat = " ".join(out.split())
    assert "copying target" in flat and "prompt ends:" in flat and "the text: '" in flat
    # what the rounds emitted is what the generator emits from the same seed
    P, L, prompt = sd.CopyModel(0.9), sd.Lookup(2, 4, len(sd.ALPHABET)), sd.prompts()["summarise"]
    n = int(re.search(r"6 rounds: (\d+) tokens", flat)[1])
    text = sd.spec_generate(P, L, prompt, n, 5, np.random.default_rng(2), draft=sd.lookup_draft)[0]
    assert f"the text: {sd.decode(text)!r}" in out
    assert "q(x)" in out and "1.000  1.000" in out  # prompt lookup's q is one-hot
    assert out.isascii() and max(map(len, out.splitlines())) <= 80


def test_recorded_round_is_the_real_round():
    drafted, q_rows, emitted, calls = sd.recorded_round(sd.TARGET, sd.MIDDLING, [0], 4, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    assert emitted == sd.spec_round(sd.TARGET, sd.MIDDLING, [0], 4, rng)
    names = [name for name, _, _ in calls]
    assert names.count("accept_prob") == min(len(emitted), 4) and names.count("forward") == 1
    assert sd.accept_prob.__name__ == "accept_prob" and sd.forward.__name__ == "forward"  # the stages were put back


def test_marks_glyphs_and_colour():
    assert sd.marked([0, 4, 2, 1], ["kept", "kept", "drawn", "bonus"]) == "a e [c] {b}"
    assert sd.marked([4, 1], ["kept", "bonus"], colour=True) == "\033[32me\033[0m \033[36m{b}\033[0m"
    assert sd.row_text([0.5, 0.0, 0.5], sd.decode_letters) == "a .500  c .500"
    assert [sd.glyph(x, sd.decode) for x in sd.encode(" \na")] == ["sp", "\\n", "a"]


def test_round_lines_reads_everything_off_the_record():
    # a hand-made record: draft 'c' after 'a' rejected (u .9 >= .183), then a
    # residual row [1, 0, 0, 0, 0, 0] drawn with u .4 -> 'a'
    row = np.array([1.0, 0, 0, 0, 0, 0])
    p, q = sd.TARGET[0], sd.MIDDLING[0]
    calls = [("forward", (sd.TARGET, [0], [2, 3]), [p, sd.TARGET[2], sd.TARGET[3]]), ("u", (), 0.9),
             ("accept_prob", (p, q, 2), 0.183), ("residual", (p, q), row), ("u", (), 0.4), ("sample_from", (row, 0.4), 0)]
    rows, lines, produced = sd.round_lines(0, [2, 3], [q, q], calls, sd.decode_letters)
    assert rows[0][-1] == "rejected" and rows[0][5] == 0.183 and rows[0][7] == 0.9 and rows[0][4] == p[2]
    assert lines == ["the residual: a 1.00; u = 0.400 draws 'a' in its place"]
    assert produced == [(0, "drawn")]


def test_the_readme_debugger_session_breaks_on_the_acceptance_test():
    readme = open(sd.__file__.replace("speculative_decoding_from_scratch.py", "README.md")).read()
    line = int(re.search(r"\(Pdb\) b (\d+), text\[-1\] == 5", readme)[1])
    source = open(sd.__file__).read().splitlines()
    assert source[line - 1].strip() == "if u < accept_prob(p, q, x):"
    assert f"({line})verify_round()\n-> if u < accept_prob(p, q, x):" in readme
    assert f"({line + 3})verify_round()\n-> {source[line + 2].strip()}" in readme  # rejected: the residual's line


@pytest.mark.parametrize("weight", [sd.MIDDLING_WEIGHT, 0.9])
def test_a_bug_is_compared_with_the_correct_verifier_on_the_same_draft(capsys, weight):
    raw = traced(capsys, n_rounds=5, seed=1, rule="continue", weight=weight)
    tokens, out = emitted_tokens(raw), " ".join(raw.split())
    correct = generated(sd, "probabilistic", len(tokens), seed=1, weight=weight)
    first = next((i for i, (a, b) in enumerate(zip(tokens, correct)) if a != b), None)
    assert (f"emits the same {len(tokens)} tokens" in out if first is None
            else f"part from these at token {first + 1}." in out)
