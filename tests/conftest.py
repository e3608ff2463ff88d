"""Make the single-file script importable from tests/, and start, as soon as the
session starts, the three full runs that tests read: the lesson as a reader
sees it, every chapter (`all`), and both with every np.exp result moved by one
unit in the last place (as another libm or SIMD path would round it). They are subprocesses, so they
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
        for name, args, after in (("plain", [], []), ("all", [], ["all"]),
                                  ("one ulp", ["-c", ONE_ULP], [*LESSON, "all"]))}


WAITS_ON_A_SUBPROCESS = {"full_run", "all_run", "full_run_one_ulp", "readme_runs", "stage_runs"}


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
    """What `python3 speculative_decoding_from_scratch.py` prints."""
    return finished(pytestconfig, "plain")


@pytest.fixture(scope="session")
def all_run(pytestconfig):
    """What `python3 speculative_decoding_from_scratch.py all` prints: every chapter."""
    return finished(pytestconfig, "all")


@pytest.fixture(scope="session")
def full_run_one_ulp(pytestconfig):
    """The lesson and every chapter, with every np.exp result one ulp larger."""
    return finished(pytestconfig, "one ulp")
