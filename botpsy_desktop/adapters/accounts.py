"""Testing an account: connect to its servers and say in one line what works and what failed.

`botpsy account test` and the window's Accounts page both use ``check_account``.
"""

from __future__ import annotations

from collections.abc import Callable

from botpsy_desktop.core.accounts import CalDAVAccount, MailAccount
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.secrets import SecretStore


def check_account(
    account: CalDAVAccount | MailAccount, secrets: SecretStore, config: Config
) -> tuple[bool, str]:
    """(all ok, one line): CalDAV for a calendar, IMAP then SMTP for a mailbox.

    Without a password (none stored, none given this session) nothing is tried and the line
    says why.
    """
    try:
        secrets.require(account.name)
    except BotpsyError as exc:
        return False, f"{account.name} ({account.kind}): not tested: {exc}"
    checks: list[tuple[str, Callable[[], str]]] = []
    if isinstance(account, CalDAVAccount):
        from botpsy_desktop.adapters.calendar import CalDAVSource

        source = CalDAVSource(
            account, secrets.provider(account.name), timeout_s=config.calendar.timeout_s
        )
        checks.append(("CalDAV", source.check))
    else:
        from botpsy_desktop.adapters.email import MailClient

        client = MailClient(
            account, secrets.provider(account.name), timeout_s=config.email.timeout_s
        )
        checks += [("IMAP", client.check_imap), ("SMTP", client.check_smtp)]
    parts, ok = [], True
    for label, check in checks:
        try:
            parts.append(check())
        except BotpsyError as exc:
            ok = False
            parts.append(f"{label} failed: {exc}")
    return ok, f"{account.name} ({account.kind}): {'; '.join(parts)}"
