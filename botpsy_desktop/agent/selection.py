"""Which tools a request is offered: the domains its meaning points to, and the conversation's.

A small model chooses better among few tools, and a prompt with one domain's schemas is a
fraction of one with all of them. The app's domains are scored by the selection model
(agent/selection_model.py: character n-grams and a linear classifier trained offline on
requests in eleven languages, typos included), one probability per domain and one for "needs
no tool". A request is offered:

- every domain that reaches the offer threshold;
- the domains of the conversation's last exchange: the tools it called and what its user and
  assistant turns were about, so that "move it to 11" or "answer her that Tuesday works" keep
  the calendar or the mail tools even when the earlier turn only talked;
- when it is unsure (no domain reaches the "sure" score), names no tool server and there is no
  conversation to go by, also every domain with a fair chance (the "wide" score or more) and
  the tool servers' domains (the model cannot rule out what it does not know), and every tool
  when no domain has a fair chance: a tool missing from the prompt fails the request, while a
  longer prompt only costs time;
- the domains of tool servers (an MCP server's ``Tool.domain``, unknown to the model) whose
  name or tool names it mentions (not their descriptions: a server's own free text);
- tools without a domain, always.

A request that has no conversation to go by, names no tool server and reads as chit-chat ("good
morning", "how are you?": "no tool" scores the chit-chat threshold or more, and more than any
domain) is offered no domain's tools. The four thresholds come with the model file:
tools/selection/train.py picks them by cross-validation on its training phrases. Every tool is
also offered when the model file is missing or damaged (logged), or when the domains chosen are
all there are. During the request the set grows (:class:`RequestTools`, agent/loop.py): a tool
the model calls outside it brings its domain, so does an unknown tool name that points to one
("send_mail"), and so does an answer, before any call, whose first sentence points to a domain
it was not offered ("I can't read your email"): that answer is dropped unseen and the step
asked again. A second chance within the same request, instead of every tool up front.

Figures (recall, fallbacks, extra domains, prompt sizes) on the shipped cases and on a held-out
set: ``botpsy eval --selection`` and docs/EVALUATION.md.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.cues import CANNOT
from botpsy_desktop.agent.selection_model import ModelError, SelectionModel, shipped_model
from botpsy_desktop.core.tools import Tool, ToolRegistry

log = logging.getLogger(__name__)

OFFER = 0.5
"""The score a domain must reach to be offered, unless the model file names its own."""
SURE = 0.8
"""Below this top score a request with no conversation to go by is unsure (see WIDE)."""
CHAT = 0.3
"""The "no tool" score at or above which (and above every domain's) a request is chit-chat."""
WIDE = 2.0
"""When unsure, also the domains scoring this or more are offered (every tool when none does);
above 1: every tool when unsure (a model file without its own "wide" threshold)."""
ASSISTANT = 0.5
"""The score an assistant turn's text must reach for its domain to count as the conversation's."""
LACKING = 0.5
"""The score the model's answer must reach for a domain it was not offered to be offered."""


COMPANIONS: dict[str, frozenset[str]] = {"people": frozenset({"email", "calendar"})}
"""Domains the selection model does not score that join the domains they serve: the address
book's tools come with every request offered mail or the calendar ("email Ana", "invite
Marco": a person named with a mail or calendar request), and with one that uses their words."""

LEXICONS: dict[str, tuple[str, ...]] = {
    "people": (
        # en, fr, de, es, it, pt, nl
        "contact", "address book", "phone number", "birthday", "anniversary", "nickname",
        "carnet d'adresses", "telephone", "anniversaire", "surnom",
        "kontakt", "adressbuch", "telefonnummer", "geburtstag", "jahrestag", "spitzname",
        "contacto", "libreta de direcciones", "telefono", "cumpleanos", "aniversario", "apodo",
        "contatt", "rubrica", "compleanno", "anniversario", "soprannome",
        "contato", "catalogo de enderecos", "aniversario", "apelido",
        "adresboek", "telefoonnummer", "verjaardag", "bijnaam",
        # ru, hi, ko, ja, zh (matched inside words: no spaces between words, or inflections)
        "контакт", "адресн", "телефон", "день рождения", "дня рождения", "днем рождения",
        "годовщин", "संपर्क", "जन्मदिन", "फ़ोन नंबर", "फोन नंबर",
        "연락처", "주소록", "전화번호", "생일", "연락처", "連絡先", "アドレス帳", "電話番号",
        "誕生日", "联系人", "通讯录", "电话号码", "生日", "聯絡人", "電話號碼",
    )
}  # fmt: skip
"""Words that name a companion domain's own business ("birthday", "Adressbuch", "生日"),
folded; matched where a word starts (inside the text for the scripts without spaces)."""

_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(
    {
        "get", "set", "list", "find", "search", "create", "update", "delete", "add", "remove",
        "read", "write", "show", "make", "new", "all", "the", "for", "and", "info", "data", "with",
        "from", "that", "this", "into", "your", "their", "tool", "tools", "server", "returns",
        "return", "given", "using", "used", "uses", "about", "when", "what", "which", "will",
        "only", "more", "than", "each", "other", "also", "them", "then", "there", "these", "those",
        "have",
        "has", "been", "being", "does", "done", "were", "what's", "name", "names", "value",
        "values", "text", "string", "optional", "default", "example", "current",
    }
)  # fmt: skip


def fold(text: str) -> str:
    """Lower case without accents (é -> e, ä -> a), full-width letters made plain."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    return "".join(c for c in text if not unicodedata.combining(c)).replace("\u2019", "'")


def _server_words(domain: str, tools: Iterable[Tool], extra: Iterable[str] = ()) -> set[str]:
    """Words that name a tool server's domain: its name (the user's; three letters or more, so
    "git" counts), its tools' names (four letters or more, common words left out), and
    ``extra``. Not the descriptions: they are the server's own free text, and one stuffed with
    common words would put it in every prompt."""
    own = set(_WORD.findall(fold(domain).replace("_", " ").replace("-", " ")))
    words: set[str] = set()
    for tool in tools:
        words.update(_WORD.findall(fold(tool.name).replace("_", " ")))
    words.update(fold(w) for w in extra)
    found = {w for w in words if len(w) >= 4 and w not in _STOP and not w.isdigit()}
    return found | {w for w in own if len(w) >= 3 and w not in _STOP and not w.isdigit()}


@dataclass(frozen=True)
class Choice:
    """The tools offered to one request, in the prompt's order, and why."""

    names: tuple[str, ...]
    domains: tuple[str, ...]
    """The domains offered (sorted); empty when everything, or no domain, is offered."""
    everything: bool
    reason: str
    order: tuple[str, ...] = ()
    """The domains in the order the prompt lists their tools (see :meth:`ToolSelector.offer`);
    empty: the registry's order."""


