"""A global shortcut on Wayland: the XDG desktop portal's GlobalShortcuts interface.

Wayland compositors let no application grab a key; those that offer global shortcuts do it
through ``org.freedesktop.portal.GlobalShortcuts`` (KDE Plasma 5.27+, Hyprland, GNOME 48+...):
the app opens a session (``CreateSession``), asks for its shortcut with a preferred key
(``BindShortcuts``, the key in the XDG shortcut syntax, core/shortcuts.py), and hears the
``Activated`` signal when the person presses it. The desktop decides the key in the end (it may
ask the person, or give another key); what it answered is kept in :attr:`PortalShortcut.trigger`.

Spoken with jeepney (already the notifications' D-Bus library, pure Python) on a thread of its
own, Qt-free; no maintained Python library of this portal exists (libportal's GObject binding
would bring GLib's main loop into a Qt app). As with the notification buttons, only signals
sent by the portal itself count: another program on the bus cannot fake a key press.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import threading
from collections.abc import Callable
from typing import Any

from botpsy_desktop.core.shortcuts import HotkeyError, xdg_trigger

PORTAL = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"
INTERFACE = "org.freedesktop.portal.GlobalShortcuts"
REQUEST = "org.freedesktop.portal.Request"
SESSION = "org.freedesktop.portal.Session"
SHORTCUT_ID = "quick-command"
DESCRIPTION = "Open BotPsy's quick command box"
CALL_TIMEOUT_S = 5.0
ANSWER_WAIT_S = 5.0
"""How long :meth:`PortalShortcut.start` waits for the desktop's answer to the key: some
desktops ask the person first; their answer may come later (:attr:`PortalShortcut.pending`)."""


def request_path(unique_name: str, token: str) -> str:
    """Where the portal's answer to a call with ``handle_token=token`` will be (the portal
    spec: the caller's unique name without ':' and with '.' as '_')."""
    return f"{PATH}/request/{unique_name.lstrip(':').replace('.', '_')}/{token}"


