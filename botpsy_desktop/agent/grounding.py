"""Grounding: whether a call's tool and values come from what the person typed in this request.

In the manner of CaMeL, FIDES and Progent, which separate *control* (what the person asked
for) from *data* (what the assistant read): a reversible change whose tool and every value come
from the request the person is typing now is theirs, whatever else the conversation holds, and
runs at once with Undo (agent/gate.py). Anything else keeps asking.

Conservative on purpose; each rule only ever makes a call ungrounded:

* **typed now**: the request is the person's typing in the window or the CLI, not a routine's
  stored request, a background run or another app's request over MCP;
* **asked for**: the request names the tool's action (its own words, :data:`ASKS_FOR`, in the
  nine languages the app answers in: "timer", "minuteur", "Wecker", "タイマー"...), and, when
  the app's tool selection runs, the selection model puts the request's own text (not the
  conversation's) in the tool's domain. A tool without words here is never grounded;
* **every value typed**: each argument the model gave (left-out and default values aside) is
  made of the request's own words. Numbers and times are normalised ("10" = "ten" = "dix";
  "7" = "7:00"; "7 pm" = "19:00") and must each appear in the request; a number one tool of
  this request used cannot ground another tool's value (the "10" of "a timer for 10 minutes"
  is not a 10 o'clock alarm); words are compared folded (case, accents, width), with
  inflections ("remind"/"reminder") and a few words that carry no choice (time units, "am",
  "pm", articles, a note's ".txt") allowed; a path's folder part may be one of the person's
  configured folders. A value the model took from anywhere else (a file, a mail, a tool
  server's text, its own reply written while reading them) is not in the request, so it is
  not grounded, even when it also appears there.

Written by hand: the rules are the gate's, small, and have to be reviewed word by word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botpsy_desktop.agent.cues import CJK, fold, names_action
from botpsy_desktop.core.tools import Tool


# Words a value may hold without the request typing them: they carry no choice of their own.
def _split(words: str) -> frozenset[str]:
    return frozenset(words.split())


_FREE = _split(
    # time units and clock words
    "minute minutes min mins m hour hours hr hrs h second seconds sec secs s am pm a.m "
    "p.m o'clock oclock in at for from now and up me "
    # articles and small words
    "the a an to of on my le la les l un une de du des d der die das den dem ein eine "
    "el los las lo il gli i di da o os um uma het een van en y e et und "
    # note file endings
    "txt md"
)

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_TIME = re.compile(r"(?<!\d)(\d{1,2})\s*(?:[:h.]|uhr\s*)\s*(\d{2})(?!\d)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_PM = re.compile(r"\b(?:pm|p\.m\.?)(?!\w)|\b\d{1,2}\s*pm\b", re.IGNORECASE)

_NUMBER_WORDS: dict[str, int] = {}
for _lang in (
    # en, fr, de, es, it, pt, nl: one to twelve, then 15, 20, 30, 45, 60
    "one two three four five six seven eight nine ten eleven twelve fifteen twenty thirty "
    "forty-five sixty",
    "un deux trois quatre cinq six sept huit neuf dix onze douze quinze vingt trente "
    "quarante-cinq soixante",
    "eins zwei drei vier funf sechs sieben acht neun zehn elf zwolf funfzehn zwanzig "
    "dreissig funfundvierzig sechzig",
    "uno dos tres cuatro cinco seis siete ocho nueve diez once doce quince veinte treinta "
    "cuarenta-y-cinco sesenta",
    "uno due tre quattro cinque sei sette otto nove dieci undici dodici quindici venti "
    "trenta quarantacinque sessanta",
    "um dois tres quatro cinco seis sete oito nove dez onze doze quinze vinte trinta "
    "quarenta-e-cinco sessenta",
    "een twee drie vier vijf zes zeven acht negen tien elf twaalf vijftien twintig dertig "
    "vijfenveertig zestig",
):
    for _value, _word in zip((*range(1, 13), 15, 20, 30, 45, 60), _lang.split(), strict=True):
        _NUMBER_WORDS.setdefault(_word, _value)
for _word, _value in {"une": 1, "ein": 1, "eine": 1, "einen": 1, "una": 1, "uma": 1}.items():
    _NUMBER_WORDS.setdefault(_word, _value)
_CJK_NUMBERS = {
    "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
    "十": 10, "十五": 15, "二十": 20, "三十": 30, "半": 30,
}  # fmt: skip


@dataclass(frozen=True)
class Request:
    """The text the person typed in this request, read for grounding."""

    text: str

    @property
    def folded(self) -> str:
        return fold(self.text)

    def words(self) -> set[str]:
        return set(_WORD.findall(self.folded))

    def numbers(self) -> set[str]:
        """Every number and time the request states, normalised ("7" -> "7", "7:00";
        "7:30" -> "7:30"; "ten" -> "10"; "7 pm" -> also "19:00")."""
        text = self.folded
        found: set[str] = set()
        pm = bool(_PM.search(text))
        for match in _TIME.finditer(text):
            hour, minute = int(match.group(1)), int(match.group(2))
            found.add(f"{hour}:{minute:02d}")
            if pm and hour < 12:
                found.add(f"{hour + 12}:{minute:02d}")
            if minute == 0:
                found.add(str(hour))
        rest = _TIME.sub(" ", text)
        for match in _NUMBER.finditer(rest):
            found |= _number_forms(match.group(0), pm)
        for word in _WORD.findall(rest):
            value = _NUMBER_WORDS.get(word)
            if value is not None:
                found |= _number_forms(str(value), pm)
        for chars, value in _CJK_NUMBERS.items():
            if chars in text:
                found |= _number_forms(str(value), False)
        return found


def _number_forms(number: str, pm: bool) -> set[str]:
    """A number and the clock times it may stand for ("7" -> "7", "7:00", "19:00" with pm)."""
    number = number.replace(",", ".")
    try:
        value = float(number)
    except ValueError:
        return {number}
    if value != int(value):
        return {number}
    n = int(value)
    forms = {str(n)}
    if 0 <= n <= 24:
        forms.add(f"{n}:00")
        if pm and n < 12:
            forms |= {str(n + 12), f"{n + 12}:00"}
    return forms


def value_numbers(text: str) -> list[str]:
    """The numbers and times a value states, normalised as :meth:`Request.numbers` does."""
    folded = fold(text)
    found: list[str] = []
    for match in _TIME.finditer(folded):
        hour, minute = int(match.group(1)), int(match.group(2))
        found.append(f"{hour}:{minute:02d}" if minute else str(hour))
    rest = _TIME.sub(" ", folded)
    for match in _NUMBER.finditer(rest):
        number = match.group(0).replace(",", ".")
        try:
            value = float(number)
            found.append(str(int(value)) if value == int(value) else number)
        except ValueError:
            found.append(number)
    for word in _WORD.findall(rest):
        if word in _NUMBER_WORDS and word not in _FREE:
            found.append(str(_NUMBER_WORDS[word]))
    if pm_value(folded):
        found = [_pm(n) for n in found]
    return found


def pm_value(folded: str) -> bool:
    return bool(_PM.search(folded))


def _pm(number: str) -> str:
    hour, _, minute = number.partition(":")
    if hour.isdigit() and int(hour) < 12:
        return f"{int(hour) + 12}:{minute}" if minute else str(int(hour) + 12)
    return number


def _word_typed(word: str, typed: set[str]) -> bool:
    if word in typed or word in _FREE or word in _NUMBER_WORDS or word.isdigit():
        return True
    if len(word) < 4:
        return False
    return any(len(t) >= 4 and (word.startswith(t) or t.startswith(word)) for t in typed)


def asks_for(tool: Tool, request: Request) -> bool:
    """Does the request name the tool's action in its own words?"""
    if tool.author:
        return False
    return names_action(tool.name, request.folded)


