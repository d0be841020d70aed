"""The cues the agent reads people's and the model's words by: one place for the hand-kept
multilingual word lists, each measured where it is used.

- ``CANNOT``: an answer that says the assistant cannot do something (the languages tool
  selection knows); agent/selection.py offers a missing domain only after such an answer.
- ``CLAIM_OBJECTS``, ``CLAIM_ACTIONS``, ``CLAIM_NEGATION``, ``CLAIM_OFFER``, ``NEGATED_CANCEL``:
  claims of actions in an answer, per action kind and object, in nine languages (en, fr, de,
  es, it, pt, nl, zh, ja); agent/claims.py checks each against the calls that ran
  (``python tools/eval_claims.py`` measures them).
- ``ASKS_FOR``: the words that ask for each reversible tool in a request, in the same nine
  languages; agent/grounding.py lets a change typed in this request run after a read only when
  the request names the tool's action.

Written by hand: no library recognises these, and word lists are easy to review and extend.
``CANNOT`` is matched on the answer as written, the others on ``fold``ed text;
tests/agent/test_cues.py holds one table of examples for every cue, in every language it knows.
"""

from __future__ import annotations

import re
import unicodedata

CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")
"""A Chinese or Japanese character: such cues match anywhere, not as whole words."""


def fold(text: str) -> str:
    """Lower case, without accents, full-width letters made plain."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    plain = "".join(c for c in text if not "\u0300" <= c <= "\u036f")  # Latin accents only
    return unicodedata.normalize("NFC", plain).replace("\u2019", "'")


CANNOT = re.compile(
    r"\b(?:can(?:no|')t|cannot|unable|not able|no access|don'?t have (?:access|a tool|the tool)|"
    r"do not have (?:access|a tool|the tool)|no tool|not available)\b"
    r"|\b(?:kann (?:ich )?(?:nicht|keine)|keinen zugriff|nicht möglich)\b"
    r"|\b(?:ne (?:peux|puis) pas|pas (?:d')?accès|impossible)\b"
    r"|\b(?:no (?:puedo|tengo acceso|es posible|pued)|sin acceso)\b"
    r"|\b(?:non (?:posso|ho accesso|è possibile|riesco))\b"
    r"|\b(?:não (?:posso|tenho acceso|tenho acesso|consigo|é possível))\b"
    r"|(?:не (?:могу|умею|имею доступа)|нет доступа)"
    r"|(?:नहीं कर सकता|नहीं कर सकती|पहुंच नहीं|एक्सेस नहीं)"
    r"|(?:できません|できない|アクセスでき)"
    r"|(?:无法|不能|没有权限|没法)"
    r"|(?:할 수 없|수 없습니다|접근할 수)",
    re.IGNORECASE,
)
"""An answer that says the assistant cannot do something (in the languages the selection
knows): only such an answer is a sign that a tool is missing; a plain answer that merely
mentions a domain's words ("Hello from the window") is not."""


