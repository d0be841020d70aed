"""Calendar and mail accounts: a JSON file of non-secret settings; passwords live in the keyring."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from botpsy_desktop.core.addresses import EMAIL_RE
from botpsy_desktop.core.errors import BotpsyError, ConfigError
from botpsy_desktop.core.paths import Paths

ACCOUNTS_FILE = "accounts.json"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$"
Security = Literal["ssl", "starttls", "none"]

_SECRET_KEYS = frozenset({"password", "passwd", "pass", "secret", "token", "app_password"})


def is_loopback(host: str) -> bool:
    """True for this computer's own addresses (where an unencrypted connection stays local)."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class _Account(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="Short name, e.g. work or personal.")
    username: str = Field(min_length=1, max_length=320, description="Login name.")
    ca_file: str | None = Field(
        None, description="Extra certificate (PEM) to trust, for a server with its own CA."
    )


class CalDAVAccount(_Account):
    """A CalDAV server (Nextcloud, Fastmail, iCloud, Radicale...)."""

    kind: Literal["caldav"] = "caldav"
    url: str = Field(description="CalDAV URL, e.g. https://cloud.example.com/remote.php/dav")
    calendar: str | None = Field(
        None, description="Calendar new events and tasks go to (its name); default: the first."
    )
    email: str | None = Field(
        None, description="Your address as organizer of invitations (default: the user name)."
    )
    contacts: Literal["own", "shared"] | None = Field(
        None,
        description="Its address books (CardDAV, same password): own (only you write them); "
        "shared (others can: their fields are outside content); None: not read.",
    )
    contacts_url: str | None = Field(
        None,
        description="CardDAV URL where it differs from the CalDAV one (Fastmail: "
        "https://carddav.fastmail.com/dav/, iCloud: https://contacts.icloud.com/).",
    )

    @model_validator(mode="after")
    def _check(self) -> CalDAVAccount:
        for key, url in (("url", self.url), ("contacts_url", self.contacts_url)):
            if url is None:
                continue
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"{key} must be an http(s) URL, e.g. https://host/dav/, not {url!r}"
                )
            if parts.username or parts.password:
                raise ValueError(f"{key} must not contain a user name or password")
            if parts.scheme == "http" and not is_loopback(parts.hostname):
                raise ValueError(
                    f"{key} {url!r} is not encrypted: use https (http only for this computer)"
                )
        if self.email is not None and not EMAIL_RE.match(self.email):
            raise ValueError(f"email {self.email!r} is not an email address")
        return self

    @property
    def organizer(self) -> str | None:
        """The address invitations are sent from, if known."""
        if self.email:
            return self.email
        return self.username if EMAIL_RE.match(self.username) else None


class MailAccount(_Account):
    """A mailbox read over IMAP and written to over SMTP."""

    kind: Literal["mail"] = "mail"
    address: str = Field(description="Your email address, the From of what you send.")
    display_name: str = Field("", max_length=100, description="Your name, shown to recipients.")
    imap_host: str = Field(min_length=1, max_length=253)
    imap_port: int | None = Field(None, ge=1, le=65535, description="Default 993 ssl, 143.")
    imap_security: Security = "ssl"
    smtp_host: str = Field(min_length=1, max_length=253)
    smtp_port: int | None = Field(None, ge=1, le=65535, description="Default 465 ssl, 587.")
    smtp_security: Security = "ssl"
    drafts_folder: str | None = Field(None, description="Default: the server's Drafts folder.")
    sent_folder: str | None = Field(
        None,
        description="Keep a copy of sent mail here (leave unset where the server keeps one, "
        "e.g. Gmail).",
    )

    @model_validator(mode="after")
    def _check(self) -> MailAccount:
        if not EMAIL_RE.match(self.address):
            raise ValueError(f"address {self.address!r} is not an email address")
        for what, host, security in (
            ("imap", self.imap_host, self.imap_security),
            ("smtp", self.smtp_host, self.smtp_security),
        ):
            if security == "none" and not is_loopback(host):
                raise ValueError(
                    f"{what}_security none sends the password unencrypted: use ssl or starttls "
                    "(none only for this computer)"
                )
        return self

    @property
    def imap_port_or_default(self) -> int:
        return self.imap_port or (993 if self.imap_security == "ssl" else 143)

    @property
    def smtp_port_or_default(self) -> int:
        if self.smtp_port:
            return self.smtp_port
        return {"ssl": 465, "starttls": 587, "none": 25}[self.smtp_security]


