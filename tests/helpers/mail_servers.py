"""Real mail servers on 127.0.0.1 for tests: Dovecot (IMAP, maildirs we seed) and aiosmtpd."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from tests.helpers.radicale_server import free_port, wait_for_port

USERS = 600
"""Mail users made at start (each test takes a fresh one)."""


def dovecot_binary() -> str | None:
    return shutil.which("dovecot") or (
        "/usr/sbin/dovecot" if Path("/usr/sbin/dovecot").exists() else None
    )


# --- a throwaway certificate authority and server certificate ----------------------------------


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


def make_certs(folder: Path) -> Certs:
    """A CA and a certificate for 127.0.0.1/localhost signed by it (cryptography)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "botpsy test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = Certs(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.chmod(paths.key, 0o644)  # dovecot's unprivileged processes read it
    return paths


# --- Dovecot -----------------------------------------------------------------------------------


@dataclass
class Dovecot:
    """A running Dovecot: ``port`` plain IMAP, ``ssl_port`` implicit TLS; users added live."""

    root: Path
    port: int
    ssl_port: int
    certs: Certs
    uid: int
    gid: int
    users: dict[str, str]
    _next: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def new_mailbox(self) -> tuple[str, str, Path]:
        """A user nobody has used yet: (name, password, their empty Maildir).

        The users are all in the passwd-file from the start: Dovecot re-reads it at most once a
        second, so users added while it runs may not be seen at once.
        """
        user = f"user{next(self._next)}"
        if user not in self.users:
            raise RuntimeError("all test mail users are used; raise USERS")
        home = self.root / "home" / user
        maildir = home / "Maildir"
        for sub in ("cur", "new", "tmp"):
            (maildir / sub).mkdir(parents=True, exist_ok=True)
        self._own(home)
        return user, self.users[user], maildir

    def deliver(
        self,
        maildir: Path,
        raw: bytes,
        *,
        seen: bool = False,
        when: dt.datetime | None = None,
        folder: str = "",
    ) -> None:
        """Put a message into the maildir (a subfolder ``.Name`` when ``folder`` is given)."""
        box = maildir / f".{folder}" if folder else maildir
        for sub in ("cur", "new", "tmp"):
            (box / sub).mkdir(parents=True, exist_ok=True)
        stamp = (when or dt.datetime.now(dt.UTC)).timestamp()
        unique = f"{int(stamp)}.M{time.monotonic_ns()}P{os.getpid()}.botpsy"
        path = box / ("cur" if seen else "new") / (unique + (":2,S" if seen else ""))
        path.write_bytes(raw)
        os.utime(path, (stamp, stamp))
        self._own(box)

    def _own(self, path: Path) -> None:
        if os.geteuid() != 0:
            return
        for p in [path, *path.rglob("*")]:
            os.chown(p, self.uid, self.gid)


@contextmanager
def dovecot(folder: Path) -> Iterator[Dovecot]:
    """Dovecot on 127.0.0.1 with a generated config (2.3 syntax) and a passwd-file.

    As root, mail processes run as ``nobody`` (Dovecot refuses UID 0 for mail), so the mail tree
    lives in a fresh folder of the system's temp folder that ``nobody`` can reach (pytest makes
    its own temp folders owner-only, and resets that whenever another pytest session starts);
    ``folder`` then only holds a note of where. Otherwise everything runs as the current user.
    """
    binary = dovecot_binary()
    assert binary is not None
    folder.mkdir(parents=True, exist_ok=True)
    root_run = os.geteuid() == 0
    uid, gid = (65534, 65534) if root_run else (os.getuid(), os.getgid())
    with ExitStack() as cleanup:
        if root_run:
            folder = Path(tempfile.mkdtemp(prefix="botpsy-dovecot-"))
            os.chmod(folder, 0o711)
            cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
        yield from _run_dovecot(binary, folder, root_run, uid, gid)


