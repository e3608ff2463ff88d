"""Make the single-file script importable from tests/, and start the one full
run of it that test_demos.py reads as soon as the session starts: the run is
a subprocess, so it uses the second core while the other tests run here."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "speculative_decoding_from_scratch.py"


def pytest_configure(config):
    # one BLAS thread: demo 6's products then leave the other core to the tests
    # (no test reads a wall-clock figure)
    config.full_run = subprocess.Popen([sys.executable, str(SCRIPT)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True,
                                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})


def pytest_unconfigure(config):
    config.full_run.kill()  # a no-op once it has finished


@pytest.fixture(scope="session")
def full_run(pytestconfig):
    """What `python3 speculative_decoding_from_scratch.py` prints."""
    out, err = pytestconfig.full_run.communicate(timeout=120)
    assert pytestconfig.full_run.returncode == 0, err
    return out
