"""The README shows real output: every block that starts with a command the
script runs in a moment is exactly what that command prints now, and every
excerpt of the run (a ```text block with no wall-clock line) is in the run."""
import re
from pathlib import Path

import pytest

import speculative_decoding_from_scratch as sd

README = (Path(sd.__file__).parent / "README.md").read_text()
BLOCKS = re.findall(r"```\n\$ python3 speculative_decoding_from_scratch\.py ([^\n]*)\n(.*?)```", README, re.S)
EXCERPTS = [b for b in re.findall(r"```text\n(.*?)```", README, re.S) if "(clock)" not in b]


def test_the_readme_shows_commands_and_excerpts():
    assert len(BLOCKS) >= 4 and len(EXCERPTS) >= 5


@pytest.mark.parametrize("args, shown", BLOCKS, ids=[args for args, _ in BLOCKS])
def test_each_shown_output_is_what_the_command_prints(capsys, args, shown):
    sd.main(args.split())
    assert capsys.readouterr().out.strip() == shown.strip()


@pytest.mark.parametrize("excerpt", EXCERPTS, ids=[e.split("\n")[0].strip()[:30] for e in EXCERPTS])
def test_each_excerpt_is_in_the_full_run(full_run, excerpt):
    assert excerpt.strip("\n") in full_run


def test_the_two_commands_come_first_and_set_up_a_virtual_environment():
    first = re.search(r"```\n(.*?)```", README, re.S)[1].splitlines()
    assert first == ["python3 -m venv .venv && .venv/bin/pip install numpy && "
                     ".venv/bin/python speculative_decoding_from_scratch.py",
                     "python3 -m venv .venv && .venv/bin/pip install numpy pytest && .venv/bin/python -m pytest"]
