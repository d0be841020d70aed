"""Where config, data and models live: platform folders, or one folder under BOTPSY_HOME."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "botpsy-desktop"
HOME_ENV = "BOTPSY_HOME"


@dataclass(frozen=True)
class Paths:
    """The app's folders. With a home folder everything sits below it (isolated profile)."""

    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> Paths:
        """Use ``home`` if given, else ``$BOTPSY_HOME``, else the platform's per-user folders."""
        base = home if home is not None else os.environ.get(HOME_ENV) or None
        if base is not None:
            root = Path(base).expanduser().resolve()
            return cls(root / "config", root / "data", root / "cache")
        return cls(
            Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)),
        )

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.json"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def database(self) -> Path:
        return self.data_dir / "conversations.sqlite3"

    def ensure(self) -> None:
        """Create the folders (private to the user where the OS supports it)."""
        for folder in (self.config_dir, self.data_dir, self.cache_dir, self.models_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
