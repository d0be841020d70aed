"""Argument-aware policy: what a call really does, from its declared effects and arguments."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.tools import Effect, Tier, Tool
from botpsy_desktop.core.tools import ALL_ARGUMENTS

ALL_EFFECTS = frozenset(Effect)
"""What a tool with undeclared (or unknown) effects is assumed to do: everything."""

NEVER_SCOPED = frozenset({Effect.MONEY, Effect.DESTRUCTIVE})
"""Effects that are never allowed for a whole conversation: each such call asks."""

EFFECT_REASONS: dict[Effect, str] = {
    Effect.LOCAL_WRITE: "it changes something on this computer",
    Effect.OUTBOUND: "it sends something off this computer",
    Effect.MONEY: "it involves money (payments always ask)",
    Effect.PERSONAL_DATA: "your personal data (a file or message) would leave with it",
    Effect.DESTRUCTIVE: "it deletes or throws something away",
}


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split(" "))


# The first word of a tool's name (its verb) can reveal an effect its declaration left out.
_MONEY_VERBS = _set("pay purchase buy checkout transfer donate wire refund subscribe charge")
_OUTBOUND_VERBS = _set(
    "send reply forward invite share post publish upload tweet notify submit fetch download browse"
)
_DESTRUCTIVE_VERBS = _set("delete remove trash erase wipe purge destroy unlink overwrite drop")

# Argument names, as whole words of the (lowercased) name.
_RECIPIENT_KEYS = _set(
    "to cc bcc recipient recipients attendee attendees invitee invitees guests forward "
    "reply_to address addresses email emails"
)
_ATTACH_WORDS = _set("attach attachment attachments file files document documents")
_PATH_KEYS = _set(
    "path paths source destination folder file files target dir directory attachment attachments"
)
_AMOUNT_KEYS = _set("amount total price sum cost value")
_CURRENCY_KEYS = frozenset({"currency"})
_PAYEE_KEYS = _set("payee recipient to merchant beneficiary account iban vendor seller shop store")
_SUBJECT_KEYS = frozenset({"subject", "title", "summary"})
_BODY_KEYS = frozenset({"body", "text", "message", "content", "description", "note"})

URL_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]{1,15}://[^\s\"'<>]+")
EMAIL_RE = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
"""An e-mail address in any text. It starts only where a run of address characters starts (the
look-behind), so a long run with no ``@`` is scanned once, not once per character: linear time
on every argument (``tools/bench_scanner.py`` measures a 1 MB argument)."""
_PATHLIKE_RE = re.compile(r"^(~|/|[A-Za-z]:[\\/]|\.{1,2}/)")

MAX_LINE_CHARS = 400


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def _key_is(key: str, keys: frozenset[str]) -> bool:
    low = key.lower()
    return low in keys or bool(_words(low) & keys)


def is_recipient(key: str) -> bool:
    """A recipient-like argument name; an id (``reply_to_id``) names a message, not a person."""
    low = key.lower()
    return _key_is(low, _RECIPIENT_KEYS) and not (low.endswith("_id") or low == "id")


def leaves(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every scalar inside an argument value as (argument name, text)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from leaves(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list | tuple):
        for v in value:
            yield from leaves(v, key)
    elif value is not None:
        yield key, value if isinstance(value, str) else json.dumps(value, default=str)


def _values(value: Any) -> list[str]:
    return [text for _, text in leaves(value)]


def _shown(text: str) -> str:
    text = " ".join(text.split()) if "\n" not in text else text
    if len(text) <= MAX_LINE_CHARS:
        return text
    left = len(text) - MAX_LINE_CHARS
    return f"{text[:MAX_LINE_CHARS]}… (+{left:,} more characters, shown whole below)"


@dataclass(frozen=True)
class Assessment:
    """What one call does: effects declared and inferred, in plain words, and why it asks."""

    tool: str
    declared: frozenset[Effect]
    effects: frozenset[Effect]
    undeclared: bool
    lines: tuple[str, ...]
    reasons: tuple[str, ...]
    targets: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def read_only(self) -> bool:
        return self.effects == frozenset({Effect.READ})

    @property
    def scopable(self) -> bool:
        """May "allow for this conversation" cover later calls like this one?"""
        return not self.undeclared and not (self.effects & NEVER_SCOPED)


class Policy:
    """Reads a call's arguments to find what it does, beyond what the tool declares.

    Rules (each only adds effects, never takes a declared one away):

    * a tool with no declared effects, or effects this version does not know, is treated as
      doing everything (money, outbound, deletion, personal data);
    * a name whose first word is pay/buy/transfer..., or a currency or IBAN argument: money;
    * a name whose first word is send/forward/invite/fetch..., a web address in any argument,
      or e-mail addresses in to/cc/attendees of a tool that is not read-only: outbound;
    * an outbound call that names a file (attachments, paths): personal data, and the receipt
      lists the files that leave the computer;
    * a name whose first word is delete/trash/erase...: destructive.
    """

    def assess(self, tool: Tool, arguments: Mapping[str, Any]) -> Assessment:
        declared_raw = frozenset(tool.effects)
        known_set: set[Effect] = set()
        unknown = False
        for effect in declared_raw:
            try:
                known_set.add(Effect(effect))
            except ValueError:
                unknown = True
        known = frozenset(known_set)
        undeclared = not known or unknown
        verb = next(iter(re.split(r"[^a-z0-9]+", tool.name.lower())), "")
        effects: set[Effect] = set(ALL_EFFECTS if undeclared else known)
        inferred: dict[Effect, str] = {}

        def infer(effect: Effect, why: str) -> None:
            if effect not in effects:
                effects.add(effect)
                inferred.setdefault(effect, why)

        if verb in _MONEY_VERBS:
            infer(Effect.MONEY, f"its name says it will {verb}")
        if any(_key_is(k, _CURRENCY_KEYS | frozenset({"iban"})) for k in arguments):
            infer(Effect.MONEY, "its arguments name a currency or a bank account")
        if verb in _OUTBOUND_VERBS:
            infer(Effect.OUTBOUND, f"its name says it will {verb}")
        urls = [u for _, text in leaves(dict(arguments)) for u in URL_RE.findall(text)]
        # a web address in an argument this app's own tool declares it sends (the page to open)
        # is what the tool is for: its tier and the gate's taint rules decide, not a guess
        own = set() if tool.author or ALL_ARGUMENTS in tool.sends else set(tool.sends)
        others = {k: v for k, v in arguments.items() if k not in own}
        if any(URL_RE.search(text) for _, text in leaves(others)):
            infer(Effect.OUTBOUND, "an argument is a web address, which would be contacted")
        kept = set() if tool.author else set(tool.stores)  # addresses stored, not contacted
        if (
            known != {Effect.READ}
            and tool.tier_for(arguments) is not Tier.ASK  # asks anyway: no untrue reason
            and any(
                is_recipient(k) and k not in kept and any(EMAIL_RE.search(t) for t in _values(v))
                for k, v in arguments.items()
            )
        ):
            infer(Effect.OUTBOUND, "it names people by e-mail address, who would be contacted")
        if verb in _DESTRUCTIVE_VERBS:
            infer(Effect.DESTRUCTIVE, f"its name says it will {verb} something")
        files_out: list[str] = []
        if Effect.OUTBOUND in effects:
            for key, value in arguments.items():
                for text in _values(value):
                    if _key_is(key, _ATTACH_WORDS) or (
                        _key_is(key, _PATH_KEYS) and _PATHLIKE_RE.match(text.strip())
                    ):
                        files_out.append(text)
            if files_out:
                infer(Effect.PERSONAL_DATA, "it would send files from this computer")
        if effects - {Effect.READ} and Effect.READ not in known:
            effects.discard(Effect.READ)

        lines = self._lines(tool, arguments, frozenset(effects), undeclared, urls, files_out)
        reasons: list[str] = []
        if undeclared:
            reasons.append(
                f"{tool.name} does not declare what it does, so it is treated as the most "
                "dangerous kind of tool"
            )
        else:
            for effect in (
                Effect.MONEY,
                Effect.PERSONAL_DATA,
                Effect.OUTBOUND,
                Effect.DESTRUCTIVE,
                Effect.LOCAL_WRITE,
            ):
                if effect in effects:
                    why = EFFECT_REASONS[effect]
                    if effect in inferred:
                        why += f" (not declared by the tool, but {inferred[effect]})"
                    reasons.append(why[:1].upper() + why[1:])
        return Assessment(
            tool=tool.name,
            declared=known,
            effects=frozenset(effects),
            undeclared=undeclared,
            lines=tuple(lines),
            reasons=tuple(reasons),
            targets=_targets(arguments),
        )

    def _lines(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        effects: frozenset[Effect],
        undeclared: bool,
        urls: list[str],
        files_out: list[str],
    ) -> list[str]:
        lines: list[str] = []
        declared = tool.summary is not None  # the tool's own words say who, what and where
        lines.extend(tool.notes)  # where the tool comes from (a tool server's, its hints)
        if undeclared:
            lines.append(
                "This tool does not say what it does: it could send, pay, delete or change "
                "anything. Approve only if you know exactly what it is."
            )
        if Effect.MONEY in effects:
            amounts = [v for k, v in arguments.items() if _key_is(k, _AMOUNT_KEYS)]
            currency = [v for k, v in arguments.items() if _key_is(k, _CURRENCY_KEYS)]
            payees = [v for k, v in arguments.items() if _key_is(k, _PAYEE_KEYS)]
            amount = ", ".join(_values(amounts)) or "an amount it does not state"
            cur = f" {', '.join(_values(currency))}" if currency else ""
            payee = ", ".join(_values(payees)) or "a payee it does not state"
            lines.append(f"Pays {amount}{cur} to {payee}.")
        if Effect.OUTBOUND in effects and not declared:
            recipients = [
                text for k, v in arguments.items() if is_recipient(k) for text in _values(v)
            ]
            if recipients:
                lines.append(f"Sends to: {', '.join(recipients)}.")
            for key, value in arguments.items():
                if _key_is(key, _SUBJECT_KEYS):
                    lines.append(f"Subject: {_shown(' '.join(_values(value)))}")
            for key, value in arguments.items():
                if _key_is(key, _BODY_KEYS):
                    lines.append(f"{key.capitalize()}: {_shown(' '.join(_values(value)))}")
        if Effect.OUTBOUND in effects:
            for url in urls:
                lines.append(f"Contacts the web address {url}")
        if files_out:
            lines.append(f"These files leave this computer: {', '.join(files_out)}.")
        if declared:
            return lines
        if Effect.DESTRUCTIVE in effects:
            doomed = [
                text
                for k, v in arguments.items()
                if _key_is(k, _PATH_KEYS | frozenset({"id", "uid", "event", "alarm", "name"}))
                for text in _values(v)
            ]
            what = ", ".join(doomed) if doomed else "what its arguments name (see below)"
            lines.append(f"Deletes or throws away: {what}.")
        elif Effect.LOCAL_WRITE in effects:
            places = [
                f"{k}={text}"
                for k, v in arguments.items()
                if _key_is(k, _PATH_KEYS)
                for text in _values(v)
            ]
            if places:
                lines.append(f"Changes on this computer: {', '.join(places)}.")
        return lines


def _targets(arguments: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The arguments a conversation-wide allowance is limited to: who, where, which address."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for key in sorted(arguments):
        values = _values(arguments[key])
        if _key_is(key, _RECIPIENT_KEYS):  # "ann@x.org, bob@y.org": each address on its own
            values = [p.strip().casefold() for v in values for p in re.split(r"[,;]", v)]
        is_target = _key_is(key, _RECIPIENT_KEYS | _PATH_KEYS | _PAYEE_KEYS) or any(
            URL_RE.search(v) or EMAIL_RE.search(v) for v in values
        )
        if is_target:
            out.append((key, tuple(sorted({v.strip() for v in values if v.strip()}))))
    return tuple(out)


def within(
    targets: tuple[tuple[str, tuple[str, ...]], ...], granted: Mapping[str, set[str]]
) -> bool:
    """True if every target value of a call is among the values granted for that argument."""
    return all(key in granted and set(values) <= granted[key] for key, values in targets if values)
