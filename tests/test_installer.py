"""requirements/installer.sh: uv gets the indexes pip is configured with (uv reads no pip config),
and falls back to pip when EOR_INSTALLER=pip, without installing anything."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is needed")


def _bash(script: str, env: dict[str, str]) -> str:
    return subprocess.run(["bash", "-c", f"set -euo pipefail; . requirements/installer.sh; {script}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "EOR_"))}
    return {**keep, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path),
            "XDG_CONFIG_DIRS": str(tmp_path / "xdg"), **extra}


def test_pip_config_becomes_uv_options_with_pips_precedence(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = file:///a/simple file:///b/simple\n"
                    "find-links = /from/file\nconstraint = /c.txt\ncert = /ignored.pem\n"
                    "[install]\nconstraint = /install-c.txt\n")
    env = _env(tmp_path, PIP_CONFIG_FILE=str(conf), PIP_FIND_LINKS="/from/env")
    words = _bash(f"uv_args_from_pip {sys.executable}", env).split()
    pairs = list(zip(words[::2], words[1::2]))
    assert ("--find-links", "/from/env") in pairs and ("--find-links", "/from/file") not in pairs
    assert [v for f, v in pairs if f == "--extra-index-url"] == ["file:///a/simple", "file:///b/simple"]
    assert [v for f, v in pairs if f == "--constraint"] == ["/install-c.txt"]
    assert "/ignored.pem" not in words


def test_eor_installer_pip_uses_pip_and_says_so(tmp_path):
    venv = tmp_path / "venv"
    env = _env(tmp_path, EOR_INSTALLER="pip")
    out = _bash(f'installer_for {venv}; echo "$installer_note"; echo "${{pkg_install[*]}}"', env)
    note, command = out.splitlines()
    assert note == "pip: EOR_INSTALLER=pip"
    assert command.startswith(f"{venv}/bin/python -m pip") and command.endswith(" install")
