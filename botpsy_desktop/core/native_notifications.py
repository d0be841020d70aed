"""Notifications with action buttons on Windows and macOS: desktop-notifier behind the client of
core/dbus_notifications.py, so that the window, the approval queue and ``botpsy daemon`` call the
same ``notify`` / ``close_notification`` and hear the same ``shown`` / ``action`` / ``closed``.

desktop-notifier (maintained, pinned in pyproject.toml for these two systems) sends WinRT toasts
on Windows and UserNotifications on macOS; it runs here on an asyncio loop in the client's own
thread. Not run by this project's tests (they run on Linux, where the D-Bus client is used);
on macOS notifications need the signed app bundle (packaging/macos) and the person's permission,
asked at the first notification: refused, the client says it is unavailable and the app falls
back to its own windows, as on a Linux desktop without a notification server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botpsy_desktop.core.dbus_notifications import DesktopNotifications


def start_native(client: DesktopNotifications) -> None:
    """Serve ``client``'s queue with desktop-notifier on a thread of its own."""
    thread = threading.Thread(
        target=lambda: asyncio.run(_serve(client)), name="botpsy-notify", daemon=True
    )
    client._thread = thread
    thread.start()


async def _serve(client: DesktopNotifications) -> None:
    from botpsy_desktop.core import dbus_notifications as dn

    try:
        from desktop_notifier import DesktopNotifier
        from desktop_notifier.main import get_backend_class
    except ImportError:
        client._give_up()
        return
    if "Dummy" in get_backend_class().__name__:
        # outside an app bundle on macOS, or Windows before 10, desktop-notifier would accept
        # each notification and show nothing: the app's own windows are used instead
        client._give_up()
        return
    notifier = DesktopNotifier(app_name=client.app_name)
    try:
        allowed = await notifier.request_authorisation()
    except Exception:  # an unsigned macOS app, no notification centre: the app falls back
        allowed = False
    if not allowed:
        client._give_up()
        return
    client.actions = True  # toasts and macOS notifications show buttons
    client.markup = False  # plain text on both (an XML text node, an NSString)
    client.server = "Windows notifications" if sys.platform == "win32" else "macOS"
    client.available = True
    client.started.set()
    dn._call(client.on.ready, True)
    try:
        await _notify(client, notifier)
    finally:
        # desktop-notifier has no close; its D-Bus backend (Linux: only the tests use it
        # there) keeps a connection, closed here
        bus = getattr(getattr(notifier, "_backend", None), "bus", None)
        if bus is not None:
            with contextlib.suppress(Exception):
                bus.disconnect()
                await bus.wait_for_disconnect()


async def _notify(client: DesktopNotifications, notifier: Any) -> None:
    """Send what the client queues, until it is told to stop (None)."""
    from desktop_notifier import Button, Notification, Urgency

    from botpsy_desktop.core import dbus_notifications as dn

    numbers = itertools.count(1)
    sent: dict[int, str] = {}  # the client's notification id -> desktop-notifier's identifier
    urgencies = {0: Urgency.Low, 1: Urgency.Normal, 2: Urgency.Critical}
    while True:
        item = await asyncio.to_thread(client._queue.get)
        if item is None:
            return
        if isinstance(item, dn._Close):
            if item.nid in sent:
                with contextlib.suppress(Exception):
                    await notifier.clear(sent.pop(item.nid))
            continue
        if not isinstance(item, dn._Notify):
            continue
        nid = next(numbers)

        def action(key: str, nid: int = nid) -> Callable[[], None]:
            return lambda: dn._call(client.on.action, nid, key)

        def dismissed(nid: int = nid) -> None:
            dn._call(client.on.closed, nid, 2)  # 2: dismissed by the person

        buttons = tuple(
            Button(title=label, on_pressed=action(key), identifier=key)
            for key, label in item.actions
            if key != "default"  # clicking the notification itself
        )
        note = Notification(
            title=item.summary,
            message=item.body,
            urgency=urgencies.get(item.urgency, Urgency.Normal),
            buttons=buttons,
            on_clicked=action("default"),
            on_dismissed=dismissed,
        )
        try:
            sent[nid] = await notifier.send_notification(note)
        except Exception as exc:  # said, never raised into the app
            dn._call(client.on.failed, f"The notification was refused: {exc}")
            continue
        dn._call(client.on.shown, item.key, nid)
