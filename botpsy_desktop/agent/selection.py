"""Which tools a request is offered: the domains its words name, plus what the conversation used.

A small model chooses better among few tools, and a prompt with one domain's schemas is a
fraction of one with all of them. The choice is lexical and deterministic: per domain, stems
and phrases in English, French, German, Spanish, Japanese and Chinese (CJK matched as
substrings), and a few patterns (file names, paths, email addresses). It errs on the side of
offering: a request that names no domain gets every tool, the domains of the tools the
conversation already used stay offered, tools without a domain are always offered, and the loop
adds a domain when the model calls one of its tools anyway (agent/loop.py). Hand-written rather
than learned: it needs no model, no data files and no time (microseconds per request), and its
recall is measured on the evaluation cases (`botpsy eval --selection`, docs/EVALUATION.md).

Tool servers added later name their own domain (``Tool.domain``); their words are the domain's
name and the parts of their tools' names, unless ``extra_words`` gives better ones.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.core.tools import Tool, ToolRegistry

# Words are lower case without accents. A word of four letters or more matches as a stem
# (the start of a word: "remind" finds "reminders"); shorter ones, and those ending in "$", match
# whole words only. An entry with a space is a phrase (its words in a row, the last one a stem).
# CJK entries match anywhere in the text. Days and times name no domain on their own (alarms,
# calendar and weather all have them): "cancel yoga on thursday" is offered everything.
# fmt: off
WORDS: dict[str, tuple[str, ...]] = {
    "files": (
        # en
        "file", "folder", "directory", "document", "download", "desktop", "picture", "photo",
        "image", "screenshot", "trash", "rename", "note", "undo", "pdf", "txt", "docx", "zip",
        # fr
        "fichier", "dossier", "repertoire", "telecharg", "corbeille", "renomme", "renommer",
        # de
        "datei", "ordner", "verzeichnis", "dokument", "papierkorb", "umbenenn", "notiz", "bilder",
        # es
        "archivo", "fichero", "carpeta", "documento", "descarga", "papelera", "renombra", "imagen",
        "imagenes", "nota",
        # ja, zh
        "ファイル", "フォルダ", "書類", "ドキュメント", "写真", "画像", "ゴミ箱", "メモ", "文件",
        "目录", "文档", "照片", "图片",
        "回收站", "笔记",
    ),
    "calendar": (
        # en
        "calendar", "agenda", "schedule", "event", "meeting", "appointment", "busy", "free", "todo",
        "to do", "to-do", "task", "tick", "my plate", "a call", "what do i have", "what i have",
        "what have i got", "what i've got", "what ive got", "block out",
        # fr
        "calendrier", "programme", "rendez", "reunion", "evenement", "tache", "libre", "occupe",
        # de
        "kalender", "termin", "besprechung", "aufgabe", "frei",
        # es
        "calendario", "evento", "reunion", "cita", "tarea", "pendiente", "libre", "ocupado",
        # ja, zh
        "予定", "予約", "カレンダー", "会議", "タスク", "日程", "日历", "日程", "会议", "预约",
        "任务", "待办",
    ),
    "alarms": (
        # en
        "alarm", "wake", "timer", "remind", "countdown", "snooze", "routine", "every$", "each day",
        "daily", "weekly", "weekday",
        # fr
        "alarme", "reveil", "minuteur", "rappel", "chaque", "tous les", "toutes les",
        # de
        "wecker", "weck", "erinner", "jeden", "jede", "taglich", "wochentag",
        # es
        "alarma", "despiert", "temporizador", "recordatorio", "recuerda", "cada", "todos los",
        # ja, zh
        "アラーム", "目覚まし", "タイマー", "リマインダ", "起こして", "毎", "闹钟", "计时", "定时",
        "提醒", "叫醒", "每",
    ),
    "email": (
        # en
        "email", "e-mail", "mail", "inbox", "archive", "unread", "draft", "reply", "newsletter",
        "write to me", "wrote to me",
        # fr
        "courriel", "brouillon", "repond", "boite de reception",
        # de
        "posteingang", "entwurf", "antwort",
        # es
        "correo", "borrador", "bandeja", "responde",
        # ja, zh
        "メール", "邮件", "邮箱",
    ),
    "weather": (
        # en
        "weather", "forecast", "rain", "snow", "temperature", "umbrella", "sunny", "windy", "cold",
        "hot", "warm",
        # fr
        "meteo", "quel temps", "pluie", "pleu", "neige", "chaud", "froid",
        # de
        "wetter", "regen", "regn", "schnee", "schneit", "kalt", "temperatur",
        # es
        "tiempo hace", "que tiempo", "clima", "lluvia", "llueve", "llover", "nieve", "calor",
        "frio",
        # ja, zh
        "天気", "雨", "気温", "予報", "天气", "下雨", "气温", "预报",
    ),
    "music": (
        # en
        "music", "play", "song", "track", "album", "playlist", "volume", "put on", "shuffle",
        "skip", "pause", "listen", "loud", "library",
        # fr
        "musique", "joue", "mets", "chanson", "morceau",
        # de
        "musik", "spiel", "lied", "lautstarke",
        # es
        "musica", "pon", "reproduce", "cancion", "volumen",
        # ja, zh
        "音楽", "曲", "再生", "音量", "音乐", "播放", "歌",
    ),
}
# fmt: on
PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "files": (
        re.compile(
            r"[\w-]\.(txt|md|pdf|docx?|odt|xlsx?|ods|csv|pptx?|zip|tar|gz|iso|exe|dmg|deb|"
            r"jpe?g|png|gif|heic|svg|mp4|mov|json|html?|log)\b"
        ),
        re.compile(r"(^|\s)~(/|\s|$)|\b[a-z][\w-]*/[\w-]"),
    ),
    "email": (re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+"),),
    # a request that starts with a time is one to carry out then (a routine or a reminder)
    "alarms": (
        re.compile(r"^\W*((on|this|next) \w+,? )?at \d"),
        re.compile(r"^\W*((le|ce) \w+,? )?a \d{1,2} ?h"),
        re.compile(r"^\W*((am|diesen) \w+,? )?um \d"),
        re.compile(r"^\W*((el|este) \w+,? )?a las \d"),
    ),
}
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
_NAME_NOISE = frozenset(
    {"get", "set", "list", "find", "search", "create", "update", "delete", "add", "remove",
     "read", "write", "show", "make", "new", "all", "the", "for", "and", "info", "data"}
)  # fmt: skip


def fold(text: str) -> str:
    """Lower case without accents (é -> e, ä -> a), full-width letters made plain."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    return "".join(c for c in text if not unicodedata.combining(c)).replace("\u2019", "'")


