"""Make the single-file script importable from tests/, and start, as soon as the
session starts, three runs that tests read:
- the default run (the lesson), as a reader types it;
- the chapters that call np.exp (EXP_CALLERS);
- every demo and chapter through the run's own loop, in a forked copy of this
  process, which hands back what each returned beside what it printed, and how
  often each called np.exp.
The first two move every np.exp result by one unit in the last place, as
another libm or SIMD path would round it; the third does not, and the tests
compare their text: nothing printed may depend on rounding. A chapter that
never calls np.exp would print the same text either way, so it is not run
twice. All three use the second core while the other tests run here, and the
tests that wait on them run last."""
import gc
import os

# The cyclic garbage collector is off until collection ends. Collecting
# rewrites some 1,800 asserts, and the tests' 94,000 syntax-tree nodes become
# 520,000; the collector's passes over them took collection here from 1.9 s to
# 3.0 s and more. The fork below inherits it off: it lives for one run of the
# demos, and what it leaves in cycles dies with it.
gc.disable()

# One BLAS thread in this process too, set before numpy loads: the reader's
# edits run in subprocesses started from worker threads while tests here use
# numpy, and a fork while OpenBLAS's own threads work can hang them (Python 3.9
# forks; later versions mostly do not).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import pickle  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "speculative_decoding_from_scratch.py"
import speculative_decoding_from_scratch as sd  # noqa: E402

