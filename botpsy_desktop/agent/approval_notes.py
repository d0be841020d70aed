"""Desktop notifications for the stored approval queue: the receipt, and Approve / Deny / Open.

Qt-free, so that ``botpsy daemon`` notifies as the window does (core/dbus_notifications.py speaks
the freedesktop protocol). Each approval this process waits for (agent/approvals.py: asked
here, or adopted from an ended process) raises one notification with the receipt's plain words.
Where the server shows action buttons, Approve and Deny decide the stored row (the first
decision anywhere wins) and Open shows the window's queue. An always-ask action (sending,
paying, deleting..., and every other kind of call that can park) is offered Approve only when its
whole receipt fits in the notification; otherwise the notification offers only Open, so nobody
approves what they could not read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, tzinfo

from botpsy_desktop.agent.approvals import ApprovalQueue, StoredApproval
from botpsy_desktop.core.dbus_notifications import DesktopNotifications
from botpsy_desktop.core.errors import BotpsyError

log = logging.getLogger(__name__)

FITS_CHARS = 280
"""The longest receipt shown whole: notification servers cut bodies short differently (GNOME
shows a few lines, then an ellipsis), so only a short one is surely seen in full."""
FITS_LINES = 5
BY = "user (notification)"
"""Who decided, as the conversation and the audit log say, when a notification's button did."""


def receipt_fits(receipt: str) -> bool:
    """Whether a receipt fits in a notification whole (see :data:`FITS_CHARS`): its lines are
    counted at every line break a renderer honours (``str.splitlines``: \\n, \\r, \\x0b,
    \\x0c, \\x1c-\\x1e, \\x85, U+2028, U+2029), not only at newlines."""
    return len(receipt) <= FITS_CHARS and len(receipt.splitlines()) <= FITS_LINES


def offered_actions(stored: StoredApproval, *, buttons: bool) -> list[tuple[str, str]]:
    """The buttons a notification of ``stored`` offers: Approve and Deny, unless its receipt
    does not fit whole (whatever its tier: a parked read that sends text too); then only Open.
    None without buttons."""
    if not buttons:
        return []
    opened = [("default", "Open BotPsy"), ("open", "Open")]
    if not receipt_fits(stored.receipt):
        return opened
    return [("default", "Open BotPsy"), ("approve", "Approve"), ("deny", "Deny"), ("open", "Open")]


def notification_text(stored: StoredApproval, tz: tzinfo | None = None) -> tuple[str, str]:
    """The title and body of the notification of ``stored``: who asks, and the receipt (cut
    short, with where to read it all, when it does not fit)."""
    title = f"Approve? {stored.summary}" if stored.summary else "An action waits for approval"
    if len(title) > 100:
        title = title[:99] + "…"
    receipt = stored.receipt
    if not receipt_fits(receipt):
        receipt = receipt[:FITS_CHARS].rsplit(" ", 1)[0] + "… (open BotPsy to read it all)"
    until = ""
    if stored.deadline is not None:
        until = f"; waits until {datetime.fromtimestamp(stored.deadline, tz):%H:%M}"
    body = f"{receipt}\nAsked by {stored.asker()}{until}. Approval {stored.id}."
    return title, body


class ApprovalNotifications:
    """Raises and answers the notifications of ``queue``'s approvals on ``client``.

    ``open_app(stored)`` is what Open does (the window shows its queue; the daemon starts the
    window). ``sent`` keeps (approval id, title, body, actions) of each notification raised.
    """

    def __init__(
        self,
        queue: ApprovalQueue,
        client: DesktopNotifications,
        *,
        open_app: Callable[[StoredApproval | None], None] | None = None,
        tz: tzinfo | None = None,
    ) -> None:
        self.queue = queue
        self.client = client
        self.open_app = open_app
        self.tz = tz
        self.sent: list[tuple[int, str, str, list[tuple[str, str]]]] = []
        self._lock = threading.Lock()
        self._nids: dict[int, int] = {}  # notification id -> approval id
        self._by_approval: dict[int, int] = {}  # approval id -> notification id
        queue.arrived.append(self._arrived)
        queue.left.append(self.close_for)
        client.on.shown.append(self._shown)
        client.on.action.append(self._action)
        client.on.closed.append(self._closed)

    def _arrived(self, stored: StoredApproval) -> None:
        self.raise_for(stored)

    def raise_for(self, stored: StoredApproval) -> bool:
        """Notify of a waiting approval; False when there is no notification server."""
        title, body = notification_text(stored, self.tz)
        actions = offered_actions(stored, buttons=self.client.actions)
        shown = self.client.notify(
            f"approval:{stored.id}", title, body, actions, urgency=2, category="x-botpsy.approval"
        )
        if shown:
            self.sent.append((stored.id, title, body, actions))
        return shown

    def close_for(self, stored: StoredApproval) -> None:
        """The approval no longer waits (decided anywhere, or expired): its notification goes."""
        with self._lock:
            nid = self._by_approval.pop(stored.id, None)
            if nid is not None:
                self._nids.pop(nid, None)
        if nid is not None:
            self.client.close_notification(nid)

    def close(self) -> None:
        """The process ends: its notifications go (their buttons would answer nobody); the
        approvals stay stored and are notified again by the process that takes them over."""
        with self._lock:
            nids = list(self._nids)
            self._nids.clear()
            self._by_approval.clear()
        for nid in nids:
            self.client.close_notification(nid)

    def _shown(self, key: str, nid: int) -> None:
        if not key.startswith("approval:"):
            return
        approval_id = int(key.split(":", 1)[1])
        with self._lock:
            self._nids[nid] = approval_id
            self._by_approval[approval_id] = nid

    def _closed(self, nid: int, _reason: int) -> None:
        with self._lock:
            approval_id = self._nids.pop(nid, None)
            if approval_id is not None:
                self._by_approval.pop(approval_id, None)

    def _action(self, nid: int, action: str) -> None:
        with self._lock:
            approval_id = self._nids.get(nid)
        if approval_id is None:
            return
        stored = self.queue.get(approval_id)
        if stored is None:
            return
        if action in ("approve", "deny"):
            if action == "approve" and ("approve", "Approve") not in offered_actions(
                stored, buttons=True
            ):
                log.warning("approval %s: Approve was not offered; ignored", approval_id)
                return
            try:
                self.queue.decide(approval_id, action == "approve", BY)
            except BotpsyError as exc:  # decided elsewhere first, or too late: said, not raised
                self.client.notify(f"note:{approval_id}", "Not changed", str(exc))
            return
        if action in ("open", "default") and self.open_app is not None:
            with contextlib.suppress(Exception):
                self.open_app(stored)