class ToolSelector:
    """Picks the tools of a request from the registry (see the module's notes)."""

    def __init__(
        self,
        registry: ToolRegistry,
        extra_words: Mapping[str, Iterable[str]] | None = None,
        model: SelectionModel | None = None,
    ) -> None:
        self.registry = registry
        by_domain: dict[str, list[Tool]] = {}
        for tool in registry:
            by_domain.setdefault(tool.domain, []).append(tool)
        self.by_domain = by_domain
        self.model: SelectionModel | None = model
        self.problem = ""
        if model is None:
            try:
                self.model = shipped_model()
            except ModelError as exc:
                self.problem = str(exc)
                log.warning("tool selection offers every tool: %s", exc)
        known = set(self.model.classes) if self.model is not None else set()
        self.modelled = {d for d in by_domain if d and d in known}
        """The registry's domains the model scores."""
        extra = extra_words or {}
        self.lexicons = {
            d: tuple(fold(w) for w in LEXICONS.get(d, ()))
            for d in by_domain
            if d in COMPANIONS and d not in self.modelled
        }
        """The companion domains (:data:`COMPANIONS`) of the registry, with their words."""
        self.server_words = {
            d: _server_words(d, tools, extra.get(d, ()))
            for d, tools in by_domain.items()
            if d and d not in self.modelled and d not in self.lexicons
        }
        """The other domains (tool servers, a user's own), found by their words."""
        thresholds = self.model.thresholds if self.model is not None else {}
        self.offer_at = thresholds.get("offer", OFFER)
        self.sure_at = thresholds.get("sure", SURE)
        self.chat_at = thresholds.get("chat", CHAT)
        self.wide_at = thresholds.get("wide", WIDE)

    def scores(self, text: str) -> dict[str, float]:
        """The model's probability per domain of the registry, and for "none" (no tool)."""
        if self.model is None or not text.strip():
            return {}
        scores = self.model.scores(text)
        return {d: p for d, p in scores.items() if d in self.modelled or d == "none"}

    def _servers_named(self, text: str) -> set[str]:
        words = _WORD.findall(fold(text))
        found = set()
        for domain, names in self.server_words.items():
            if any(w == n or (len(n) >= 5 and w.startswith(n)) for w in words for n in names):
                found.add(domain)
        return found

    def _lexicon_named(self, text: str) -> set[str]:
        folded = " " + " ".join(_WORD.findall(fold(text))) + " "
        return {
            d
            for d, words in self.lexicons.items()
            if any((f" {w}" in folded) if w.isascii() else (w in folded) for w in words)
        }

    def domains_of(self, text: str, at: float | None = None) -> set[str]:
        """The domains ``text`` points to: model scores at ``at`` (default: the offer
        threshold) or above, and tool servers whose words it uses."""
        at = self.offer_at if at is None else at
        scores = self.scores(text)
        named = {d for d, p in scores.items() if d != "none" and p >= at}
        return named | self._servers_named(text) | self._lexicon_named(text)

    def conversation_domains(self, history: Sequence[Mapping[str, Any]]) -> set[str]:
        """The domains of the conversation's last exchange: the tools called since its last
        user turn (and the one before), what that user turn asked, what the assistant said."""
        users = [i for i, m in enumerate(history) if m.get("role") == "user"]
        if not users:
            return set()
        found: set[str] = set()
        for name in used_tools(history[users[-2] if len(users) > 1 else users[-1] :]):
            tool = self.registry.get(name)
            if tool is not None and tool.domain:
                found.add(tool.domain)
        last = history[users[-1] :]
        found |= self.domains_of(str(last[0].get("content") or ""))
        for m in last[1:]:
            if m.get("role") == "assistant" and m.get("content"):
                found |= self.domains_of(str(m["content"]), max(ASSISTANT, self.offer_at))
        return found

    def choose(
        self, text: str, history: Sequence[Mapping[str, Any]] | Iterable[str] = ()
    ) -> Choice:
        """The tools for a request ``text`` after the conversation ``history`` (its stored
        messages; a list of tool names is taken as the tools it called)."""
        if self.model is None:
            return self._everything(f"no selection model ({self.problem})")
        items = list(history)
        if items and all(isinstance(h, str) for h in items):
            items = [{"role": "assistant", "tool_calls": [_call(str(n)) for n in items]}]
            items.insert(0, {"role": "user", "content": ""})
        messages: list[Mapping[str, Any]] = [h for h in items if isinstance(h, Mapping)]
        scores = self.scores(text)
        named = {d for d, p in scores.items() if d != "none" and p >= self.offer_at}
        named |= self._servers_named(text) | self._lexicon_named(text)
        kept = self.conversation_domains(messages) - named
        parts = [f"named {', '.join(sorted(named))}"] if named else []
        parts += [f"conversation {', '.join(sorted(kept))}"] if kept else []
        modelled = {d: p for d, p in scores.items() if d != "none"}
        # a tool server, or a companion domain, named by its words
        servers = named & (set(self.server_words) | set(self.lexicons))
        top = max(modelled.values(), default=0.0)
        chat = scores.get("none", 0.0)
        if not kept and not servers and chat >= self.chat_at and chat > top:
            return self.offer(set(), f"no tool needed (chit-chat {chat:.2f}, top domain {top:.2f})")
        if not kept and not servers and top < self.sure_at:
            # unsure, and no conversation to go by: a missing tool fails the request, a longer
            # prompt only costs time, so every domain with a fair chance is offered too, and
            # the tool servers' (the model knows nothing of them, so it cannot rule them out)
            wide = {d for d, p in modelled.items() if p >= self.wide_at}
            if self.wide_at > 1 or not wide:
                return self._everything(f"unsure (top domain score {top:.2f} < {self.sure_at:g})")
            wide |= set(self.server_words)
            parts.append(f"unsure (top {top:.2f}): also {', '.join(sorted(wide - named))}")
            return self.offer(named | wide, "; ".join(parts))
        if not named and not kept:
            return self._everything("no domain recognised in the request")
        return self.offer(named | kept, "; ".join(parts))

    @property
    def domain_order(self) -> list[str]:
        """Every domain in the canonical order (the registry's): the order a new set lists them."""
        return [d for d in self.by_domain if d]

    def offer(
        self, domains: Iterable[str], reason: str = "", *, after: Sequence[str] = ()
    ) -> Choice:
        """The tools without a domain, then those of ``domains``, domain by domain: first the
        domains of ``after`` (a set this one extends, in its order), then the others in the
        canonical order. A set that grows thus only adds tools at the end of the prompt's list,
        and the saved state of the list before them stays usable (llm/engines/engine.py)."""
        known = self.domain_order
        wanted = set(domains) & set(known)
        wanted |= {c for c, serves in COMPANIONS.items() if wanted & serves and c in known}
        if wanted and wanted >= set(known):
            return self._everything(reason or "every domain")
        order = [d for d in dict.fromkeys(after) if d in wanted]
        order += [d for d in known if d in wanted and d not in order]
        names = tuple(t.name for t in self.registry if not t.domain)
        names += tuple(t.name for d in order for t in self.by_domain[d])
        return Choice(names, tuple(sorted(wanted)), False, reason, tuple(order))

    def size(self, domains: Iterable[str]) -> int:
        """How many tools a set of ``domains`` offers (with the tools that have no domain)."""
        wanted = set(domains)
        return sum(1 for t in self.registry if not t.domain or t.domain in wanted)

    def for_conversation(self, choice: Choice, kept: Sequence[str], cap: int) -> Choice:
        """The set a request in a conversation is offered: the conversation's set so far
        (``kept``) grown by the domains ``choice`` adds, in the canonical order, so that from
        one request to the next the prompt's start (and the model's saved state of it) stays
        the same, or, where a domain joins, stays the same up to that domain's place (the
        engine keeps the state at the end of each tool list it evaluated, llm/engines/engine.py). At
        most ``cap`` tools (a small model chooses worse among many): when the grown set would
        pass it, the request gets its own choice alone, a fresh set. A cap of 0 keeps no
        conversation set (every request its own choice)."""
        known = set(self.domain_order)
        kept = [d for d in dict.fromkeys(kept) if d in known]
        if cap <= 0 or not kept:
            return choice
        if choice.everything:
            if self.size(known) <= cap:
                return self._everything(choice.reason)
            return choice
        union = set(kept) | set(choice.domains)
        if self.size(union) > cap:
            return dataclasses.replace(
                choice,
                reason=f"{choice.reason}; a fresh set (with the conversation's it "
                f"would pass {cap} tools)",
            )
        added = [d for d in self.domain_order if d in union and d not in kept]
        reason = f"{choice.reason}; the conversation's set"
        if added:
            reason += f", grown by {', '.join(added)}"
        return self.offer(union, reason)

    def prompt_order(self, choice: Choice) -> list[str]:
        """The domains of ``choice`` in the order its prompt lists them (every domain for
        everything), what a conversation keeps (see :meth:`for_conversation`)."""
        if choice.everything:
            return self.domain_order
        return list(choice.order) or [d for d in self.domain_order if d in choice.domains]

    def kept(self, kept: Sequence[str], reason: str = "the conversation's set") -> Choice:
        """The conversation's set ``kept`` as it stands (what its next request starts with
        unless that request grows it): what the app warms after an answer."""
        return self.offer(kept, reason, after=kept)

    def grow(self, choice: Choice, called: Iterable[str]) -> Choice:
        """``choice`` plus the domains of the tools the model called outside it: a registered
        tool's own, or the domain an unknown tool name points to ("send_mail": email)."""
        if choice.everything:
            return choice
        extra: set[str] = set()
        for name in called:
            if name in choice.names:
                continue
            tool = self.registry.get(name)
            if tool is not None:
                extra |= {tool.domain} if tool.domain else set()
            elif name:
                extra |= self.domains_of(name.replace("_", " ").replace("-", " "), 0.5)
        extra -= set(choice.domains)
        if not extra:
            return choice
        return self.offer(
            set(choice.domains) | extra,
            f"{choice.reason}; grown: {sorted(extra)}",
            after=self.prompt_order(choice),
        )

    def schemas(self, choice: Choice) -> list[dict[str, Any]]:
        """The prompt's tool declarations for ``choice``, in its order."""
        by_name = {s["function"]["name"]: s for s in self.registry.schemas()}
        return [by_name[n] for n in choice.names if n in by_name]

    def warm_sets(self) -> list[Choice]:
        """The tool sets worth evaluating ahead: one per domain, then everything (the fallback).
        Chit-chat's set (the system prompt alone, about 60 tokens) is not worth a saved state."""
        sets = [self.offer({d}, d) for d in self.by_domain if d]
        return [*(c for c in sets if not c.everything), self._everything("everything")]

    def _everything(self, reason: str) -> Choice:
        return Choice(tuple(self.registry.names()), (), True, reason)