# --- objects: what a clause is about (folded word starts; CJK anywhere) -----------------------
CLAIM_OBJECTS: dict[str, str] = {
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

# --- actions: the cues of a completed (or now scheduled) action, per kind ---------------------
# Latin-script cues are matched as whole words of the folded clause; CJK ones anywhere.
CLAIM_ACTIONS: dict[str, str] = {
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

CLAIM_NEGATION = re.compile(
    r"\b(?:not|n't|never|cannot|can't|couldn't|unable|didn't|haven't|wasn't|nothing|no|"
    r"pas|rien|jamais|aucune?|nicht|nichts|kein|keine|nada|nunca|non|niente|nessun[oa]?|"
    r"nao|niet|niets|geen)\b|没有|没|无法|不能|できません|していません|ありません|何も",
    re.IGNORECASE,
)
CLAIM_OFFER = re.compile(
    r"\?|\b(?:shall|should|would you|do you want|want me|if you|can i|could i|i could|"
    r"i can|just tell|tell me|voulez-vous|souhaitez|si vous|je pourrais|dites-moi|soll ich|"
    r"wenn du|ich konnte|sag mir|quieres|si quieres|podria|dime|vuoi|se vuoi|potrei|dimmi|"
    r"quer que|se quiser|posso|e so dizer|zal ik|als je wilt|ik kan|zeg maar)\b|"
    r"要不要|要我|是否|如果你愿意|告诉我|ましょうか|しますか|よろしければ|教えてください",
    re.IGNORECASE,
)

NEGATED_CANCEL = re.compile(
    r"\b(?:won't|will not) (?:ring|go off)\b|\bno longer (?:rings?|set)\b|"
    r"\bne sonnera (?:pas|plus)\b|\bklingelt\b.{0,20}\bnicht\b|\bno sonara\b|"
    r"\bnon suonera\b|\bnao vai tocar\b|\bgaat\b.{0,20}\bniet af\b|不会响|鳴りません",
    re.IGNORECASE,
)
"""A cancellation said as a negation ("it won't ring"): a claim, though it negates."""


# The words that ask for each reversible tool (folded stems: a word of the request that starts
# with one counts; CJK stems count anywhere in the request). Nine languages: en fr de es it pt
# nl zh ja. A tool missing here is never grounded: its changes keep asking after a read.
_ASKS_FOR: dict[str, str] = {
    "set_timer": "timer countdown minuteur minuterie temporizador cronometro contador "
    "rovescia temporizzatore 计时 定时 倒计时 タイマー",
    "set_alarm": "alarm wake reveil alarme reveille wecker weck alarma despiert despertador "
    "sveglia svegli acorda wekker 闹钟 叫醒 アラーム 目覚まし 起こして",
    "set_reminder": "remind rappel rappelle erinner recuerd recordatorio recordar ricord "
    "promemoria lembr lembrete herinner 提醒 リマインド 思い出させ",
    "create_folder": "folder directory dossier repertoire ordner verzeichnis carpeta "
    "directorio cartella pasta map 文件夹 目录 フォルダ",
    "write_text_note": "note notes jot write notiz schreib nota notas escrib apunt apunta "
    "scriv annota anota escrev notitie schrijf 笔记 记下 写 メモ 書い 書いて",
    "rename_or_move": "rename move renomm deplac umbenenn verschieb renombr mueve mover "
    "rinomin spost renome mova hernoem verplaats 重命名 移动 移到 名前を変 移動",
    "play_music": "play playing listen joue jouer ecout spiel abspiel hore reproduc pon "
    "escuch suona metti ascolt toca tocar coloca ouvir speel luister 播放 放 听 再生 かけて 聴",
    "pause_music": "pause pausa pausier pauze 暂停 一時停止",
    "resume_music": "resume continue unpause reprend fortsetz weiterspiel reanud continu "
    "riprend retom hervat 继续 再開",
    "next_track": "next skip suivant suivante nachst naechst siguiente salta prossim "
    "proxim pula volgend 下一 次の曲",
    "previous_track": "previous back precedent vorherig zuruck anterior indietro vorig 上一 前の曲",
    "stop_music": "stop arret arrete stopp beend deten parar ferma interromp 停止 止め",
    "set_music_volume": "volume louder quieter lautstark lauter leiser volumen sube baja "
    "alza abbassa aumenta diminu harder zachter 音量 ボリューム",
    "mark_email": "mark read unread marque lu markier gelesen marca leido segna letto lido "
    "markeer gelezen 标记 已读 既読 未読",
    "create_event": "event appointment calendar schedule rendez evenement agenda termin "
    "kalender evento cita calendario appuntamento compromisso afspraak 日程 日历 预约 予定 "
    "カレンダー",
    "update_event": "move reschedule postpone change deplac decal modifi verschieb ander "
    "cambi mueve aplaz sposta modific rimand mude adi verplaats wijzig 改 推迟 移到 変更 ずら",
    "snooze_alarm": "snooze schlummer repet pospon posticip soneca sluimer 贪睡 スヌーズ",
    "dismiss_alarm": "stop dismiss silence off arret arrete coupe aus stopp apaga deten "
    "spegni ferma desliga uit 关 停 止め",
    "add_task": "task todo to-do tache aufgabe tarea pendiente compito attivita tarefa "
    "taak 任务 待办 タスク",
    "add_contact": "contact address kontakt adressbuch contacto agenda contatt rubrica contato "
    "adresboek 联系人 通讯录 連絡先 アドレス帳",
    "update_contact": "contact address kontakt adressbuch contacto agenda contatt rubrica "
    "contato adresboek change chang modifi ander cambi mude wijzig 联系人 通讯录 連絡先 "
    "アドレス帳",
}
ASKS_FOR: dict[str, tuple[str, ...]] = {k: tuple(v.split()) for k, v in _ASKS_FOR.items()}
"""The words that ask for each reversible tool, folded (see the module's notes)."""


_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def names_action(tool: str, folded: str) -> bool:
    """Does the (folded) request name ``tool``'s action in its own words (``ASKS_FOR``)? A word
    that is a stem or starts with one of four letters or more counts; a CJK stem or one with a
    hyphen ("to-do") counts anywhere in the text. A tool with no words here is never named."""
    stems = ASKS_FOR.get(tool)
    if not stems:
        return False
    words = _WORD.findall(folded)
    for stem in stems:
        if CJK.search(stem) or "-" in stem:  # "to-do", "タイマー": anywhere in the text
            if stem in folded:
                return True
        elif any(w == stem or (len(stem) >= 4 and w.startswith(stem)) for w in words):
            return True
    return False