class _Lexicon:
    """One tier's words, compiled: stems, whole words, phrases and CJK substrings per domain."""

    def __init__(self, words: Mapping[str, Iterable[str]]) -> None:
        self.stems: dict[str, list[str]] = {}
        self.exact: dict[str, set[str]] = {}
        self.phrases: dict[str, list[str]] = {}
        self.cjk: dict[str, list[str]] = {}
        for domain, entries in words.items():
            for raw in entries:
                entry = fold(raw)
                if entry.endswith("$"):
                    self.exact.setdefault(domain, set()).add(entry[:-1])
                elif _CJK.search(entry):
                    self.cjk.setdefault(domain, []).append(entry)
                elif " " in entry or not entry.isalnum():
                    self.phrases.setdefault(domain, []).append(f" {entry}")
                elif len(entry) >= 4:
                    self.stems.setdefault(domain, []).append(entry)
                else:
                    self.exact.setdefault(domain, set()).add(entry)

    def domains(self, folded: str, words: Sequence[str], spaced: str) -> set[str]:
        found: set[str] = set()
        for domain, stems in self.stems.items():
            if any(w.startswith(s) for w in words for s in stems):
                found.add(domain)
        for domain, exact in self.exact.items():
            if exact.intersection(words):
                found.add(domain)
        for domain, phrases in self.phrases.items():
            if any(p in spaced for p in phrases):
                found.add(domain)
        for domain, parts in self.cjk.items():
            if any(p in folded for p in parts):
                found.add(domain)
        return found


def _server_words(domain: str, tools: Iterable[Tool]) -> list[str]:
    """Words for a domain the lexicon does not know (a tool server): its name, its tools' names."""
    words = {fold(domain).replace("_", " ").replace("-", " ")}
    for tool in tools:
        for part in tool.name.split("_"):
            if len(part) >= 4 and part.lower() not in _NAME_NOISE:
                words.add(fold(part))
    return sorted(w for w in words if w)


@dataclass(frozen=True)
class Choice:
    """The tools offered to one request, in the registry's order, and why."""

    names: tuple[str, ...]
    domains: tuple[str, ...]
    """The domains offered (sorted); empty when everything is offered."""
    everything: bool
    reason: str


