"""The installers' inputs: the spec bundles all package data; the shipped assets are sound."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import sys
import tomllib
import wave
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np

from tests.helpers.models import REPO_ROOT

PACKAGE = REPO_ROOT / "botpsy_desktop"
PACKAGING = REPO_ROOT / "packaging"
ICONS = PACKAGE / "assets" / "icons"


@cache
def make_assets() -> ModuleType:
    """packaging/make_assets.py imported as a module (packaging/ is not a package)."""
    path = PACKAGING / "make_assets.py"
    spec = importlib.util.spec_from_file_location("make_assets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def spec_package_data() -> list[str]:
    """PACKAGE_DATA as written in packaging/botpsy.spec (read, not run: it needs PyInstaller)."""
    tree = ast.parse((PACKAGING / "botpsy.spec").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PACKAGE_DATA" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError("packaging/botpsy.spec has no PACKAGE_DATA list")


def pyproject_package_data() -> list[str]:
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [str(p) for p in data["tool"]["setuptools"]["package-data"]["botpsy_desktop"]]


def matched(patterns: list[str]) -> set[Path]:
    files: set[Path] = set()
    for pattern in patterns:
        found = {p for p in PACKAGE.glob(pattern) if p.is_file()}
        assert found, f"package-data pattern {pattern!r} matches no file"
        files |= found
    return files


def test_the_spec_bundles_exactly_the_package_data_of_the_wheel() -> None:
    assert matched(spec_package_data()) == matched(pyproject_package_data())


def test_every_data_file_in_the_package_is_package_data() -> None:
    """A new asset must be added to pyproject.toml and the spec, or this fails."""
    data_files = {
        p
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }
    missing = sorted(str(p.relative_to(PACKAGE)) for p in data_files - matched(spec_package_data()))
    assert not missing, f"not in PACKAGE_DATA (spec) and package-data (pyproject): {missing}"


def test_the_icon_sizes_the_ui_loads_are_the_ones_made() -> None:
    from botpsy_desktop.ui import icons

    m = make_assets()
    assert icons.APP_SIZES == m.APP_SIZES
    assert icons.TRAY_SIZES == m.TRAY_SIZES
    assert icons.TEMPLATE_SIZES == m.TEMPLATE_SIZES
    for name, sizes in [
        ("botpsy", m.APP_SIZES),
        ("tray-light", m.TRAY_SIZES),
        ("tray-dark", m.TRAY_SIZES),
        ("tray-template", m.TEMPLATE_SIZES),
    ]:
        for size in sizes:
            png = (ICONS / f"{name}-{size}.png").read_bytes()
            assert m.png_size(png) == (size, size), f"{name}-{size}.png"


def test_the_svg_sources_are_valid() -> None:
    for svg in ("botpsy.svg", "tray-light.svg", "tray-dark.svg", "tray-template.svg"):
        root = ET.parse(ICONS / svg).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg", svg
        assert root.get("viewBox"), svg


def test_the_windows_icon_holds_every_size() -> None:
    m = make_assets()
    images = m.read_ico((PACKAGING / "icons" / "botpsy.ico").read_bytes())
    assert sorted(images) == sorted(m.ICO_SIZES)
    assert images[256] == (ICONS / "botpsy-256.png").read_bytes()


def test_the_macos_icon_holds_every_element() -> None:
    m = make_assets()
    elements = m.read_icns((PACKAGING / "icons" / "botpsy.icns").read_bytes())
    assert set(elements) == set(m.ICNS_TYPES)
    for kind, size in m.ICNS_TYPES.items():
        assert m.png_size(elements[kind]) == (size, size), kind
    assert elements[b"ic09"] == (ICONS / "botpsy-512.png").read_bytes()


def test_the_ico_and_icns_writers_round_trip() -> None:
    m = make_assets()
    pngs = {s: (ICONS / f"botpsy-{s}.png").read_bytes() for s in (16, 32, 256)}
    assert m.read_ico(m.ico_bytes(pngs)) == pngs


def test_the_alarm_sound_is_the_synthesised_chime() -> None:
    m = make_assets()
    with wave.open(str(PACKAGE / "assets" / "sounds" / "alarm.wav")) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 44100)
        shipped = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    expected = m.alarm_samples()
    assert shipped.shape == expected.shape
    # the same synthesis; another libm may round a sample differently
    assert int(np.max(np.abs(shipped.astype(np.int32) - expected.astype(np.int32)))) <= 2
    assert int(np.max(np.abs(shipped))) > 20000  # loud enough to wake someone
    assert np.all(shipped[-4000:] == 0)  # silent at the end: the loop joins without a click


def test_the_desktop_entry_launches_the_app_with_its_icon() -> None:
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]
    entry.read(PACKAGING / "linux" / "botpsy-desktop.desktop", encoding="utf-8")
    main = entry["Desktop Entry"]
    assert main["Type"] == "Application" and main["Exec"] == "botpsy-desktop"
    # the same icon name as the login item the app writes (core/autostart.py)
    autostart = (PACKAGE / "core" / "autostart.py").read_text(encoding="utf-8")
    assert f"Icon={main['Icon']}" in autostart
    assert entry["Desktop Action quick"]["Exec"] == "botpsy-desktop --quick"


def test_the_windows_installer_uses_the_apps_own_login_item() -> None:
    script = (PACKAGING / "windows" / "botpsy.iss").read_text(encoding="utf-8")
    autostart = (PACKAGE / "core" / "autostart.py").read_text(encoding="utf-8")
    assert r"Software\Microsoft\Windows\CurrentVersion\Run" in script
    assert 'ValueName: "BotPsy"' in script and '"BotPsy"' in autostart
    assert '--minimized"; Tasks: startatlogin' in script and '"--minimized"' in autostart
    assert "SetupIconFile=..\\icons\\botpsy.ico" in script
