"""`botpsy doctor --bundle`: a diagnostics zip for bug reports, with no secrets and no messages."""

from __future__ import annotations

import json
import os
import platform
import re
import sqlite3
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from botpsy_desktop import __version__
from botpsy_desktop.agent.logs import RedactionFilter, log_files
from botpsy_desktop.app import App
from botpsy_desktop.doctor import Check, run_checks

LOG_BYTES = 2_000_000
"""The newest log text put in a bundle, at most (older lines are left out)."""
PACKAGES = (
    "llama-cpp-python",
    "pydantic",
    "PySide6",
    "PySide6-Essentials",
    "httpx",
    "keyring",
    "caldav",
    "icalendar",
    "jinja2",
    "numpy",
    "huggingface-hub",
)
_SECRET_KEY = re.compile(r"(?i)(password|passwd|secret|token|api[_-]?key|credential)")
REMOVED = "[removed]"


def default_bundle_path(app: App) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return app.paths.data_dir / "diagnostics" / f"botpsy-diagnostics-{stamp}.zip"


def write_bundle(app: App, path: Path | None = None, checks: list[Check] | None = None) -> Path:
    """Write the diagnostics zip and return its path.

    It holds the doctor report, the settings (any secret-looking value removed), versions, the
    newest logs (as written: message bodies are not in them unless ``logs.include_bodies`` is
    on) and, per database, its integrity check and row counts, never a row's contents. Every
    text goes through the log redaction filter once more.
    """
    target = (path or default_bundle_path(app)).expanduser()
    if target.is_dir():
        target = target / default_bundle_path(app).name
    target.parent.mkdir(parents=True, exist_ok=True)
    clean = RedactionFilter(app.secrets.known_values).clean
    report = checks if checks is not None else run_checks(app)
    entries: dict[str, str] = {
        "doctor.json": _json([c.as_dict() for c in report]),
        "config.json": _json(_scrub(app.config.model_dump(mode="json"))),
        "versions.json": _json(_versions()),
        "databases.json": _json(
            {db.name: _database_summary(db) for db in sorted(app.paths.data_dir.glob("*.sqlite3"))}
        ),
    }
    remaining = LOG_BYTES
    for file in log_files(app.paths):
        if remaining <= 0:
            break
        text = _tail(file, remaining)
        remaining -= len(text.encode("utf-8"))
        entries[f"logs/{file.name}"] = text
    entries["README.txt"] = (
        f"botpsy-desktop {__version__} diagnostics, {time.strftime('%Y-%m-%d %H:%M:%S %z')}.\n"
        "No passwords, tokens or conversation text; database files hold counts only.\n"
        + (
            "logs.include_bodies is ON: the logs may contain message text.\n"
            if app.config.logs.include_bodies
            else ""
        )
    )
    partial = target.with_name(target.name + ".part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in entries.items():
            archive.writestr(name, clean(text))
    if os.name == "posix":
        os.chmod(partial, 0o600)
    partial.replace(target)
    return target


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str) + "\n"


def _scrub(value: Any, key: str = "") -> Any:
    """Settings with any value under a secret-looking key replaced."""
    if isinstance(value, dict):
        return {k: _scrub(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, key) for v in value]
    if key and _SECRET_KEY.search(key) and value not in (None, "", False):
        return REMOVED
    return value


def _versions() -> dict[str, str]:
    found: dict[str, str] = {
        "botpsy-desktop": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _database_summary(file: Path) -> dict[str, Any]:
    """Integrity, journal mode and row counts per table, read-only; no contents."""
    try:
        db = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return {"error": f"cannot open: {exc}"}
    try:
        summary: dict[str, Any] = {
            "bytes": file.stat().st_size,
            "integrity_check": [r[0] for r in db.execute("PRAGMA integrity_check").fetchall()],
            "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
            "user_version": db.execute("PRAGMA user_version").fetchone()[0],
        }
        tables = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        counts: dict[str, int] = {}
        for table in tables:
            quoted = '"' + table.replace('"', '""') + '"'
            counts[table] = int(db.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0])
        summary["rows"] = counts
        return summary
    except sqlite3.Error as exc:
        return {"error": str(exc)}
    finally:
        db.close()


def _tail(file: Path, limit: int) -> str:
    size = file.stat().st_size
    with file.open("rb") as f:
        if size > limit:
            f.seek(size - limit)
            f.readline()  # start at a whole line
        return f.read().decode("utf-8", "replace")
