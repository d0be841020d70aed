"""Email over IMAP and SMTP: reading as quoted untrusted data, drafting, sending, filing."""

from botpsy_desktop.adapters.email.client import MailClient
from botpsy_desktop.adapters.email.tools import MailService, email_tools, mail_service

__all__ = ["MailClient", "MailService", "email_tools", "mail_service"]
