"""``make dist`` and the install lines of the guide, as a user on a fresh machine runs them.

The package index does not know jobrelay, so every install line in the README and docs/
installs it from the checkout or from the wheel ``make dist`` builds. The test builds with
``make dist``, installs the wheel with its ``django`` extra and the lock's versions
(``dist/constraints.txt``) into a fresh virtual environment, and runs what a user runs first:
``jobrelay --version`` and ``import jobrelay.django``. The dependencies come from the package
index pip is configured with (this machine's mirror), never from this checkout's environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
import venv
from pathlib import Path

import pytest

from tests.support.processes import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
WHEEL = f"jobrelay-{VERSION}-py3-none-any.whl"
SLIM_WHEEL = f"jobrelay_client-{VERSION}-py3-none-any.whl"
SDIST = f"jobrelay-{VERSION}.tar.gz"

# Every pip line of the README and docs/, and what proves it: a line added to a guide must be
# added here, with its proof.
INSTALL_LINES = {
    # test_the_built_wheel_installs_with_its_django_extra_into_a_fresh_venv, below.
    "pip install --find-links /path/to/jobrelay/dist -c /path/to/jobrelay/dist/constraints.txt "
    "'jobrelay[django]'": "this test",
    # test_the_slim_clients_wheel_installs_alone_with_the_guides_line, below.
    "pip install --find-links /path/to/jobrelay/dist -c /path/to/jobrelay/dist/constraints.txt "
    "jobrelay-client": "this test",
    # Tried by hand in a fresh venv (pip builds the checkout: a minute, too slow for each run).
    "pip install '/path/to/jobrelay[django]'": "tried by hand",
    # What `make install` runs (the CI installs with it).
    "pip install --require-hashes -r requirements/dev.txt": "make install",
    # containers.md's Django consumer image: the project's own requirements (Django and what
    # its tasks need) into the image's venv, which holds jobrelay already; nothing of jobrelay's.
    "pip install -r /app/requirements.txt": "the user's own requirements",
}


def clean_environment() -> dict[str, str]:
    """This process's environment without its virtual environment, checkout or settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
        and not key.startswith("JOBRELAY_")
    }
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if not part.startswith(str(ROOT))
    )
    return env


def run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=clean_environment(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist`` into a folder of its own."""
    folder = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        ["make", "--no-print-directory", "dist", f"DIST={folder}", f"PYTHON={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    return folder


def test_make_dist_builds_the_wheel_the_sdist_and_the_lock_constraints(dist: Path) -> None:
    assert (dist / WHEEL).is_file() and (dist / SDIST).is_file() and (dist / SLIM_WHEEL).is_file()
    with tarfile.open(dist / SDIST) as sdist:
        names = set(sdist.getnames())
    assert f"jobrelay-{VERSION}/pyproject.toml" in names
    assert f"jobrelay-{VERSION}/services/jobrelay/migrations/env.py" in names
    constraints = (dist / "constraints.txt").read_text().splitlines()
    locked = re.findall(
        r"^([A-Za-z0-9._-]+==\S+)", (ROOT / "requirements/dev.txt").read_text(), re.M
    )
    assert locked and [line.split(" ;")[0] for line in constraints[1:]] == locked
    assert not any("--hash" in line for line in constraints)  # pip refuses hashes there


def test_the_slim_clients_wheel_installs_alone_with_the_guides_line(
    dist: Path, tmp_path: Path
) -> None:
    # tests/integration/test_slim_client.py submits with it; here: the guide's line works.
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = str(environment / "bin" / "python")
    line = ["--find-links", str(dist), "-c", str(dist / "constraints.txt"), "jobrelay-client"]
    installed = run([python, "-m", "pip", "install", "-q", *line], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    imported = run(
        [python, "-c", "import sys, jobrelay_client\nprint(jobrelay_client.Client.__module__)"],
        cwd=tmp_path,
    )
    assert (imported.returncode, imported.stdout.split()) == (0, ["jobrelay_client.sync"])
    assert run([python, "-c", "import jobrelay"], cwd=tmp_path).returncode == 1  # alone


def test_the_built_wheel_installs_with_its_django_extra_into_a_fresh_venv(
    dist: Path, tmp_path: Path
) -> None:
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    # The guide's line, with the paths of this build.
    installed = run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--find-links",
            str(dist),
            "-c",
            str(dist / "constraints.txt"),
            "jobrelay[django]",
        ],
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    version = run([str(environment / "bin" / "jobrelay"), "--version"], cwd=tmp_path)
    assert (version.returncode, version.stdout.strip()) == (0, f"jobrelay {VERSION}")

    imported = run(
        [
            str(python),
            "-c",
            "import django, jobrelay, jobrelay.django\n"
            # the full wheel holds the slim client's package: jobrelay.Client is its class
            "assert jobrelay.Client.__module__ == 'jobrelay_client.sync'\n"
            "print(jobrelay.__file__)\n"
            "print(django.__version__)",
        ],
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    where, django_version = imported.stdout.split()
    assert Path(where).is_relative_to(environment)  # the wheel's, not this checkout's
    locked_django = re.findall(
        r"^django==(\S+) ; python_full_version (<|>=) '3\.12'",
        (dist / "constraints.txt").read_text(),
        re.M,
    )
    wanted = dict((op, pin) for pin, op in locked_django)[
        "<" if sys.version_info < (3, 12) else ">="
    ]
    assert django_version == wanted  # the lock's version, through constraints.txt

    # The statements are package data (db/sql/*.sql): the installed package reads every one.
    printed = run([str(python), "-m", "jobrelay.db.sql", "finish_jobs"], cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "UPDATE jobrelay.jobs j" in printed.stdout and "moved_dependents AS (" in printed.stdout


def test_every_install_line_of_the_guide_is_one_that_is_checked() -> None:
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = {
        (guide.name, " ".join(line.split()))
        for guide in guides
        for line in re.findall(r"pip install[^`\n#]*", guide.read_text())
    }
    unchecked = sorted(
        (name, line) for name, line in found if line.rstrip(" .,)") not in INSTALL_LINES
    )
    assert not unchecked, f"install lines nobody checked (add each to INSTALL_LINES): {unchecked}"
    assert all(line.startswith("pip install") for line in INSTALL_LINES)
