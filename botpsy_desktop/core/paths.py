"""Where config, data and models live: platform folders, or one folder under BOTPSY_HOME."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from botpsy_desktop.core.errors import ConfigError

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
        """Create the folders (private to the user where the OS supports it); ConfigError,
        saying what to do, when one cannot be (a file in the way, no permission)."""
        for folder in (self.config_dir, self.data_dir, self.cache_dir, self.models_dir):
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                in_the_way = next(
                    (p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None
                )
                if in_the_way is not None:
                    raise ConfigError(
                        f"{in_the_way} is a file, so BotPsy cannot keep its folders there.",
                        "Give --home (or $BOTPSY_HOME) a folder, new or existing, not a file.",
                    ) from None
                raise ConfigError(
                    f"Cannot create the folder {folder}: {exc.strerror or exc}.",
                    "Check its permissions, or choose another place with --home DIR.",
                ) from None
