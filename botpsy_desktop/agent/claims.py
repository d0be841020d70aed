"""Answers that describe an action no tool carried out: found in the text, checked per action.

A small model often says "Done, the timer will ring in 10 minutes" without calling a tool, or
sets a timer and also claims an alarm it never set. The loop knows what ran; this module reads
the answer, clause by clause, for claims of completed (or scheduled) actions in the nine
languages the model answers in (en, fr, de, es, it, pt, nl, zh, ja), each as an *action kind*
(set, cancel, send, move, play, stop, volume) and the *object* it names (an alarm, a timer, a
reminder, a mail, an event, a file, a folder, a note, music, a task), and checks each against
the calls that really ran: a timer set backs "the timer is running", not "your 6:00 alarm is
set". Offers, questions and negations are not claims ("shall I set", "I could not send"), but
a cancellation said as a negation is ("it won't ring", "il ne sonnera pas").

Written by hand: no library recognises claims of actions, and word lists are easy to review
and extend. Measured on a labelled set of claims and non-claims in the nine languages:
``python tools/eval_claims.py`` (botpsy_desktop/eval/claims/claims.jsonl; docs/GATE.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NOTE = (
    "No action was carried out: the assistant only described it. Nothing was set, sent, "
    "changed or deleted in this request; ask again to have it done."
)


def fold(text: str) -> str:
    """Lower case without accents, full-width letters made plain, one kind of apostrophe."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    plain = "".join(c for c in text if not "\u0300" <= c <= "\u036f")  # Latin accents only
    return unicodedata.normalize("NFC", plain).replace("\u2019", "'")


def _alt(words: str) -> str:
    return "|".join(w.replace("_", " ") for w in words.split())


# --- objects: what a clause is about (folded word starts; CJK anywhere) -----------------------
_OBJECTS: dict[str, str] = {
    "alarm": "alarm alarms wake-up alarme alarmes reveil wecker alarma alarmas despertador "
    "sveglia sveglie allarme wekker wekkers 闹钟 アラーム 目覚まし",
    "timer": "timer timers countdown minuteur minuterie temporizador temporizzatore "
    "计时器 定时器 倒计时 タイマー",
    "reminder": "reminder reminders rappel remind rappellerai erinnerung erinnere recordare "
    "recordatorio ricordero promemoria lembrete lembrar herinnering herinner 提醒 リマインダー "
    "リマインド お知らせ",
    "email": "email emails e-mail e-mails mail mails courriel message nachricht correo "
    "mensaje messaggio mensagem bericht 邮件 メール",
    "event": "meeting meetings appointment appointments event events calendar rendez-vous "
    "reunion evenement agenda termin zahnarzttermin besprechung kalender cita evento "
    "calendario riunione appuntamento consulta compromisso reuniao afspraak "
    "tandartsafspraak vergadering 会议 预约 日历 日程 会議 予定 カレンダー",
    "file": "file files fichier datei archivo bestand 文件 ファイル",
    "folder": "folder dossier ordner carpeta cartella pasta map 文件夹 フォルダ",
    "note": "note notes notiz nota notitie 笔记 メモ",
    "music": "music song track playing musique morceau musik lied musica cancion sonando "
    "brano riproduzione tocando muziek speelt 音乐 播放 音楽 曲 再生",
    "volume": "volume lautstarke volumen 音量",
    "task": "task tasks to-do todo tache aufgabe tarea compito attivita tarefa taak 任务 待办 "
    "タスク",
}
_FILE_NAME = re.compile(r"\b[\w-]+\.(?:pdf|txt|md|docx?|xlsx?|odt|png|jpe?g|csv)\b")

