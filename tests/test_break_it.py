"""The reader's loop, the reader's way: an edit made in a copy of the script on
disk, exactly as a reader types it, then that copy run in a process of its own
as `python3 speculative_decoding_from_scratch.py N ...` runs it. The README's
"Break it" edits must flip what the README says they flip; a wider family of
one-line edits of the stages must leave every demo they touch running to its
end. The runs go two at a time, started as soon as the tests are collected
(conftest.py), beside the tests in this process."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import re

import pytest

import speculative_decoding_from_scratch as sd
from conftest import NICE

SCRIPT = Path(sd.__file__)
README = (SCRIPT.parent / "README.md").read_text()

# name -> (the line as the script has it, the line the reader types; "" deletes it)
EDITS = {
    "residual returns p": ("return d / total if total > 0 else p", "return p"),
    "accept_prob q/p": ("return min(1.0, float(p[x] / q[x]))", "return min(1.0, float(q[x] / p[x]))"),
    "no bonus token": ("emitted.append(sample_from(p_rows[-1], rng.random()))  # the bonus token", ""),
    "residual(q, p) in verify_round": ("emitted.append(sample_from(residual(p, q), rng.random()))",
                                       "emitted.append(sample_from(residual(q, p), rng.random()))"),
    "bonus from p": ("emitted.append(sample_from(p_rows[-1], rng.random()))  # the bonus token",
                     "emitted.append(sample_from(p, rng.random()))"),
    "unweighted block_residual": ("return residual(weight * p, q)", "return residual(p, q)"),
}

# each README edit: the demos it touches, and what their run must then say
FLIPS = {
    "residual returns p": ("1 2", ["Emitted != p", "The correct rule, as you have it, is NOT the target",
                                   "residual differs from max(0, p - q) normalised",
                                   "Not checked: no_resample (your edit changed a line it edits)"]),
    "accept_prob q/p": ("1 2", ["NOT always", "NOT p/q", "Emitted != p", "accept_prob differs from min(1, p/q)",
                                "The correct rule, as you have it, is NOT the target"]),
    "no bonus token": ("2 3 11", ["The correct rule's first two tokens are the target's by both checks, yet a stage"
                                  " fails its own check. Suspect verify_round: it fails alone.",
                                  "Takeaway withheld. This check failed: every stage passes its own check.",
                                  "NOT every row agrees: blend weight 1.00 measures 4.00 where the exact value is 5.00",
                                  "NOT every draft runs: prompt lookup, vLLM raised ValueError in take(): round"]),
    "residual(q, p) in verify_round": ("2", ["is NOT the target: only the fit catches it",
                                             "Suspect verify_round: it fails alone."]),
    "bonus from p": ("2 11 21", ["yet a stage fails its own check. Suspect verify_round: it fails alone.",
                                 "Takeaway withheld. This check failed: every stage passes its own check.",
                                "NOT every row emits its tempered target",
                                "NOT every draft runs: prompt lookup, vLLM raised UnboundLocalError in verify_round()"]),
    "unweighted block_residual": ("9 15", ["NOT every setting emits the target's distribution: block passes its fit "
                                           "while its exact distribution is off",
                                           "Block verification, as you have it, passes its fit while its exact"
                                           " distribution is off."]),
}

# a wider family: (function, the line it has, the line a reader types, the
# demos to run, what their verdicts must then say, the demos whose takeaway
# must be withheld, and the stages demo 2 must blame, or None where demo 2
# does not blame one). Not every edit is a bug: `<=` differs from `<` only
# when u is exactly p/q, and a draft that reads the wrong row still says which
# row it drew from, so both stay exact; the second still fails forward's own
# check, so demo 2 names forward and withholds its takeaway.
CORRECT = "Takeaway: the loop keeps the target's distribution"
FIT = "is NOT the target: only the fit catches it."
STAGE_EDITS = [
    ("accept_prob", "return min(1.0, float(p[x] / q[x]))", "return 1.0", "1 2 27",  # every draft kept: rates exact
     ["NOT p/q", "is NOT exact", "This check failed: they miss every shorter k"], "1 2 27", {"accept_prob"}),
    ("residual", "d = np.maximum(p - q, 0.0)", "d = np.abs(p - q)", "1 2", ["is NOT exact"], "1 2", {"residual"}),
    ("residual", "return d / total if total > 0 else p", "return p - q", "2",  # negative: sample_from raises
     ["ValueError in sample_from(): cannot sample"], "2", None),
    ("sample_from", "return bisect_right(cdf, u * cdf[-1])", "return bisect_right(cdf, u * u * cdf[-1])", "2",
     [FIT], "2", {"sample_from"}),
    ("sample_from", "return bisect_right(cdf, u * cdf[-1])", "return bisect_right(cdf, u * cdf[-1]) + 1", "2",
     ["The correct rule, as you have it, raised ValueError"], "2", {"sample_from"}),
    ("temper", "return one_hot(table.argmax(axis=-1), table.shape[-1])",
     "return one_hot(table.argmin(axis=-1), table.shape[-1])", "21", ["NOT a plain argmax loop's"], "21", None),
    ("forward", "tokens = new[cached - 1:] if cached else [text[-1], *new]  # the positions computed",
     "tokens = [text[-1], *new]", "2", ["yet a stage fails its own check. Suspect forward: it fails alone"], "2",
     {"forward"}),
    ("forward", "return [model[x] for x in tokens] if isinstance(model, np.ndarray) else model(text, new, cached)",
     "return [model[x] for x in tokens[::-1]] if isinstance(model, np.ndarray) else model(text, new, cached)", "2",
     [FIT], "2", {"forward"}),
    ("draft_tokens", "drafted.append(sample_from(q, rng.random()))", "drafted.append(int(np.argmax(q)))", "2",
     [FIT], "2", {"draft_tokens"}),
    ("draft_tokens", "q_rows.append(q)", "q_rows.append(Q[0])", "2", [FIT], "2", {"draft_tokens"}),
    ("verify_round", "if u < accept_prob(p, q, x):", "if u <= accept_prob(p, q, x):", "2", [CORRECT], "", set()),
    ("verify_round", "emitted.append(sample_from(residual(p, q), rng.random()))",
     "emitted.append(sample_from(residual(q, p), rng.random()))", "2", [FIT], "2", {"verify_round"}),
    ("verify_round", "p_rows = forward(P, text, drafted)  # (k+1, V): the one target call",
     "p_rows = forward(P, text, drafted[1:])", "3", ["NOT every row agrees"], "3", None),
    ("rounds", "text = [*text, *emitted]", "text = [*text, *emitted[:-1]]", "2 3", [FIT, "NOT every row agrees"],
     "2 3", {"rounds", "take"}),
    ("take", "tokens += emitted", "tokens += emitted[:1]", "2", [FIT], "2", {"rounds", "take"}),
    ("verify_tree", "p = residual(p, q_j)  # rejected: take its mass out before the next sibling", "", "33",
     ["NOT every correct tree is consistent"], "33", None),
    ("block_threshold", "return Z / (Z + 1 - weight) if Z > 0 else 0.0", "return weight", "9 15",
     ["NOT every setting emits the target's distribution", "Block verification, as you have it, is NOT the target."],
     "9 15", None),
    ("block_residual", "return residual(weight * p, q)", "return residual(p, q)", "9 15",
     ["block passes its fit while its exact distribution is off"], "9 15", None),
    ("verify_block", "if rng.random() < h:", "if rng.random() > h:", "9",
     ["NOT every setting emits the target's distribution"], "9", None),
]


def blamed(text):
    """The stages the run's sentences name as the cause: 'Suspect X and Y:',
    'X differs from', and 'rounds or take'."""
    names = {n for group in re.findall(r"Suspect ([a-z_]+(?: and [a-z_]+)*):", text) for n in group.split(" and ")}
    names |= set(re.findall(r"\b(accept_prob|residual) differs from", text))
    return names | ({"rounds", "take"} if "suspect how rounds chain: rounds or take" in text else set())


def sections(text):
    """{demo or chapter number: its text}."""
    parts = re.split(r"\n=+\n(?:Demo|Chapter) (\d+)\. ", text)
    return {n: " ".join(body.split()) for n, body in zip(parts[1::2], parts[2::2])}


def edited_copy(tmp_path, old, new, function=None):
    """A copy of the script where the one line that reads `old` (in function,
    if named) now reads `new` (deleted if ""), its indentation kept: the file as
    a reader leaves it."""
    lines = SCRIPT.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}(")) if function else 0
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("def ")), len(lines)) if function \
        else len(lines)
    hits = [i for i in range(start, end) if lines[i].strip() == old]
    assert len(hits) == 1, old
    indent = lines[hits[0]][:len(lines[hits[0]]) - len(lines[hits[0]].lstrip())]
    lines[hits[0]] = indent + new + "\n" if new else ""
    path = tmp_path / SCRIPT.name
    path.write_text("".join(lines))
    return path


# Every run starts the interpreter and imports numpy before it reads a line of the copy: about 0.15 s of the
# 0.3 to 1 s a run takes. A zygote pays that once: a Python process that has imported numpy forks a child for each
# copy, and the child runs the copy as `python3 copy N ...` would: as __main__, with that argv, the copy's folder
# first on sys.path, no stdin, and its stdout and stderr to files; an uncaught exception prints its traceback and
# exits 1, and a copy still running after 120 s is stopped. Each child still compiles and runs its own copy from disk.
ZYGOTE = r"""
import json, os, runpy, signal, sys
import numpy  # noqa: F401  (what the script imports first)
for request in sys.stdin:
    path, out, err, *argv = json.loads(request)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        for fd, name, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            os.dup2(os.open(name, flags), fd)
        sys.argv, sys.path[0], code = [path, *argv], os.path.dirname(path), 0
        signal.alarm(120)  # a copy that hangs is stopped, as a timeout would: SIGALRM ends it
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
            if not isinstance(done.code, (int, type(None))):
                print(done.code, file=sys.stderr)
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:
                pass
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
ZYGOTES = threading.local()  # one to each thread of the pool: each runs one copy at a time
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # one BLAS thread per run: two run beside the tests