class ToolSelector:
    """Picks the tools of a request from the registry (see the module's notes)."""

    def __init__(
        self, registry: ToolRegistry, extra_words: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        self.registry = registry
        by_domain: dict[str, list[Tool]] = {}
        for tool in registry:
            by_domain.setdefault(tool.domain, []).append(tool)
        self.by_domain = by_domain
        strong: dict[str, list[str]] = {d: list(w) for d, w in WORDS.items()}
        for domain, tools in by_domain.items():
            if domain and domain not in strong:
                strong[domain] = _server_words(domain, tools)
        for domain, words in (extra_words or {}).items():
            strong.setdefault(domain, []).extend(words)
        self._lexicon = _Lexicon(strong)

    def domains_of(self, text: str) -> set[str]:
        """The domains ``text`` names, by its words and patterns."""
        folded = fold(text)
        words = _WORD.findall(folded)
        spaced = " " + " ".join(words) + " "
        found = self._lexicon.domains(folded, words, spaced)
        for domain, patterns in PATTERNS.items():
            if any(p.search(folded) for p in patterns):
                found.add(domain)
        return {d for d in found if d in self.by_domain}

    def choose(self, text: str, used: Iterable[str] = ()) -> Choice:
        """The tools for a request ``text`` in a conversation that already called ``used``."""
        named = self.domains_of(text)
        kept = {t.domain for n in used if (t := self.registry.get(n)) is not None and t.domain}
        if not named and not kept:
            return self._everything("no domain recognised in the request")
        parts = [f"named {', '.join(sorted(named))}"] if named else []
        parts += [f"used before {', '.join(sorted(kept))}"] if kept else []
        return self.offer(named | kept, "; ".join(parts))

    def offer(self, domains: Iterable[str], reason: str = "") -> Choice:
        """The tools of ``domains`` and the tools without one, in the registry's order."""
        wanted = set(domains) & {d for d in self.by_domain if d}
        if wanted >= {d for d in self.by_domain if d}:
            return self._everything(reason or "every domain")
        names = tuple(t.name for t in self.registry if not t.domain or t.domain in wanted)
        return Choice(names, tuple(sorted(wanted)), False, reason)

    def grow(self, choice: Choice, called: Iterable[str]) -> Choice:
        """``choice`` plus the domains of registered tools the model called outside it."""
        extra = {
            t.domain
            for n in called
            if n not in choice.names and (t := self.registry.get(n)) is not None
        }
        if not extra or choice.everything:
            return choice
        return self.offer(set(choice.domains) | extra, f"{choice.reason}; grown: {sorted(extra)}")

    def schemas(self, choice: Choice) -> list[dict[str, Any]]:
        """The prompt's tool declarations for ``choice``."""
        wanted = set(choice.names)
        return [s for s in self.registry.schemas() if s["function"]["name"] in wanted]

    def warm_sets(self) -> list[Choice]:
        """The tool sets worth evaluating ahead: one per domain, then everything (the fallback)."""
        sets = [self.offer({d}, d) for d in self.by_domain if d]
        return [*(c for c in sets if not c.everything), self._everything("everything")]

    def _everything(self, reason: str) -> Choice:
        return Choice(tuple(self.registry.names()), (), True, reason)


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
    saved state of it, stay valid) and grows only when the model calls a registered tool it
    was not offered: that tool's domain is offered from the next step on. Without a selector
    every tool is offered.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        selector: ToolSelector | None,
        text: str,
        history: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.registry = registry
        self.selector = selector
        self.choice = (
            selector.choose(text, used_tools(history))
            if selector is not None
            else Choice(tuple(registry.names()), (), True, "selection off")
        )
        self._schemas: list[dict[str, Any]] | None = None

    def schemas(self) -> list[dict[str, Any]]:
        """The declarations to render for this step (the same list until the set grows)."""
        if self._schemas is None:
            if self.selector is None or self.choice.everything:
                self._schemas = self.registry.schemas()
            else:
                self._schemas = self.selector.schemas(self.choice)
        return self._schemas

    def called(self, names: Iterable[str]) -> None:
        """Note the tools the model called; offer the domain of any it was not offered."""
        if self.selector is None:
            return
        grown = self.selector.grow(self.choice, names)
        if grown != self.choice:
            self.choice, self._schemas = grown, None
