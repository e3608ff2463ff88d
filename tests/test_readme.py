"""The README shows real output: every block that starts with a command the
script runs in a moment is exactly what that command prints now, every
excerpt of the run (a ```text block with no wall-clock line) is in the run,
and the debugger session is what pdb answers to the same commands."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import speculative_decoding_from_scratch as sd

SCRIPT = Path(sd.__file__).resolve()
README = (SCRIPT.parent / "README.md").read_text()
BLOCKS = re.findall(r"```\n\$ python3 speculative_decoding_from_scratch\.py ([^\n]*)\n(.*?)```", README, re.S)
EXCERPTS = [b for b in re.findall(r"```text\n(.*?)```", README, re.S) if "(clock)" not in b]


def test_the_readme_shows_commands_and_excerpts():
    assert len(BLOCKS) >= 4 and len(EXCERPTS) >= 4


@pytest.mark.parametrize("args, shown", BLOCKS, ids=[args.replace(" ", "_") for args, _ in BLOCKS])
def test_each_shown_output_is_what_the_command_prints(capsys, args, shown):
    sd.main(args.split())
    assert capsys.readouterr().out.strip() == shown.strip()


@pytest.mark.parametrize("excerpt", EXCERPTS, ids=[" ".join(e.split()[:4]).replace(" ", "_") for e in EXCERPTS])
def test_each_excerpt_is_in_the_full_run(full_run, all_run, excerpt):
    assert excerpt.strip("\n") in full_run + all_run


def test_the_two_commands_come_first_and_set_up_a_virtual_environment():
    first = re.search(r"```\n(.*?)```", README, re.S)[1].splitlines()
    assert first == ["python3 -m venv .venv && .venv/bin/pip install numpy && "
                     ".venv/bin/python speculative_decoding_from_scratch.py",
                     "python3 -m venv .venv && .venv/bin/pip install numpy pytest && .venv/bin/python -m pytest"]


SESSION = re.search(r"```\n\$ python3 -m pdb speculative_decoding_from_scratch\.py (\d+)\n(.*?)```", README, re.S)


def digits(text):
    """Floats to 9 significant digits: the session's reprs carry rounding-level digits."""
    return re.sub(r"\d\.\d{9,}", lambda m: f"{float(m[0]):.9g}", text)


@pytest.mark.skipif(int(np.__version__.split(".")[0]) < 2, reason="the session shows numpy 2's reprs")
def test_the_debugger_session_is_what_pdb_answers_and_q_ends_the_run():
    demos, session = SESSION[1], SESSION[2]
    commands = re.findall(r"^\(Pdb\) (.*)$", session, re.M)
    out = subprocess.run([sys.executable, "-m", "pdb", str(SCRIPT), demos], input="\n".join(commands) + "\n",
                         capture_output=True, text=True, timeout=60, cwd=SCRIPT.parent).stdout
    answers = out.replace(str(SCRIPT), ".../" + SCRIPT.name).split("(Pdb) ")[1:]  # piped, pdb echoes no command
    shown = re.split(r"^\(Pdb\) .*\n", session, flags=re.M)[1:]
    assert len(answers) == len(shown) == len(commands)
    for command, answer, said in zip(commands, answers, shown):
        if said.startswith("... "):  # the run's own output, shortened
            said, answer = said.split("\n", 1)[1], answer[-len(said.split("\n", 1)[1]):]
        assert digits(answer) == digits(said), command
    assert "Takeaway" not in out  # q quit the debugger and ended the run


def test_every_readme_section_the_run_points_to_is_there(all_run):
    # "(README: Tuning a server)" and the like, in the run and in --help, each name a section heading of the README
    pointed = set(re.findall(r"\(README: ([^)]+)\)", " ".join((all_run + SCRIPT.read_text()).split())))
    headings = set(re.findall(r"^## (.+)$", README, re.M))
    assert "Tuning a server" in pointed and pointed <= headings, pointed - headings


def test_the_readme_lists_every_demo_and_chapter_with_a_detail_view():
    said = " ".join(re.search(r"With `--detail`, (.*?) add detail", README, re.S)[1].split())
    demos, chapters = re.fullmatch(r"demos ([\d, and]+) and chapters ([\d, and]+)", said).groups()
    listed = [n for part in (demos, chapters) for n in re.findall(r"\d+", part)]
    assert listed == list(sd.DETAILS)
    assert all(n in sd.LESSON for n in re.findall(r"\d+", demos)) and all(n in sd.CHAPTERS for n in re.findall(
        r"\d+", chapters))