Account = Annotated[CalDAVAccount | MailAccount, Field(discriminator="kind")]
_ACCOUNT_LIST: TypeAdapter[list[Account]] = TypeAdapter(list[Account])


def accounts_file(paths: Paths) -> Path:
    return paths.config_dir / ACCOUNTS_FILE


class AccountBook:
    """The accounts file: a JSON list of account records, written atomically, owner-only."""

    def __init__(self, file: Path) -> None:
        self.file = file

    @classmethod
    def for_paths(cls, paths: Paths) -> AccountBook:
        return cls(accounts_file(paths))

    def load(self) -> list[Account]:
        """The accounts, or [] when there is no file. Raises ConfigError naming what is wrong."""
        if not self.file.exists():
            return []
        try:
            data: Any = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"Cannot read the accounts file {self.file}: {exc}.",
                "Fix the JSON, or delete the file and add the accounts again.",
            ) from exc
        except RecursionError:
            raise ConfigError(
                f"The accounts file {self.file} is nested too deeply to be a list of accounts.",
                "Fix it, or delete it and add the accounts again with `botpsy account add`.",
            ) from None
        if not isinstance(data, list):
            raise ConfigError(
                f"The accounts file {self.file} must hold a JSON list of accounts.",
                "Fix it, or delete it and add the accounts again with `botpsy account add`.",
            )
        for item in data:
            if isinstance(item, dict) and _SECRET_KEYS & {str(k).lower() for k in item}:
                raise ConfigError(
                    f"The accounts file {self.file} holds a password for account "
                    f"{item.get('name', '?')!r}; passwords are never kept in files.",
                    "Remove it from the file and store it with `botpsy account add` (it goes "
                    "to the OS keyring).",
                )
        try:
            accounts = _ACCOUNT_LIST.validate_python(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
            )
            raise ConfigError(
                f"The accounts file {self.file} has invalid entries ({problems}).",
                "Correct them, or remove the account and add it again with `botpsy account add`.",
            ) from exc
        seen: set[str] = set()
        for account in accounts:
            if account.name in seen:
                raise ConfigError(
                    f"The accounts file {self.file} names {account.name!r} twice.",
                    "Rename or remove one of them.",
                )
            seen.add(account.name)
        return accounts

    def get(self, name: str) -> Account | None:
        return next((a for a in self.load() if a.name == name), None)

    def add(self, account: Account) -> None:
        accounts = self.load()
        if any(a.name == account.name for a in accounts):
            raise BotpsyError(
                f"There is already an account named {account.name!r}.",
                "Choose another name, or remove it first with `botpsy account remove`.",
            )
        self.save([*accounts, account])

    def remove(self, name: str) -> Account:
        accounts = self.load()
        found = next((a for a in accounts if a.name == name), None)
        if found is None:
            names = ", ".join(a.name for a in accounts) or "none"
            raise BotpsyError(
                f"There is no account named {name!r} (accounts: {names}).",
                "List them with `botpsy account list`.",
            )
        self.save([a for a in accounts if a.name != name])
        return found

    def save(self, accounts: list[Account]) -> None:
        """Write the file atomically with owner-only permissions."""
        self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.file.with_suffix(".json.tmp")
        text = json.dumps(
            [a.model_dump(mode="json", exclude_none=True) for a in accounts], indent=2
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        os.replace(tmp, self.file)


def validation_sentence(exc: ValidationError) -> str:
    """A pydantic error as one sentence naming each field ("imap_port: ..."), for a person
    adding an account (`botpsy account add`, the window's form)."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc']))}: " * bool(e["loc"])
        + str(e["msg"]).removeprefix("Value error, ")
        for e in exc.errors()
    )