def run(path, demos):
    """The copy at path, run on demos as `python3 path demos` runs it: the
    completed process (its return code, stdout and stderr)."""
    if not hasattr(os, "fork"):
        return subprocess.run([*NICE, sys.executable, str(path), *demos.split()], capture_output=True, text=True,
                              timeout=120, env=ENV)
    if not hasattr(ZYGOTES, "process"):
        ZYGOTES.process = subprocess.Popen([*NICE, sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, env=ENV)
        atexit.register(ZYGOTES.process.kill)
    out, err = path.with_name("stdout"), path.with_name("stderr")
    zygote = ZYGOTES.process
    zygote.stdin.write(json.dumps([str(path), str(out), str(err), *demos.split()]) + "\n")
    zygote.stdin.flush()
    code = int(zygote.stdout.readline())
    return subprocess.CompletedProcess([sys.executable, str(path), *demos.split()], code,
                                       out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8"))


RUNS = {}  # "readme" -> {name: future}, "stage" -> [future], "trace" -> future


def start_runs():
    """Every README edit and every STAGE_EDITS edit, each in its own copy of the
    script on disk, run two at a time in the background."""
    if RUNS:
        return
    tmp = Path(tempfile.mkdtemp(prefix="break_it_"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    pool, started = ThreadPoolExecutor(2), {}
    atexit.register(pool.shutdown, cancel_futures=True)

    def one(old, new, demos, function=None):
        """The run of this edit on these demos; an edit both lists hold runs once."""
        if (old, new, demos) not in started:
            (tmp / str(len(started))).mkdir()
            started[old, new, demos] = pool.submit(
                lambda path: run(edited_copy(path, old, new, function), demos), tmp / str(len(started)))
        return started[old, new, demos]
    RUNS["readme"] = {name: one(*EDITS[name], FLIPS[name][0]) for name in EDITS}
    RUNS["stage"] = [one(old, new, demos, function) for function, old, new, demos, *_ in STAGE_EDITS]
    RUNS["trace"] = one(*EDITS["residual returns p"], "--trace 1 --rule no_resample")


@pytest.fixture(scope="module")
def readme_runs():
    """Each README edit, run on disk: name -> the completed process."""
    start_runs()
    return {name: future.result() for name, future in RUNS["readme"].items()}


@pytest.mark.parametrize("name", EDITS)
def test_each_readme_edit_runs_to_the_end_and_flips_what_the_readme_says(readme_runs, name):
    out = readme_runs[name]
    assert out.returncode == 0 and out.stderr == "", out.stderr
    text = " ".join(out.stdout.split())
    found = sections(out.stdout)
    assert sorted(found, key=int) == FLIPS[name][0].split()
    for body in found.values():  # each ends with its takeaway, the takeaway withheld, or where it stopped
        assert (body.count("Takeaway: ") + body.count("Takeaway withheld") + body.count(" stopped: ")) == 1
    for said in FLIPS[name][1]:
        assert said in text, said


@pytest.mark.parametrize("name", EDITS)
def test_every_readme_edit_is_in_the_readme_as_typed(name):
    old, new = EDITS[name]
    assert name in README and (new or old) in README and old.split("  #")[0] in README


@pytest.fixture(scope="module")
def stage_runs():
    """Every edit of STAGE_EDITS, run on disk."""
    start_runs()
    return [future.result() for future in RUNS["stage"]]


@pytest.mark.parametrize("i", range(len(STAGE_EDITS)), ids=[f"{f}:{new or 'deleted'}"[:60].replace(" ", "")
                                                            for f, _, new, *_ in STAGE_EDITS])
def test_any_one_line_edit_runs_to_the_end_and_every_verdict_and_blame_follows_it(stage_runs, i):
    function, old, new, demos, said, withheld, stages = STAGE_EDITS[i]
    out = stage_runs[i]
    text = " ".join(out.stdout.split())
    for sentence in said:
        assert sentence in text, sentence
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    found = sections(out.stdout)
    assert sorted(found, key=int) == demos.split() and "Now break it" in out.stdout
    for n, body in found.items():
        # a takeaway never sits under a check its edit has failed: it is withheld, and says which check
        assert ("Takeaway withheld" in body) == (n in withheld.split()), n
        assert (body.count("Takeaway: ") + body.count("Takeaway withheld") + body.count(" stopped: ")) == 1, n
    if stages is not None:  # demo 2 names the stage the edit broke, and no other
        assert blamed(found["2"]) == stages


@pytest.fixture(scope="module")
def trace_run():
    """The README's first edit, then --trace with the bug whose line it changed."""
    start_runs()
    return RUNS["trace"].result()


def test_a_bug_whose_line_the_reader_changed_says_so_and_the_rest_run(trace_run):
    out = trace_run
    assert out.returncode == 0 and "Its bug is not run: your edit changed a line it edits." in " ".join(
        out.stdout.split())
