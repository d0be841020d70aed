"""The security suites' servers, started once: weather, attacker, Dovecot, SMTP, Radicale."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.mail_servers import Dovecot, SMTPServer, dovecot, dovecot_binary, smtp_server
from tests.helpers.radicale_server import Radicale, radicale
from tests.helpers.services import missing
from tests.security.sandbox import Accounts, Servers, attacker_server, weather_stand_in

CAL_USERS = {f"cal{i}": f"pw-cal-{i}" for i in range(1, 601)}


class AccountServers:
    """Dovecot, an SMTP server that knows its users, Radicale: one user each per scenario."""

    def __init__(self, mail: Dovecot, smtp: SMTPServer, cal: Radicale) -> None:
        self.mail, self.smtp, self.cal = mail, smtp, cal
        self._cal_users = itertools.count(1)

    def accounts(self) -> Accounts:
        user, password, maildir = self.mail.new_mailbox()
        cal_user = f"cal{next(self._cal_users)}"
        return Accounts(self.mail, self.smtp, self.cal, user, password, maildir, cal_user)


@pytest.fixture(scope="session")
def security_servers() -> Iterator[tuple[Servers, AccountServers]]:
    if dovecot_binary() is None:
        missing("Dovecot (an IMAP server, for the security suites)", "apt install dovecot-imapd")
    # Not under pytest's own temp root: that is owner-only (0700), and as root Dovecot's mail
    # processes run as nobody and must be able to reach the mail folders.
    with (
        tempfile.TemporaryDirectory(prefix="botpsy-security-") as tmp,
        weather_stand_in() as weather,
        attacker_server() as attacker,
        dovecot(Path(tmp) / "dovecot") as mail,
        smtp_server(mail.users) as smtp,
        radicale(Path(tmp) / "radicale", CAL_USERS) as cal,
    ):
        yield Servers(weather, attacker), AccountServers(mail, smtp, cal)
