"""The README's board lines run as written (issue 40: its `speak` line lacked the `--speaker` a
custom-voice model needs): every `rkspeech` line of the "On the board" block parses with the CLI's
own parser, and the `speak` line names a speaker that custom-voice models have."""

from __future__ import annotations

import re
import shlex

from rkfixtures import REPO


def _board_lines() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text.split("## On the board", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = []
    for line in block.splitlines():
        line = line.split("  #", 1)[0].strip()
        m = re.match(r"(?:sudo )?\.venv/bin/rkspeech (.*)", line)
        if m and "..." not in m.group(1):
            lines.append(shlex.split(m.group(1)))
    return lines


def test_every_board_line_parses_and_speak_names_a_speaker():
    from rkspeech.cli import build_parser
    from rkspeech.models.qwen3_tts.synthetic_tts import _SPEAKERS

    lines = _board_lines()
    assert [argv[0] for argv in lines][:4] == ["doctor", "check-board", "voices", "speak"]
    parser = build_parser()
    for argv in lines:
        args = parser.parse_args(argv)
        if argv[0] == "speak":
            assert args.speaker and args.speaker.lower() in _SPEAKERS, argv