def _run_dovecot(
    binary: str, folder: Path, root_run: bool, uid: int, gid: int
) -> Iterator[Dovecot]:
    certs = make_certs(folder / "tls")
    passwd = folder / "passwd"
    users = {f"user{i}": f"pw-{i}-{os.urandom(4).hex()}" for i in range(1, USERS + 1)}
    passwd.write_text(
        "".join(f"{u}:{{PLAIN}}{p}:{uid}:{gid}::{folder / 'home' / u}\n" for u, p in users.items()),
        encoding="utf-8",
    )
    os.chmod(passwd, 0o644)
    port, ssl_port = free_port(), free_port()
    user = "root" if root_run else os.environ.get("USER") or _login_name()
    internal = "" if root_run else f"default_login_user = {user}\n"
    config = folder / "dovecot.conf"
    config.write_text(
        f"""protocols = imap
listen = 127.0.0.1
base_dir = {folder}/run
state_dir = {folder}/state
log_path = {folder}/dovecot.log
info_log_path = {folder}/dovecot.log
default_internal_user = {user}
default_internal_group = {"root" if root_run else _group_name()}
{internal}first_valid_uid = {min(uid, 500)}
first_valid_gid = {min(gid, 500)}
ssl = yes
ssl_cert = <{certs.cert}
ssl_key = <{certs.key}
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {passwd}
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {passwd}
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {ssl_port}
    ssl = yes
  }}
}}
service anvil {{
  chroot =
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Drafts {{
    special_use = \\Drafts
    auto = create
  }}
  mailbox Sent {{
    special_use = \\Sent
    auto = create
  }}
  mailbox Archive {{
    special_use = \\Archive
    auto = create
  }}
  mailbox Trash {{
    special_use = \\Trash
    auto = create
  }}
}}
""",
        encoding="utf-8",
    )
    for sub in ("run", "state", "home"):
        (folder / sub).mkdir(exist_ok=True)
    if root_run:
        os.chown(folder / "home", uid, gid)
    log = folder / "dovecot.log"
    log.touch()
    proc = subprocess.Popen(
        [binary, "-F", "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc, "Dovecot", log)
        wait_for_port(ssl_port, proc, "Dovecot", log)
        yield Dovecot(folder, port, ssl_port, certs, uid, gid, users)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _login_name() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _group_name() -> str:
    import grp

    return grp.getgrgid(os.getgid()).gr_name


# --- aiosmtpd ----------------------------------------------------------------------------------


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes

    @property
    def message(self) -> EmailMessage:
        msg = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        return msg


@dataclass
class SMTPServer:
    host: str
    port: int
    received: list[Received] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    """User names that logged in (passwords are checked, never kept)."""


class _Capture:
    def __init__(self, server: SMTPServer) -> None:
        self.server = server

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.server.received.append(
            Received(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.original_content))
        )
        return "250 OK"


@contextmanager
def smtp_server(
    users: dict[str, str], *, certs: Certs | None = None, require_starttls: bool = False
) -> Iterator[SMTPServer]:
    """aiosmtpd on 127.0.0.1 that requires a login from ``users`` and keeps what arrives."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    server = SMTPServer("127.0.0.1", free_port())
    lock = threading.Lock()

    def authenticator(smtp: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        user = data.login.decode("utf-8", "replace")
        ok = users.get(user) == data.password.decode("utf-8", "replace")
        if ok:
            with lock:
                server.logins.append(user)
        return AuthResult(success=ok)

    class _Controller(Controller):  # type: ignore[misc]
        def factory(self) -> Any:
            # Login without TLS is what these loopback tests do on purpose (aiosmtpd warns).
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS")
                return super().factory()

    tls = certs.server_context() if certs is not None else None
    controller = _Controller(
        _Capture(server),
        hostname=server.host,
        port=server.port,
        authenticator=authenticator,
        auth_required=True,
        auth_require_tls=require_starttls,
        tls_context=tls,
        require_starttls=require_starttls,
        ready_timeout=10,
    )
    controller.start()
    try:
        yield server
    finally:
        controller.stop()
