"""Make the single-file script importable from tests/, and start, as soon as the
session starts, the two full runs that tests read: the default run (the lesson)
as a reader types it, and every chapter but 13, which measures this machine's
clock and so prints what no two runs share. Both run with every np.exp
result moved by one unit in the last place, as another libm or SIMD path would
round it. Every demo and chapter also runs once in this process, through the
run's own loop, so tests read what each returned beside what it printed, and
compare its text with the two runs': nothing printed may depend on rounding. They are subprocesses, so they
use the second core while the other tests run here. The tests that wait on a
subprocess run last, so this process has work to do while they finish."""
import os

# One BLAS thread in this process too, set before numpy loads: the reader's
# edits run in subprocesses started from worker threads while tests here use
# numpy, and a fork while OpenBLAS's own threads work can hang them (Python 3.9
# forks; later versions mostly do not).
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "speculative_decoding_from_scratch.py"
import speculative_decoding_from_scratch as sd  # noqa: E402

UNCLOCKED = [n for n in sd.CHAPTERS if n != "13"]  # the chapters whose every line is computed
ONE_ULP = """
import runpy, sys
import numpy as np
exp = np.exp
np.exp = lambda x, *a, **k: np.nextafter(exp(x, *a, **k), np.inf)  # every exp one ulp up
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


LESSON = ["1", "2", "3", "4", "5", "6"]  # the demos of the default run


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
        for name, args, after in (("lesson", ["-c", ONE_ULP], []), ("chapters", ["-c", ONE_ULP], UNCLOCKED))}


WAITS_ON_A_SUBPROCESS = {"full_run", "full_run_one_ulp", "readme_runs", "stage_runs"}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: bool(WAITS_ON_A_SUBPROCESS & set(getattr(item, "fixturenames", ()))))


def pytest_collection_finish(session):
    # modules with subprocesses of their own start them now, beside the full runs
    for module in {item.module for item in session.items if hasattr(getattr(item, "module", None), "start_runs")}:
        module.start_runs()


def pytest_unconfigure(config):
    for run in config.full_runs.values():
        run.kill()  # a no-op once it has finished


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


@pytest.fixture(scope="session")
def in_process():
    """Every demo and chapter, run once here through the run's own loop as
    `1 2 3 4 5 6 all` runs them, chapter 13 on a 256 x 256 W and a clock
    that always says 1 ms: (n -> what it returned, what the run printed)."""
    import contextlib
    import io

    import speculative_decoding_from_scratch as sd
    results, saved, clocked = {}, dict(sd.DEMOS), sd.clocked

    def recorded(n, f):
        def run():
            results[n] = f(size=256) if n == "13" else f()
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
    return results, out.getvalue()


@pytest.fixture(scope="session")
def all_run(in_process):
    """What the run prints for every demo and chapter (the lesson's, and `all`'s)."""
    return in_process[1]


@pytest.fixture(scope="session")
def full_run_one_ulp(pytestconfig):
    """Every chapter but 13, with every np.exp result one ulp larger."""
    return finished(pytestconfig, "chapters")
