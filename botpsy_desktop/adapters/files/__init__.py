"""Read-only access to the user's files, confined to the folders chosen in Settings."""

from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.adapters.files.tools import files_tools

__all__ = ["FolderJail", "files_tools"]