# the chapters whose runs call np.exp, the function the one-ulp run moves (a test checks this list against the
# fork's count of calls); chapter 13 is left out, as it prints this machine's clock
EXP_CALLERS = ["7", "9", "21", "22", "28"]
ONE_ULP = """
import runpy, sys
import numpy as np
exp = np.exp
np.exp = lambda x, *a, **k: np.nextafter(exp(x, *a, **k), np.inf)  # every exp one ulp up
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


LESSON = list(sd.LESSON)  # the demos of the default run


# background subprocesses yield the CPU to this process, which runs the other
# tests. (`nice`, not preexec_fn: a fork while this process's BLAS threads work
# can hang them.)
NICE = ["nice", "-n", "10"] if shutil.which("nice") else []


def pytest_configure(config):
    # one BLAS thread: demo 6's products then leave the other core to the tests
    # (no test reads a wall-clock figure)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    config.full_runs = {
        name: subprocess.Popen([*NICE, sys.executable, *args, str(SCRIPT), *after], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        for name, args, after in (("lesson", ["-c", ONE_ULP], []), ("chapters", ["-c", ONE_ULP], EXP_CALLERS))}
    config.demo_fork = fork_every_demo()  # before pytest starts a thread, and before any test changes sd
    # the reader's edits are the longest background work: start them now, not after collection, when this
    # session is going to collect them
    break_it = Path(__file__).with_name("test_break_it.py").resolve()
    if any(break_it.is_relative_to(Path(a.split("::")[0]).resolve()) for a in config.args):
        import test_break_it
        test_break_it.start_runs()


WAITS_ON_A_SUBPROCESS = {"full_run", "full_run_one_ulp", "readme_runs", "stage_runs", "trace_run", "in_process"}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: bool(WAITS_ON_A_SUBPROCESS & set(getattr(item, "fixturenames", ()))))


def pytest_collection_finish(session):
    # what lasts the session (the modules, their tables, the collected tests) is moved out of the collector's
    # passes, and the collector runs again for what the tests make
    gc.freeze()
    gc.enable()
    # modules with subprocesses of their own start them now, beside the full runs
    for module in {item.module for item in session.items if hasattr(getattr(item, "module", None), "start_runs")}:
        module.start_runs()


def pytest_unconfigure(config):
    for run in config.full_runs.values():
        run.kill()  # a no-op once it has finished
    if config.demo_fork and os.path.exists(config.demo_fork[1]):  # no test asked for it: stop it, and its file
        pid, path = config.demo_fork
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.remove(path)


def finished(config, name):
    run = config.full_runs[name]
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    return out


@pytest.fixture(scope="session")
def full_run(pytestconfig):
    """What `python3 speculative_decoding_from_scratch.py` prints, every np.exp
    one ulp up."""
    return finished(pytestconfig, "lesson")


def every_demo():
    """Every demo and chapter, run once through the run's own loop as `1 2 3 4
    5 6 all` runs them, chapter 13 on a 256 x 256 W and a clock that always
    says 1 ms: (n -> what it returned, what the run printed, n -> how many
    times it called np.exp)."""
    import collections
    import contextlib
    import io

    import numpy as np
    results, calls, saved, clocked, exp = {}, collections.Counter(), dict(sd.DEMOS), sd.clocked, np.exp

    def recorded(n, f):
        def run():
            def counted(*args, **kwargs):
                calls[n] += 1
                return exp(*args, **kwargs)
            np.exp = counted
            try:
                results[n] = f(size=256) if n in ("13", "36") else f()
            finally:
                np.exp = exp
            return results[n]
        return run
    sd.DEMOS.update({n: (title, recorded(n, f)) for n, (title, f) in saved.items()})
    sd.clocked, out = (lambda f: (1e-3, f())), io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            sd.run_demos([*LESSON, "all"])
    finally:
        sd.DEMOS.update(saved)
        sd.clocked = clocked
    return results, out.getvalue(), dict(calls)


def every_detail(results):
    """What each chapter's --detail returns and prints after the run's own
    result (n -> (returned, printed)), but chapters 13 and 36's, which read
    the clock."""
    import contextlib
    import io
    answer = {}
    for n, detail in sd.DETAILS.items():
        if n not in ("13", "36"):
            with contextlib.redirect_stdout(out := io.StringIO()):
                returned = detail(results[n])
            answer[n] = returned, out.getvalue()
    return answer


def demos_and_details():
    """every_demo(), and every_detail() run on a copy of its results, so they
    stay as the demos left them."""
    answer = every_demo()
    return (*answer, every_detail(pickle.loads(pickle.dumps(answer[0]))))


def fork_every_demo():
    """demos_and_details() in a forked copy of this process, started before any test
    runs, so it uses the second core while tests run here: (its pid, the file
    its pickled answer or its traceback goes to). None where there is no fork."""
    if not hasattr(os, "fork"):
        return None
    import tempfile
    fd, path = tempfile.mkstemp(suffix=".pickle")
    os.close(fd)
    pid = os.fork()
    if pid:
        return pid, path
    code = 1
    try:  # the child: the demos, then out without running the parent's exit handlers
        os.nice(10)
        answer = demos_and_details()
        with open(path, "wb") as f:
            pickle.dump(answer, f)
        code = 0
    except BaseException:
        with open(path, "w") as f:
            traceback.print_exc(file=f)
    finally:
        os._exit(code)


@pytest.fixture(scope="session")
def in_process(pytestconfig):
    """demos_and_details(), from the forked copy (or run here, where there is
    no fork)."""
    if pytestconfig.demo_fork is None:
        return demos_and_details()
    pid, path = pytestconfig.demo_fork
    _, status = os.waitpid(pid, 0)
    try:
        with open(path, "rb") as f:
            assert status == 0, f.read().decode()
            return pickle.load(f)
    finally:
        os.remove(path)


@pytest.fixture(scope="session")
def details(in_process):
    """n -> (what chapter n's --detail returned after the run's own result,
    what it printed, as one line), from every_detail()."""
    return {n: (returned, " ".join(out.split())) for n, (returned, out) in in_process[3].items()}


@pytest.fixture(scope="session")
def all_run(in_process):
    """What the run prints for every demo and chapter (the lesson's, and `all`'s)."""
    return in_process[1]


@pytest.fixture(scope="session")
def full_run_one_ulp(pytestconfig):
    """The chapters that call np.exp, with every np.exp result one ulp larger."""
    return finished(pytestconfig, "chapters")
