"""Make the single-file script importable from tests/, and start the one full
run of it that test_demos.py reads as soon as the session starts: the run is
a subprocess, so it uses the second core while the other tests run here."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = ROOT / "speculative_decoding_from_scratch.py"


def pytest_configure(config):
    config.full_run = subprocess.Popen([sys.executable, str(SCRIPT)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)


def pytest_unconfigure(config):
    config.full_run.kill()  # a no-op once it has finished


@pytest.fixture(scope="session")
def full_run(pytestconfig):
    """What `python3 speculative_decoding_from_scratch.py` prints."""
    out, err = pytestconfig.full_run.communicate(timeout=120)
    assert pytestconfig.full_run.returncode == 0, err
    return out
