"""Answers that describe an action no tool carried out: found in the text, said plainly.

A small model often says "Done, the timer will ring in 10 minutes" without calling a tool. The
loop knows what ran; this module reads the answer for a claim of a completed (or scheduled)
action, in the languages the model answers in most, so that every face can add that nothing
was carried out. It is conservative on purpose: only past or settled actions said by the
assistant about itself or about the thing acted on ("I have set", "the email was sent", "c'est
fait", "已设置"), never offers, questions or negations ("shall I set", "I could not send").
Written by hand: no library recognises claims of actions, and a list of phrases is easy to
review and extend.
"""

from __future__ import annotations

import re

NOTE = (
    "No action was carried out: the assistant only described it. Nothing was set, sent, "
    "changed or deleted in this request; ask again to have it done."
)

# English: first-person completed actions, and things reported as done
_EN_VERBS = (
    r"set|set up|created|scheduled|added|sent|emailed|deleted|removed|trashed|moved|renamed|"
    r"copied|saved|wrote|written|booked|cancell?ed|started|stopped|paused|played|playing|"
    r"turned|changed|updated|reminded|replied|forwarded|archived|muted|snoozed|put"
)
_EN = [
    rf"\bI(?:'ve| have|\u2019ve)?\s+(?:just\s+|now\s+|already\s+|successfully\s+)?"
    rf"(?:{_EN_VERBS})\b",
    rf"\b(?:timer|alarm|reminder|event|meeting|appointment|email|e-mail|message|mail|file|"
    rf"files|folder|note|song|music|playlist|track|volume)s?\s+(?:is|are|has been|have been|"
    rf"was|were)\s+(?:now\s+|successfully\s+)?(?:{_EN_VERBS})\b",
    r"\b(?:timer|alarm|reminder)\s+(?:will|is going to)\s+(?:ring|go off|sound|remind)\b",
    r"\bI(?:'ll| will)\s+remind you\b",
    r"^\s*(?:done|all set|all done)\b[.!,]",
    r"\b(?:it's|it is)\s+done\b",
    r"^\s*(?:now\s+)?playing\b",
]
# other languages: French, German, Spanish, Italian, Portuguese, Dutch, Chinese, Japanese
_OTHER = [
    r"\bj['\u2019]ai\s+(?:bien\s+)?(?:réglé|programmé|créé|ajouté|envoyé|supprimé|déplacé|"
    r"renommé|enregistré|lancé|mis|annulé|arrêté|réservé|copié)",
    r"\b(?:minuteur|minuterie|alarme|rappel|réveil|e-?mail|message|fichier)\s+(?:a été|est)\s+"
    r"(?:bien\s+)?(?:réglée?|programmée?|créée?|envoyée?|supprimée?|déplacée?|ajoutée?)",
    r"\bc['\u2019]est fait\b",
    r"\bich habe\b[^.!?\n]{0,60}\b(?:gestellt|eingestellt|erstellt|gesendet|geschickt|"
    r"gelöscht|verschoben|gespeichert|hinzugefügt|gestartet|abgesagt|angelegt)\b",
    r"\b(?:wurde|ist)\s+(?:erfolgreich\s+)?(?:gestellt|eingestellt|erstellt|gesendet|"
    r"gelöscht|verschoben|gespeichert)\b",
    r"\berledigt\b",
    r"\b(?:he|hemos)\s+(?:configurado|programado|creado|enviado|borrado|eliminado|movido|"
    r"añadido|guardado|puesto|cancelado|reservado)\b",
    r"\b(?:ha sido|fue)\s+(?:configurad[oa]|programad[oa]|cread[oa]|enviad[oa]|borrad[oa]|"
    r"eliminad[oa]|movid[oa])\b",
    r"\bho\s+(?:impostato|programmato|creato|inviato|eliminato|cancellato|spostato|salvato|"
    r"aggiunto)\b",
    r"\b(?:configurei|programei|criei|enviei|apaguei|excluí|movi|salvei|adicionei|agendei)\b",
    r"\bik heb\b[^.!?\n]{0,60}\b(?:ingesteld|gemaakt|verstuurd|verzonden|verwijderd|"
    r"verplaatst|opgeslagen|toegevoegd)\b",
    r"(?:已|已经)(?:经)?(?:设置|设定|设好|创建|发送|删除|移动|保存|添加|安排|预订|取消|播放)",
    r"(?:设置|设定|创建|发送|删除|移动|保存|添加|安排)(?:好|完成)了",
    r"(?:設定|作成|送信|削除|移動|保存|追加|予約|キャンセル|再生)(?:しました|いたしました|済み)",
]
_NEGATION = re.compile(
    r"\b(?:not|n't|never|cannot|can't|couldn't|unable|won't|didn't|haven't|wasn't|"
    r"pas|nicht|kein|no|non|não|niet)\b|(?:没有|未能|无法|できません|しませんでした)",
    re.IGNORECASE,
)
_OFFER = re.compile(
    r"\?|\b(?:shall|should|would you|do you want|want me|if you|can i|could i|"
    r"voulez-vous|souhaitez|möchten sie|soll ich|quieres|vuoi|quer)\b|(?:要不要|是否|しますか)",
    re.IGNORECASE,
)
_PATTERNS = [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in _EN + _OTHER]
_SENTENCE = re.compile(r"[^.!?。\uff01\uff1f\n]+[.!?。\uff01\uff1f]*")


def claims_action(text: str) -> bool:
    """True if ``text`` says, in a sentence of its own, that an action was carried out (or
    is now scheduled), with no negation and not as an offer or a question."""
    for sentence in _SENTENCE.findall(text):
        if _NEGATION.search(sentence) or _OFFER.search(sentence):
            continue
        if any(p.search(sentence) for p in _PATTERNS):
            return True
    return False