@dataclass(frozen=True)
class Grounding:
    """The answer for one call: grounded or not, why not, and the numbers it used."""

    grounded: bool
    why: str = ""
    numbers: tuple[str, ...] = ()


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _defaults(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in tool.args_model.model_fields.items():
        if not info.is_required():
            out[name] = info.default
    return out


def _strip_folder(text: str, folders: Iterable[str]) -> str:
    """A path without the person's home or configured folder it starts with."""
    value = text.strip()
    candidates = sorted(
        {str(Path(f).expanduser()) for f in folders} | {str(Path.home()), "~"},
        key=len,
        reverse=True,
    )
    for folder in candidates:
        if folder and (value == folder or value.startswith(folder.rstrip("/") + "/")):
            return value[len(folder) :]
    return value


def text_grounded(
    value: str,
    request: Request,
    *,
    folders: Iterable[str] = (),
    used_elsewhere: Iterable[str] = (),
) -> tuple[bool, str, list[str]]:
    """Whether ``value`` is made of the request's words and numbers; why not; numbers used."""
    typed_numbers = request.numbers() - set(used_elsewhere)
    text = _strip_folder(value, folders) if ("/" in value or "\\" in value) else value
    numbers = value_numbers(text)
    for number in numbers:
        if number not in typed_numbers:
            return False, f"“{number}” is not a number or time you typed in this request", []
    folded = fold(_TIME.sub(" ", text))
    typed = request.words()
    for char in CJK.findall(folded):
        if char not in request.folded:
            return False, f"“{char}” is not in what you typed in this request", []
    for word in _WORD.findall(CJK.sub(" ", folded)):
        if not _word_typed(word, typed):
            return False, f"“{word}” is not in what you typed in this request", []
    return True, "", numbers


def ground(
    tool: Tool,
    arguments: Mapping[str, Any],
    request: Request | None,
    *,
    domains: set[str] | None = None,
    folders: Iterable[str] = (),
    used: Mapping[str, str] | None = None,
) -> Grounding:
    """Whether this call is the person's own, typed in this request (see the module's notes).

    ``domains``: the domains the request's own text points to (None: no selection runs, the
    tool's action words alone decide). ``used``: numbers earlier changes of this request used,
    each with the tool that used it (another tool cannot use them again)."""
    if request is None or not request.text.strip():
        return Grounding(False, "this request was not typed by you just now")
    if tool.author:
        return Grounding(False, "it is a tool server's tool")
    if not asks_for(tool, request):
        return Grounding(False, "your request does not ask for this action in its own words")
    if domains is not None and tool.domain and tool.domain not in domains:
        return Grounding(False, f"your request is not about {tool.domain}")
    elsewhere = {n for n, by in (used or {}).items() if by != tool.name}
    defaults = _defaults(tool)
    numbers: list[str] = []
    for key, value in arguments.items():
        if key in defaults and value == defaults[key]:
            continue
        for leaf in _leaves(value):
            if leaf is None or leaf == "":
                continue
            if isinstance(leaf, bool):
                return Grounding(False, f"{key} is a choice your request does not state")
            ok, why, found = text_grounded(
                str(leaf), request, folders=folders, used_elsewhere=elsewhere
            )
            if not ok:
                return Grounding(False, f"{key}: {why}")
            numbers += found
    return Grounding(True, numbers=tuple(dict.fromkeys(numbers)))