# --- actions: the cues of a completed (or now scheduled) action, per kind ---------------------
# Latin-script cues are matched as whole words of the folded clause; CJK ones anywhere.
_ACTIONS: dict[str, str] = {
    "set": (
        # en
        r"\b(?:is|are|was|were|'s|has been|have been|now)\s+(?:all\s+)?(?:set|scheduled|"
        r"created|added|saved|running|ready|started)\b|\b(?:i|i've|i have|we've)\s+"
        r"(?:just\s+|now\s+|also\s+)?(?:set|scheduled|created|added|saved|started|made|"
        r"written|wrote|booked|put)\b|\b(?:timer|alarm|reminder|event|note|folder|task)s?\s+"
        r"(?:set|created|added|saved|started|scheduled)\b|\bset\s+(?:too|as well|for)\b|"
        r"\bi(?:'ll| will)\s+remind\b|\b(?:on|in)\s+your\s+(?:list|calendar)\s+now\b|"
        r"\bis\s+running\b|\b(?:timer|alarm|reminder)s?\s+(?:will|is going to)\s+"
        r"(?:ring|go off|sound)\b"
        # fr
        r"|\b(?:regle|reglee|programme|programmee|cree|creee|ajoute|ajoutee|lance|lancee|"
        r"enregistre|enregistree|sauvegarde|sauvegardee|note|notee)\b|\bje lance\b|"
        r"\btourne\b|\bje vous rappellerai\b|\bje te rappellerai\b"
        # de
        r"|\b(?:gestellt|eingestellt|erstellt|angelegt|hinzugefugt|gestartet|gespeichert|"
        r"eingetragen|lauft)\b|\bich erinnere (?:dich|sie)\b"
        # es
        r"|\b(?:puesta|puesto|configurad[oa]|programad[oa]|cread[oa]|cree|anadid[oa]|"
        r"guardad[oa]|guarde|iniciad[oa])\b|\ben marcha\b|\bte recordare\b|\ble recordare\b"
        # it
        r"|\b(?:impostat[oaie]|creat[oaie]|aggiunt[oaie]|avviat[oaie]|partito|salvat[oaie]|"
        r"ho creato)\b|\bti ricordero\b"
        # pt
        r"|\b(?:definid[oa]|configurad[oa]|criad[oa]|criei|adicionad[oa]|iniciad[oa]|"
        r"configurei|programei|defini|coloquei|agendei|adicionei|salvei|"
        r"salv[oa]|correndo|agendad[oa])\b|\bvou te lembrar\b|\bvou lembrar\b"
        # nl
        r"|\b(?:ingesteld|gemaakt|aangemaakt|toegevoegd|gestart|loopt|bewaard|opgeslagen)\b|"
        r"\b(?:staat|staan)(?: ook| nu| aan)?\s*[.!]*\s*$|\bik herinner je\b"
        # zh, ja
        r"|设好|设置好|已设置|已设定|开始了|创建了|已创建|保存在|保存了|已保存|添加了|已添加|会在.*提醒|提醒你"
        r"|セットしました|設定しました|作成しました|作っておきました|開始し|動いています|保存しました|"
        r"追加しました|お知らせします"
    ),
    "cancel": (
        r"\b(?:cancell?ed|deleted|removed|cleared|trashed|switched off|turned off|"
        r"won't ring|will not ring|won't go off|will not go off)\b|\bno longer (?:ring|set)"
        r"|\b(?:annule|annulee|supprime|supprimee|desactive|desactivee|retire|efface)\b|"
        r"\bne sonnera (?:pas|plus)\b"
        r"|\b(?:geloscht|entfernt|ausgeschaltet|abgesagt|deaktiviert|abgestellt)\b|"
        r"\bklingelt\b.{0,20}\bnicht\b"
        r"|\b(?:cancelad[oa]|borrad[oa]|borre|eliminad[oa]|elimine|apagad[oa]|apague|quite|"
        r"quitad[oa])\b|\bno sonara\b"
        r"|\b(?:annullat[oa]|cancellat[oa]|eliminat[oa]|spento|spenta|tolto|tolta)\b|"
        r"\bnon suonera\b"
        r"|\b(?:desliguei|desligad[oa]|excluid[oa]|removid[oa]|tirei|apaguei)\b|"
        r"\bnao vai tocar\b"
        r"|\b(?:geannuleerd|verwijderd|uitgezet|uitgeschakeld|gehaald)\b|\bgaat\b.{0,20}\bniet af\b"
        r"|已取消|取消了|删掉|删除了|已删除|关掉|不会响"
        r"|キャンセル済み|キャンセルしました|削除しました|消しました|オフにしました|鳴りません"
    ),
    "send": (
        r"\b(?:sent|emailed|forwarded|replied)\b|\b(?:envoye|envoyee|envoyes)\b|"
        r"\b(?:geschickt|gesendet|verschickt|versandt)\b|\b(?:mandado|enviado|mande|envie)\b|"
        r"\b(?:mandato|inviato|inviata)\b|\b(?:mandei|enviei)\b|"
        r"\b(?:gestuurd|verzonden|verstuurd)\b|发了|已发送|发送了|送りました|送信しました"
    ),
    "move": (
        r"\b(?:moved|rescheduled|postponed|renamed)\b|\bi put\b|\bnow in\b|"
        r"\b(?:deplace|deplacee|renomme|decale)\b|\bmaintenant dans\b|"
        r"\b(?:verschoben|umbenannt|verlegt)\b|\b(?:movid[oa]|movi|renombrad[oa])\b|"
        r"\bya esta en\b|\b(?:spostat[oa]|rinominat[oa])\b|\bora e nella\b|"
        r"\b(?:remarcad[oa]|movid[oa]|renomead[oa])\b|\bagora esta na\b|"
        r"\b(?:verzet|verplaatst|hernoemd)\b|\bstaat nu in\b"
        r"|改到|移到|移动了|现在在|変更しました|移しました|移動しました"
    ),
    "play": (
        r"\bnow playing\b|^\s*playing\b|\bi(?:'m| am)\s+playing\b|\bje lance\b|"
        r"\ben cours de lecture\b|\bjetzt lauft\b|\bsonando ahora\b|\breproduciendo\b|"
        r"\bin riproduzione\b|\btocando agora\b|\bnu speelt\b|正在播放|再生中"
    ),
    "volume": (
        r"\bturned (?:the volume )?(?:up|down)\b|\b(?:lowered|raised)\b|"
        r"\b(?:baisse|monte|augmente)\b|\b(?:gesenkt|erhoht|leiser gestellt|lauter gestellt)\b|"
        r"\b(?:baje|subi)\b|\b(?:abbassato|alzato)\b|\b(?:abaixei|aumentei)\b|"
        r"\b(?:zachter|harder) gezet\b|调到|调低|调高|下げました|上げました"
    ),
    "stop": (
        r"\b(?:paused|stopped)\b|\bmis en pause\b|\b(?:arrete|arretee)\b|"
        r"\b(?:pausiert|gestoppt|angehalten)\b|\b(?:pausad[oa]|detenid[oa]|pare|parei)\b|"
        r"\bmess[oa] in pausa\b|\bfermat[oa]\b|\b(?:gepauzeerd|gestopt)\b|已暂停|暂停了|停止了|"
        r"一時停止しました|停止しました"
    ),
    "done": (
        r"^\s*(?:done|all set|all done)\b|\b(?:it's|it is)\s+done\b|\bc'est fait\b|"
        r"\berledigt\b|^\s*(?:listo|hecho|fatto|pronto|klaar|gedaan)\b|^\s*好了|完了しました"
    ),
}
_ACTION_RE = {k: re.compile(v, re.IGNORECASE) for k, v in _ACTIONS.items()}
_OBJECT_WORDS = {k: tuple(v.split()) for k, v in _OBJECTS.items()}
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")
_WORDS = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")