def stable_schemas(registry: ToolRegistry, chosen: Iterable[str] = ()) -> list[dict[str, Any]]:
    """A stable prompt's tool list: every tool of the app's own in the registry's order, then
    the tool servers' tools among ``chosen`` (their authors' words are untrusted context, read
    only when the request is about them), in ``chosen``'s order."""
    own = [t.name for t in registry if not t.author]
    servers = [n for n in chosen if (tool := registry.get(n)) is not None and tool.author]
    by_name = {s["function"]["name"]: s for s in registry.schemas()}
    return [by_name[n] for n in [*own, *servers] if n in by_name]


def _call(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": {}}}


def used_tools(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tool names a conversation's assistant turns called, in order, each once."""
    names: dict[str, None] = {}
    for m in messages:
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            name = fn.get("name") if isinstance(fn, Mapping) else None
            if isinstance(name, str):
                names[name] = None
    return list(names)


class RequestTools:
    """The tools of one request, chosen once from its text and the conversation so far.

    The set stays the same for every step of the request (the prompt's start, and the model's
    saved state of it, stay valid) and grows only when the model calls a tool it was not offered
    (a registered one, or an unknown name that points to a domain): that domain is offered from
    the next step on. Without a selector every tool is offered.

    ``kept`` is the conversation's set so far (its domains in prompt order, see
    :meth:`ToolSelector.for_conversation`): the request is offered it, grown by what its own
    choice adds, up to ``cap`` tools. ``text`` None: no new request, the conversation's set as
    it stands (what the app warms after an answer).

    ``stable``: the prompt lists every tool of the app's own (the same list for every request,
    so the model's saved state of the prompt's start, and of the conversation after it, stays
    valid whatever the request is about), then the tool servers' tools of the choice; the
    choice is what the model may call (:meth:`may_call`, the grammar's names), not what it
    reads. Else the prompt lists the choice alone.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        selector: ToolSelector | None,
        text: str | None,
        history: Sequence[Mapping[str, Any]] = (),
        *,
        kept: Sequence[str] | None = None,
        cap: int = 0,
        stable: bool = False,
    ) -> None:
        self.registry = registry
        self.selector = selector
        self.stable = stable and selector is not None
        if selector is None:
            self.choice = Choice(tuple(registry.names()), (), True, "selection off")
        elif text is None and kept and cap > 0:
            self.choice = selector.kept(kept)
        else:
            self.choice = selector.choose(text or "", history)
            if kept and cap > 0:
                self.choice = selector.for_conversation(self.choice, kept, cap)
        self._schemas: list[dict[str, Any]] | None = None
        self._calls = 0
        self._asked_again = False

    def may_lack(self) -> bool:
        """Whether the model's answer could still say it lacks a tool worth a second try: the
        set is narrowed, nothing was called yet, and no second try was made."""
        return (
            self.selector is not None
            and not self.choice.everything
            and not self._calls
            and not self._asked_again
        )

    def lacking(self, answer: str) -> list[str]:
        """The domains, not offered, that the model's ``answer`` points to ("I can't check your
        mail": email), now offered for a second try (once per request); empty: none."""
        if self.selector is None or not self.may_lack():
            return []
        if not CANNOT.search(answer):  # it did not say it cannot: it answered
            return []
        found = self.selector.domains_of(answer, LACKING) - set(self.choice.domains)
        if not found:
            return []
        self._asked_again = True
        before = set(self.choice.domains)
        self.choice = self.selector.offer(
            before | found,
            f"{self.choice.reason}; the model lacked {', '.join(sorted(found))}",
            after=self.selector.prompt_order(self.choice),
        )
        self._schemas = None
        return sorted(found)

    @property
    def order(self) -> list[str]:
        """The offered domains in prompt order: what the conversation keeps for its next
        request (empty without a selector)."""
        return [] if self.selector is None else self.selector.prompt_order(self.choice)

    def schemas(self) -> list[dict[str, Any]]:
        """The declarations to render for this step (the same list until the set grows)."""
        if self._schemas is None:
            if self.selector is None or self.choice.everything:
                self._schemas = self.registry.schemas()
            elif self.stable:
                self._schemas = stable_schemas(self.registry, self.choice.names)
            else:
                self._schemas = self.selector.schemas(self.choice)
        return self._schemas

    def may_call(self) -> frozenset[str] | None:
        """The tools this step may call when the prompt lists more than the choice (stable):
        the choice's; None: every tool the prompt lists."""
        if not self.stable or self.choice.everything:
            return None
        return frozenset(self.choice.names)

    def reached_for(self, names: Iterable[str]) -> list[str]:
        """The model began to call ``names``, outside :meth:`may_call` (it reads every tool
        in a stable prompt): offer their domains for a second try, once per request, as when
        an answer says a tool is missing (:meth:`lacking`). The domains added; empty: none
        (no second try left, or nothing to add)."""
        if self.selector is None or self._asked_again or self.choice.everything:
            return []
        before = set(self.choice.domains)
        grown = self.selector.grow(self.choice, list(names))
        added = sorted(set(grown.domains) - before)
        if grown == self.choice:
            return []
        self._asked_again = True
        self.choice, self._schemas = grown, None
        return added or ["every domain"]

    def called(self, names: Iterable[str]) -> list[str]:
        """Note the tools the model called; offer the domain of any it was not offered. The
        domains added (none: the set is unchanged)."""
        if self.selector is None:
            return []
        names = list(names)
        self._calls += len(names)
        grown = self.selector.grow(self.choice, names)
        if grown == self.choice:
            return []
        added = sorted(set(grown.domains) - set(self.choice.domains)) or ["every domain"]
        self.choice, self._schemas = grown, None
        return added
