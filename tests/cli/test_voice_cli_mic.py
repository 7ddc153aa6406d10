"""``blink voice --mic`` on a machine without a microphone (CI, this one): one line, exit code 2."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from blink.cli.main import app as cli_app


def test_mic_without_an_input_device_is_one_line_and_exit_code_2() -> None:
    # The real command in a fresh process: sounddevice, PortAudio and ALSA all load for real, and
    # their chatter (ALSA prints its probing of absent cards to fd 2) must not reach the user.
    # Port 9 (discard) on loopback: nothing may be contacted before the microphone is checked.
    proc = subprocess.run([sys.executable, "-m", "blink.cli", "voice", "--mic", "--url", "ws://127.0.0.1:9/v1/voice"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: ") and ("microphone" in lines[0] or "PortAudio" in lines[0]
                                               or "sounddevice" in lines[0]), lines[0]
    assert proc.stdout == ""


def test_mic_and_a_wav_file_together_are_refused() -> None:
    result = CliRunner().invoke(cli_app, ["voice", "--mic", "some.wav"])
    assert result.exit_code == 2 and "one of them" in result.output
