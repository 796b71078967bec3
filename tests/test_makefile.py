"""`make test` installs the Chromium the browser tests need, and the Docker Engine and mmdebstrap the container tests
need, or says how, in those tests' own words.

The Makefile's `chromium` and `docker` targets run here with a PATH of stand-ins: an `apt-get` that records its
arguments and puts a file where each program goes, an `id` that says who we are, a `sudo` that works or refuses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.studio.conftest import MISSING_CHROMIUM
from tests.support.docker import MISSING_DOCKER

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")


@pytest.fixture
def machine(tmp_path):
    """Build the stand-ins; `machine(uid=..., apt=..., sudo=...)` returns a function running `make chromium`."""
    bin_dir, calls, chromium = tmp_path / "bin", tmp_path / "calls", tmp_path / "usr-bin" / "chromium"
    bin_dir.mkdir()
    chromium.parent.mkdir()
    for name in ("env", "true"):
        os.symlink(shutil.which(name), bin_dir / name)

    def tool(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)

    def make(*, uid: int = 0, apt: bool = True, sudo: bool | None = None, parley_chromium: str | None = None,
             present: bool = False):
        tool("id", f'echo {uid}')
        if apt:
            tool("apt-get", f'echo "${{DEBIAN_FRONTEND:+$DEBIAN_FRONTEND }}apt-get $*" >> {calls}\n'
                            f'case "$*" in *install*) printf "#!/bin/sh\\n" > {chromium}; /bin/chmod +x {chromium};; esac')
        if sudo is not None:
            tool("sudo", f'echo "sudo $*" >> {calls}\n[ "$1" = -n ] && shift\n' + ('exec "$@"' if sudo else "exit 1"))
        if present:
            chromium.write_text("#!/bin/sh\n")
            chromium.chmod(0o755)
        env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "CMAKE_BUILD_PARALLEL_LEVEL": "1"}
        if parley_chromium:
            env["PARLEY_CHROMIUM"] = parley_chromium
        args = [MAKE, "--no-print-directory", "-s", "chromium"]
        if not parley_chromium:
            args.append(f"CHROMIUM={chromium}")
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        recorded = calls.read_text().splitlines() if calls.exists() else []
        return done, recorded, chromium

    return make


def test_as_root_apt_get_installs_chromium(machine):
    done, calls, chromium = machine(uid=0)
    assert done.returncode == 0, done.stderr
    assert calls == ["apt-get update -qq", "noninteractive apt-get install -y -qq chromium"]
    assert os.access(chromium, os.X_OK)
    assert "Installing Chromium" in done.stdout and done.stderr == ""


def test_a_user_with_passwordless_sudo_installs_it_through_sudo(machine):
    done, calls, chromium = machine(uid=1000, sudo=True)
    assert done.returncode == 0, done.stderr
    assert calls[0] == "sudo -n true" and "sudo -n apt-get update -qq" in calls
    assert "noninteractive apt-get install -y -qq chromium" in calls and os.access(chromium, os.X_OK)


def test_where_nothing_can_install_it_make_says_what_the_browser_tests_say(machine):
    done, calls, chromium = machine(uid=1000, sudo=False)
    assert done.returncode == 0  # the rest of the suite still runs; the browser tests fail with the same words
    assert calls == ["sudo -n true"] and not chromium.exists()
    assert done.stderr.strip() == "WARNING: " + MISSING_CHROMIUM.format(path=chromium)


def test_without_apt_get_make_says_how_to_install_it(machine):
    done, calls, chromium = machine(uid=0, apt=False)
    assert done.returncode == 0 and calls == [] and not chromium.exists()
    assert done.stderr.strip() == "WARNING: " + MISSING_CHROMIUM.format(path=chromium)


def test_an_installed_chromium_is_left_alone_quietly(machine):
    done, calls, _ = machine(uid=0, present=True)
    assert done.returncode == 0 and calls == [] and done.stdout == "" and done.stderr == ""


def test_a_chromium_named_by_parley_chromium_is_never_installed(machine, tmp_path):
    missing = tmp_path / "elsewhere" / "chrome"
    done, calls, _ = machine(uid=0, parley_chromium=str(missing))
    assert calls == [] and done.stderr.strip() == "WARNING: " + MISSING_CHROMIUM.format(path=missing)


def test_make_test_installs_every_tool_the_suite_drives():
    """A dry run of `make test` on a clone without the Node tools plans their install (npm ci), and the check of Docker
    Engine and mmdebstrap, before pytest."""
    done = subprocess.run([MAKE, "--no-print-directory", "-n", "-W", "tests/support/node/package-lock.json", "test"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    npm = next(i for i, line in enumerate(lines) if "tests/support/node && npm ci" in line)
    docker = next(i for i, line in enumerate(lines) if "apt-get install" in line and "docker.io mmdebstrap" in line)
    pytest_line = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert npm < pytest_line and docker < pytest_line


@pytest.fixture
def docker_machine(tmp_path):
    """Stand-ins for `make docker`: an `apt-get` that records its arguments and puts the three programs in place."""
    bin_dir, calls, tools = tmp_path / "bin", tmp_path / "calls", tmp_path / "tools"
    bin_dir.mkdir()
    tools.mkdir()
    paths = [tools / "docker", tools / "dockerd", tools / "mmdebstrap"]
    for name in ("env", "true"):
        os.symlink(shutil.which(name), bin_dir / name)

    def tool(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)

    def make(*, uid: int = 0, sudo: bool | None = None, present: bool = False):
        tool("id", f"echo {uid}")
        installs = "; ".join(f'printf "#!/bin/sh\\n" > {p}; /bin/chmod +x {p}' for p in paths)
        tool("apt-get", f'echo "${{DEBIAN_FRONTEND:+$DEBIAN_FRONTEND }}apt-get $*" >> {calls}\n'
                        f'case "$*" in *install*) {installs};; esac')
        if sudo is not None:
            tool("sudo", f'echo "sudo $*" >> {calls}\n[ "$1" = -n ] && shift\n' + ('exec "$@"' if sudo else "exit 1"))
        if present:
            for path in paths:
                path.write_text("#!/bin/sh\n")
                path.chmod(0o755)
        env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "CMAKE_BUILD_PARALLEL_LEVEL": "1"}
        args = [MAKE, "--no-print-directory", "-s", "docker", f"DOCKER_TOOLS={' '.join(map(str, paths))}"]
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        recorded = calls.read_text().splitlines() if calls.exists() else []
        return done, recorded, paths

    return make


def test_as_root_apt_get_installs_docker_engine_and_mmdebstrap(docker_machine):
    done, calls, paths = docker_machine(uid=0)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert calls == ["apt-get update -qq", "noninteractive apt-get install -y -qq docker.io mmdebstrap"]
    assert all(os.access(path, os.X_OK) for path in paths)


def test_where_docker_cannot_be_installed_make_says_what_the_container_tests_say(docker_machine):
    done, calls, paths = docker_machine(uid=1000, sudo=False)
    assert done.returncode == 0 and calls == ["sudo -n true"]
    assert done.stderr.strip() == "WARNING: " + MISSING_DOCKER.format(paths=", ".join(map(str, paths)))


def test_installed_docker_tools_are_left_alone_quietly(docker_machine):
    done, calls, _ = docker_machine(uid=0, present=True)
    assert done.returncode == 0 and calls == [] and done.stdout == "" and done.stderr == ""
