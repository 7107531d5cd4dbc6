"""`make install` on a fresh clone: what it prints is what a newcomer reads first."""

import os
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.launches
def test_the_editable_install_prints_no_warning_box(tmp_path):
    # The Makefile's own install line, as make would run it, into an empty environment of its own
    # (the suite's .venv stays as it is for the tests beside this one) and without the dependencies:
    # what is checked is the build of ddpbench itself, where setuptools boxes its notice.
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    planned = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, check=True)
    line = next(line for line in planned.stdout.splitlines() if " -e " in line)
    command = shlex.split(line)
    environment = dict(os.environ)
    while "=" in command[0]:  # the line's own VAR=value prefixes
        name, _, value = command.pop(0).partition("=")
        environment[name] = value
    command[1:1] = ["--python", str(tmp_path / "env" / "bin" / "python")]
    command.append("--no-deps")
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "*****" not in printed and "Editable installation" not in printed, printed
