"""The README shows real output: every block that starts with a command the
script runs in a moment must be exactly what that command prints now."""
import re
from pathlib import Path

import pytest

import speculative_decoding_from_scratch as sd

README = (Path(sd.__file__).parent / "README.md").read_text()
BLOCKS = re.findall(r"```\n\$ python3 speculative_decoding_from_scratch\.py ([^\n]*)\n(.*?)```",
                    README, re.S)


def test_the_readme_shows_commands_with_their_output():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("args, shown", BLOCKS, ids=[args for args, _ in BLOCKS])
def test_each_shown_output_is_what_the_command_prints(capsys, args, shown):
    assert sd.main(args.split()) == 0
    assert capsys.readouterr().out.strip() == shown.strip()