class PortalShortcut:
    """One global shortcut through the portal. ``on_press`` runs on the client's thread.

    ``bus`` is "SESSION" (the person's session bus) or a D-Bus address. :meth:`start` raises
    :class:`HotkeyError` with what to do when this session offers no such portal or the
    desktop refused; :attr:`version` is the portal interface's version once connected.
    """

    def __init__(
        self,
        shortcut: str,
        on_press: Callable[[], None],
        bus: str = "SESSION",
        on_answer: Callable[[], None] | None = None,
    ) -> None:
        self.shortcut = shortcut
        self.preferred = xdg_trigger(shortcut)  # raises HotkeyError for a shortcut with no key
        self.bus = bus
        self._on_press = on_press
        self._on_answer = on_answer
        """Called (on the client's thread) when the desktop answers after :meth:`start` gave
        up waiting (:attr:`pending`): :attr:`trigger` or :attr:`problem` tell the answer."""
        self.version = 0
        self.trigger = ""
        """The key the desktop says it bound, in its words ('' if it gave none)."""
        self.pending = False
        """The desktop has not answered yet (it may be asking the person)."""
        self.presses = 0
        self.session = ""
        self._problem: str | None = None
        self._answered = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._unique = ""
        self._method_return: Any = None
        self._thread: threading.Thread | None = None

    def start(self, wait: float = ANSWER_WAIT_S) -> None:
        """Open the session and ask for the key; HotkeyError (with what to do) if refused."""
        self._thread = threading.Thread(target=self._run, name="portal-shortcut", daemon=True)
        self._thread.start()
        if not self._answered.wait(wait):
            self.pending = True  # still listening: the key works once the person allows it
            return
        if self._problem is not None:
            self.stop()
            raise HotkeyError(self._problem)

    def stop(self) -> None:
        """Close the portal session (the desktop forgets the key) and end the thread."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(CALL_TIMEOUT_S)
            self._thread = None

    # -- the D-Bus thread ---------------------------------------------------------------------
    @property
    def problem(self) -> str | None:
        """Why the desktop gave no key (None: it did, or it has not answered yet)."""
        return self._problem

    def _fail(self, problem: str) -> None:
        self._problem = problem
        self._answered_now()

    def _answered_now(self) -> None:
        self._answered.set()
        if self.pending:  # start() returned before the answer: say it now
            self.pending = False
            if self._on_answer is not None:
                with contextlib.suppress(Exception):
                    self._on_answer()

    def _run(self) -> None:
        try:
            from jeepney import DBusAddress, MatchRule, MessageType, new_method_call
            from jeepney.bus_messages import message_bus
            from jeepney.io.threading import open_dbus_router
        except ImportError:
            self._fail("The D-Bus library jeepney is missing: reinstall botpsy-desktop.")
            return
        try:
            with open_dbus_router(self.bus) as router:

                def call(address: Any, method: str, signature: str = "", body: Any = ()) -> Any:
                    msg = new_method_call(address, method, signature, body)
                    return router.send_and_get_reply(msg, timeout=CALL_TIMEOUT_S)

                owner = router.send_and_get_reply(
                    message_bus.GetNameOwner(PORTAL), timeout=CALL_TIMEOUT_S
                )
                if owner.header.message_type != MessageType.method_return:
                    # not running yet: the bus starts it on the first call if it is installed
                    probe = DBusAddress(PATH, PORTAL, "org.freedesktop.DBus.Peer")
                    call(probe, "Ping")
                    owner = router.send_and_get_reply(
                        message_bus.GetNameOwner(PORTAL), timeout=CALL_TIMEOUT_S
                    )
                if owner.header.message_type != MessageType.method_return:
                    self._fail(
                        "This session has no desktop portal (xdg-desktop-portal), so no app can "
                        "have a global shortcut here: bind the command `botpsy-desktop --quick` "
                        "to a key in your desktop's keyboard settings."
                    )
                    return
                sender = owner.body[0]
                props = DBusAddress(PATH, PORTAL, "org.freedesktop.DBus.Properties")
                version = call(props, "Get", "ss", (INTERFACE, "version"))
                if version.header.message_type != MessageType.method_return:
                    self._fail(
                        "This desktop's portal offers no global shortcuts (GlobalShortcuts): "
                        "bind the command `botpsy-desktop --quick` to a key in your desktop's "
                        "keyboard settings."
                    )
                    return
                self.version = int(version.body[0][1])
                # every signal heard is the portal's own (a key press cannot be faked)
                rule = MatchRule(type="signal", sender=sender)
                # added before the bus is asked for the portal's signals, never removed: jeepney's
                # receiver thread walks its filters unguarded (see core/dbus_notifications.py)
                router.filter(rule, queue=self._queue)
                router.send_and_get_reply(message_bus.AddMatch(rule), timeout=CALL_TIMEOUT_S)
                self._serve(router, call, DBusAddress, MessageType)
        except Exception as exc:  # the bus went away, a refused call: said, never raised
            if not self._answered.is_set():
                self._fail(
                    f"The desktop portal did not answer ({exc}): bind the command "
                    "`botpsy-desktop --quick` to a key in your desktop's keyboard settings."
                )

    def _answer(self, token: str, unique: str) -> tuple[int, dict[str, Any]] | None:
        """Wait for the Response of the request with ``token``; None when told to stop."""
        from jeepney import HeaderFields

        path = request_path(unique, token)
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)  # seen again by the caller, which ends
                return None
            fields = item.header.fields
            if (
                fields.get(HeaderFields.path) == path
                and fields.get(HeaderFields.member) == "Response"
            ):
                code, results = item.body
                return int(code), dict(results)
            self._signal(item)

    def _signal(self, item: Any) -> None:
        from jeepney import HeaderFields

        fields = item.header.fields
        if (
            fields.get(HeaderFields.interface) == INTERFACE
            and fields.get(HeaderFields.member) == "Activated"
            and item.body[0] == self.session
            and item.body[1] == SHORTCUT_ID
        ):
            self.presses += 1
            with contextlib.suppress(Exception):  # a listener's bug must not end the thread
                self._on_press()

    def _request(self, call: Any, portal: Any, method: str, signature: str, body: Any) -> Any:
        """Call a portal method that answers by a Request's Response: (code, results), or a
        sentence saying why not, or None when told to stop."""
        token = f"botpsy{secrets.token_hex(6)}"
        *head, options = body
        reply = call(portal, method, signature, (*head, {**options, "handle_token": ("s", token)}))
        if reply.header.message_type != self._method_return:
            return f"The desktop portal refused {method}: {reply.body}"
        return self._answer(token, self._unique)

    def _serve(self, router: Any, call: Any, address_type: Any, message_type: Any) -> None:
        portal = address_type(PATH, PORTAL, INTERFACE)
        self._unique, self._method_return = router.unique_name, message_type.method_return
        wanted = (
            SHORTCUT_ID,
            {"description": ("s", DESCRIPTION), "preferred_trigger": ("s", self.preferred)},
        )
        options: dict[str, tuple[str, Any]] = {
            "session_handle_token": ("s", f"botpsy{secrets.token_hex(6)}")
        }
        # Plasma 5.27 takes the shortcuts with the session (the portal's first draft); others
        # ignore the option and take them in BindShortcuts
        options["shortcuts"] = ("a(sa{sv})", [wanted])
        answer = self._request(call, portal, "CreateSession", "a{sv}", (options,))
        if answer is None:
            return
        if isinstance(answer, str) or answer[0] != 0 or "session_handle" not in answer[1]:
            self._fail(  # (a portal may list the interface with no backend behind it)
                "The desktop portal gave no shortcut session (this desktop may not offer global "
                "shortcuts): bind the command `botpsy-desktop --quick` to a key in your "
                "desktop's keyboard settings."
            )
            return
        self.session = str(answer[1]["session_handle"][1])
        try:
            # bound before (the desktop keeps it, maybe with the key the person chose there):
            # asked again, some desktops (Plasma 5.27) would open their settings at each start
            answer = self._request(call, portal, "ListShortcuts", "oa{sv}", (self.session, {}))
            if answer is None:
                return
            listed = self._ours(answer[1]) if not isinstance(answer, str) else None
            if listed is None:
                answer = self._request(
                    call, portal, "BindShortcuts", "oa(sa{sv})sa{sv}",
                    (self.session, [wanted], "", {}),
                )  # fmt: skip
                if answer is None:
                    return
                if isinstance(answer, str) or answer[0] != 0:
                    self._fail(
                        "The desktop did not allow the shortcut (it was cancelled or refused): "
                        "start BotPsy again to be asked again, or bind the command "
                        "`botpsy-desktop --quick` to a key in your desktop's keyboard settings."
                    )
                    return
                listed = self._ours(answer[1])
            self.trigger = listed or ""
            self._answered_now()
            while (item := self._queue.get()) is not None:
                self._signal(item)
        finally:
            with contextlib.suppress(Exception):  # the desktop forgets the key with it
                call(address_type(self.session, PORTAL, SESSION), "Close")

    @staticmethod
    def _ours(results: dict[str, Any]) -> str | None:
        """The trigger of the app's shortcut in a portal answer ('' if it has no key yet);
        None if the answer does not list it."""
        for shortcut_id, props in results.get("shortcuts", ("", []))[1]:
            if shortcut_id == SHORTCUT_ID:
                return str(props.get("trigger_description", ("s", ""))[1])
        return None
