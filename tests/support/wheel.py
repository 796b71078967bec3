"""Parley as an install lays it out: the wheel built from this tree, and the folder `pip install --target` makes of it.

Built from a copy of the tree's tracked files, so the build leaves nothing (`build/`, `*.egg-info`) in the checkout;
with the venv's own setuptools (no build isolation: nothing is downloaded).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def build_wheel(work: Path) -> Path:
    """Build Parley's wheel from a copy of this tree under `work`; return the wheel's path."""
    source = work / "source"
    for name in tracked_files():
        if name.startswith(("tests/", "studio/", "bench/", "docs/")):
            continue  # not shipped, and large
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    out = work / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(source)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = out.glob("parley-*.whl")
    return wheel


def install_target(wheel: Path, target: Path) -> Path:
    """`pip install --target` of the wheel alone (no dependencies): what an install adds to site-packages."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    return target


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()
