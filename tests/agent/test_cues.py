"""agent/cues.py: one table of examples for every hand-kept cue, in the languages it knows.

A row is (language, cue, text, expected). The cues:
- ``cannot``: the answer says the assistant cannot do something (tool selection then offers a
  domain it had left out);
- ``claim:KIND:OBJECT``: the answer claims an action of KIND on OBJECT was carried out
  (agent/claims.py; OBJECT ``-`` when none is named); expected False: no such claim is read;
- ``asks:TOOL``: the request names TOOL's action in its own words (agent/grounding.py).
The claims checker's precision and recall are measured on its labelled sets by
``python tools/eval_claims.py``; this table pins single cases per language.
"""

from __future__ import annotations

import pytest

from botpsy_desktop.agent.claims import find_claims
from botpsy_desktop.agent.cues import CANNOT, fold, names_action

TABLE: list[tuple[str, str, str, bool]] = [
    # -- cannot ---------------------------------------------------------------------------
    ("en", "cannot", "Sorry, I can't check your bank account.", True),
    ("en", "cannot", "I don't have a tool for that.", True),
    ("en", "cannot", "It is sunny in Paris today.", False),
    ("de", "cannot", "Das kann ich nicht tun.", True),
    ("fr", "cannot", "Je ne peux pas ouvrir ce fichier.", True),
    ("fr", "cannot", "Voici vos fichiers.", False),
    ("es", "cannot", "No puedo acceder a tu correo.", True),
    ("it", "cannot", "Non posso farlo.", True),
    ("pt", "cannot", "Não consigo abrir isso.", True),
    ("ru", "cannot", "Я не могу это сделать.", True),
    ("hi", "cannot", "मैं यह नहीं कर सकता।", True),
    ("ja", "cannot", "それはできません。", True),
    ("zh", "cannot", "我无法访问你的日历。", True),
    ("ko", "cannot", "그것은 할 수 없습니다.", True),
    # -- claims ---------------------------------------------------------------------------
    ("en", "claim:set:timer", "Done, your timer is set for 10 minutes.", True),
    ("en", "claim:set:alarm", "Your 6:00 alarm is set.", True),
    ("en", "claim:cancel:alarm", "The alarm won't ring tomorrow.", True),
    ("en", "claim:set:timer", "Shall I set a timer for 10 minutes?", False),
    ("en", "claim:send:email", "I could not send the email.", False),
    ("fr", "claim:set:alarm", "Votre alarme est réglée pour 7 heures.", True),
    ("fr", "claim:cancel:alarm", "Le réveil ne sonnera pas demain.", True),
    ("de", "claim:set:timer", "Der Timer ist gestellt.", True),
    ("de", "claim:send:email", "Ich habe die E-Mail gesendet.", True),
    ("es", "claim:set:alarm", "La alarma está programada para las 7.", True),
    ("it", "claim:set:reminder", "Ho creato un promemoria per domani.", True),
    ("pt", "claim:set:timer", "Configurei o temporizador para 10 minutos.", True),
    ("nl", "claim:set:timer", "De timer is ingesteld.", True),
    ("zh", "claim:set:alarm", "闹钟已设置好了。", True),
    ("ja", "claim:set:timer", "タイマーをセットしました。", True),
    ("ja", "claim:set:timer", "タイマーをセットしましょうか\uff1f", False),
    # -- asks for a tool --------------------------------------------------------------------
    ("en", "asks:set_timer", "Set a timer for 10 minutes", True),
    ("en", "asks:set_timer", "What's the weather in Paris?", False),
    ("fr", "asks:set_alarm", "Réveille-moi à 7 heures", True),
    ("de", "asks:create_folder", "Leg einen Ordner Rechnungen an", True),
    ("es", "asks:set_reminder", "Recuérdame llamar a mamá", True),
    ("it", "asks:pause_music", "Metti in pausa la musica", True),
    ("pt", "asks:add_task", "Adiciona uma tarefa: comprar pão", True),
    ("nl", "asks:set_music_volume", "Zet het volume zachter", True),
    ("zh", "asks:set_timer", "设一个10分钟的计时器", True),
    ("ja", "asks:write_text_note", "メモを書いて", True),
    ("en", "asks:no_such_tool", "Set a timer for 10 minutes", False),
]


def read(cue: str, text: str) -> bool:
    kind, _, rest = cue.partition(":")
    if kind == "cannot":
        return CANNOT.search(text) is not None
    if kind == "claim":
        action, _, obj = rest.partition(":")
        return any(
            c.action == action and (obj == "-" or obj in c.objects) for c in find_claims(text)
        )
    if kind == "asks":
        return names_action(rest, fold(text))
    raise AssertionError(f"unknown cue {cue!r}")


@pytest.mark.parametrize(("lang", "cue", "text", "expected"), TABLE)
def test_cue(lang: str, cue: str, text: str, expected: bool) -> None:
    assert read(cue, text) is expected, f"{lang}: {cue} on {text!r}"


def test_every_cue_is_in_the_table_in_every_language_it_knows() -> None:
    langs: dict[str, set[str]] = {}
    for lang, cue, _, expected in TABLE:
        if expected:
            langs.setdefault(cue.split(":", 1)[0], set()).add(lang)
    nine = {"en", "fr", "de", "es", "it", "pt", "nl", "zh", "ja"}
    assert langs["cannot"] >= nine - {"nl"} | {"ru", "hi", "ko"}
    assert langs["claim"] >= nine
    assert langs["asks"] >= nine
