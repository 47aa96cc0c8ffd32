"""Installed, the code is one package, ``agentlog`` (issue 13): the repository keeps its
top-level folders, a fresh ``pip install -e .`` imports them as ``agentlog.*``, the
generic folder names are not importable, and the console script works."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"agentlog": "agentlog", "agentlog.schemas": "schemas", "agentlog.processors": "processors",
           "agentlog.sinks": "sinks", "agentlog.streams": "streams", "agentlog.bench": "bench"}  # fmt: skip


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_folder_with_code_is_an_installed_package() -> None:
    config = _config()
    assert config["package-dir"] == FOLDERS
    expected = set()
    for package, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            expected.add(".".join((package, *init.parent.relative_to(ROOT / folder).parts)))
        stray = [p for p in (ROOT / folder).rglob("*.py") if not (p.parent / "__init__.py").exists()]
        assert stray == [], f"modules outside any package: {stray}"
    assert len(expected) > 8
    assert set(config["packages"]) == expected


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with this checkout installed editable; the dependencies come from the
    running environment's site-packages (a .pth line), so nothing is downloaded but the
    build backend."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    # Appended after the venv's own folder, so the editable install below is found first.
    (Path(site) / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(ROOT)],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_after_an_editable_install_import_agentlog_works(fresh_venv: Path, tmp_path: Path) -> None:
    probe = "import agentlog, agentlog.streams.cli.main as m; print(agentlog.__version__, m.__file__)"
    done = _run(fresh_venv, str(fresh_venv / "bin" / "python"), "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    version, path = done.stdout.split()
    assert version == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert Path(path) == ROOT / "streams" / "cli" / "main.py"  # editable: the checkout's own file


@pytest.mark.parametrize("name", ["streams", "schemas", "processors", "sinks"])
def test_the_generic_folder_names_are_not_importable(fresh_venv: Path, tmp_path: Path, name: str) -> None:
    python = str(fresh_venv / "bin" / "python")
    elsewhere = _run(fresh_venv, python, "-c", f"import {name}", cwd=tmp_path)
    assert elsewhere.returncode != 0 and f"No module named '{name}'" in elsewhere.stderr
    # From the checkout's root the folder is on the path; importing it says what to do instead.
    at_root = _run(fresh_venv, python, "-c", f"import {name}", cwd=ROOT)
    assert at_root.returncode != 0 and f"import `agentlog.{name}`" in at_root.stderr


def test_the_console_script_and_python_m_agentlog_work(fresh_venv: Path, tmp_path: Path) -> None:
    for command in ([str(fresh_venv / "bin" / "agentlog"), "--help"],
                    [str(fresh_venv / "bin" / "python"), "-m", "agentlog", "--help"]):  # fmt: skip
        done = _run(fresh_venv, *command, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "usage: agentlog" in done.stdout and "publish" in done.stdout
