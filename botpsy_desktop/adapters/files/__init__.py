"""Access to the user's files, confined to the folders chosen in Settings; changes can be undone."""

from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.adapters.files.tools import ACTION_LOG_NAME, files_tools
from botpsy_desktop.adapters.files.trash import FreedesktopTrash, PlatformTrash, Trash, system_trash

__all__ = [
    "ACTION_LOG_NAME",
    "FolderJail",
    "FreedesktopTrash",
    "PlatformTrash",
    "Trash",
    "files_tools",
    "system_trash",
]