_NEGATION = re.compile(
    r"\b(?:not|n't|never|cannot|can't|couldn't|unable|didn't|haven't|wasn't|nothing|no|"
    r"pas|rien|jamais|aucune?|nicht|nichts|kein|keine|nada|nunca|non|niente|nessun[oa]?|"
    r"nao|niet|niets|geen)\b|没有|没|无法|不能|できません|していません|ありません|何も",
    re.IGNORECASE,
)
_OFFER = re.compile(
    r"\?|\b(?:shall|should|would you|do you want|want me|if you|can i|could i|i could|"
    r"i can|just tell|tell me|voulez-vous|souhaitez|si vous|je pourrais|dites-moi|soll ich|"
    r"wenn du|ich konnte|sag mir|quieres|si quieres|podria|dime|vuoi|se vuoi|potrei|dimmi|"
    r"quer que|se quiser|posso|e so dizer|zal ik|als je wilt|ik kan|zeg maar)\b|"
    r"要不要|要我|是否|如果你愿意|告诉我|ましょうか|しますか|よろしければ|教えてください",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|[。\n]")  # full-width ! and ? are folded to ASCII
"""Where sentences end ("report.pdf" and "6.30" are not ends: a stop must be followed by
a space)."""
_CLAUSE = re.compile(
    r"[;:]\s|,\s*(?:and|et|und|y|e|en)\s+|\s+(?:and also|and|et|und)\s+|"
    r",(?=\s*[\u3040-\u30ff\u3400-\u9fff])|、|。",
    re.IGNORECASE,
)
_NEGATED_CANCEL = re.compile(
    r"\b(?:won't|will not) (?:ring|go off)\b|\bno longer (?:rings?|set)\b|"
    r"\bne sonnera (?:pas|plus)\b|\bklingelt\b.{0,20}\bnicht\b|\bno sonara\b|"
    r"\bnon suonera\b|\bnao vai tocar\b|\bgaat\b.{0,20}\bniet af\b|不会响|鳴りません",
    re.IGNORECASE,
)
"""A cancellation said as a negation ("it won't ring"): a claim, though it negates."""

# What a tool that ran backs: (action kind, object).
_BACKS: dict[str, tuple[tuple[str, str], ...]] = {
    "set_alarm": (("set", "alarm"),),
    "set_timer": (("set", "timer"),),
    "set_reminder": (("set", "reminder"),),
    "set_routine": (("set", "reminder"), ("set", "alarm")),
    "cancel_alarm": (("cancel", "alarm"), ("cancel", "timer"), ("cancel", "reminder")),
    "dismiss_alarm": (("cancel", "alarm"), ("stop", "alarm")),
    "snooze_alarm": (("set", "alarm"),),
    "send_email": (("send", "email"),),
    "reply_email": (("send", "email"),),
    "forward_email": (("send", "email"),),
    "save_draft": (("set", "email"),),
    "move_email": (("move", "email"), ("cancel", "email")),
    "mark_email": (("set", "email"),),
    "create_event": (("set", "event"),),
    "create_meeting": (("set", "event"), ("send", "email")),
    "update_event": (("move", "event"), ("set", "event")),
    "update_meeting": (("move", "event"), ("set", "event")),
    "delete_event": (("cancel", "event"),),
    "add_task": (("set", "task"),),
    "complete_task": (("set", "task"), ("cancel", "task")),
    "create_folder": (("set", "folder"),),
    "write_text_note": (("set", "note"), ("set", "file")),
    "rename_or_move": (("move", "file"), ("move", "folder"), ("set", "file")),
    "move_to_trash": (("cancel", "file"), ("cancel", "folder"), ("move", "file")),
    "undo_last_file_change": (("cancel", "file"), ("cancel", "folder"), ("cancel", "note")),
    "play_music": (("play", "music"), ("set", "music")),
    "resume_music": (("play", "music"),),
    "next_track": (("play", "music"),),
    "previous_track": (("play", "music"),),
    "pause_music": (("stop", "music"),),
    "stop_music": (("stop", "music"),),
    "set_music_volume": (("volume", "volume"), ("volume", "music"), ("set", "volume")),
}


@dataclass(frozen=True)
class Claim:
    """One claimed action: its kind, the objects it names (empty: none named), the words."""

    action: str
    objects: tuple[str, ...]
    text: str

    def words(self) -> str:
        what = " or ".join(_OBJECT_NAMES.get(o, o) for o in self.objects) or "something"
        verb = _ACTION_NAMES.get(self.action, "done")
        return f"{what} {verb}"


_OBJECT_NAMES = {
    "alarm": "an alarm", "timer": "a timer", "reminder": "a reminder", "email": "a mail",
    "event": "an event", "file": "a file", "folder": "a folder", "note": "a note",
    "music": "music", "volume": "the volume", "task": "a task",
}  # fmt: skip
_ACTION_NAMES = {
    "set": "set or made", "cancel": "cancelled or deleted", "send": "sent", "move": "moved",
    "play": "playing", "stop": "stopped", "volume": "changed", "done": "done",
}  # fmt: skip


def _objects(clause: str) -> tuple[str, ...]:
    words = _WORDS.findall(clause)
    found: list[str] = []
    for kind, stems in _OBJECT_WORDS.items():
        for stem in stems:
            if _CJK.search(stem):
                if stem in clause and not (stem == "文件" and "文件夹" in clause):
                    found.append(kind)
                    break
            elif any(w == stem or (len(stem) >= 4 and w.startswith(stem)) for w in words):
                found.append(kind)
                break
    if "file" not in found and _FILE_NAME.search(clause):
        found.append("file")
    return tuple(found)


def _clauses(sentence: str) -> list[str]:
    return [c for c in _CLAUSE.split(sentence) if c and c.strip()]


def find_claims(text: str) -> list[Claim]:
    """Every action ``text`` claims was carried out, clause by clause (see the module)."""
    claims: list[Claim] = []
    for sentence in _SENTENCE.split(fold(text)):
        if not sentence.strip() or _OFFER.search(sentence):
            continue
        previous: tuple[str, ...] = ()
        for clause in _clauses(sentence):
            objects = _objects(clause) or previous
            previous = objects
            if _NEGATED_CANCEL.search(clause):
                claims.append(Claim("cancel", objects or ("alarm",), clause.strip()))
                continue
            if _NEGATION.search(clause):
                continue
            cancel = _ACTION_RE["cancel"].search(clause)
            for action, pattern in _ACTION_RE.items():
                if pattern.search(clause):
                    if action == "set" and cancel is not None:
                        continue
                    claims.append(Claim(action, objects, clause.strip()))
    return _specific(claims)


def _specific(claims: list[Claim]) -> list[Claim]:
    """One claim per clause where a specific kind was found ("done" only alone)."""
    by_clause: dict[str, list[Claim]] = {}
    for claim in claims:
        by_clause.setdefault(claim.text, []).append(claim)
    out: list[Claim] = []
    for found in by_clause.values():
        specific = [c for c in found if c.action != "done"]
        out += specific or found
    return out


def backed(claim: Claim, ran: Iterable[str]) -> bool:
    """Does a call that ran (tool names) carry out this claimed action?"""
    names = list(ran)
    if claim.action == "done":
        return bool(names)
    pairs = {pair for name in names for pair in _BACKS.get(name, ())}
    if not claim.objects:
        return any(action == claim.action for action, _ in pairs) or (
            claim.action == "set" and bool(pairs)
        )
    return any((claim.action, o) in pairs for o in claim.objects)


def unbacked_claims(text: str, ran: Sequence[str]) -> list[Claim]:
    """The actions ``text`` claims that no call in ``ran`` (tools that ran) carried out."""
    return [c for c in find_claims(text) if not backed(c, ran)]


def note_for(text: str, ran: Sequence[str]) -> str:
    """The note an answer gets: '' when every action it claims ran; :data:`NOTE` when it
    claims one and nothing was changed; else which claimed actions did not happen."""
    missing = unbacked_claims(text, ran)
    if not missing:
        return ""
    changes = [n for n in ran if n in _BACKS]
    if not changes:
        return NOTE
    said = "; ".join(dict.fromkeys(c.words() for c in missing))
    return (
        f"Not carried out: the answer says {said}, but no such action ran in this request "
        f"(what ran: {', '.join(dict.fromkeys(changes))}). Ask again to have it done."
    )


def claims_action(text: str) -> bool:
    """True if ``text`` claims, in a clause of its own, that an action was carried out (or is
    now scheduled), not as an offer or a question, nor under a negation."""
    return bool(find_claims(text))
