"""Claims of actions in an answer: found in the languages the model answers in, and only there
(offers, questions, negations and plain information are not claims)."""

from __future__ import annotations

import pytest

from botpsy_desktop.agent.claims import claims_action


@pytest.mark.parametrize(
    "text",
    [
        "Done! The timer will ring 10 minutes later.",
        "I have set a timer for 10 minutes.",
        "I've moved report.pdf to the trash.",
        "Your email has been sent to Anna.",
        "The meeting was scheduled for Friday at 3 pm.",
        "Done.",
        "All set, enjoy your tea.",
        "Now playing some jazz.",
        "J'ai réglé un minuteur de 10 minutes.",
        "C'est fait : le fichier est dans la corbeille.",
        "Ich habe den Wecker auf 7 Uhr gestellt.",
        "He configurado una alarma para las 7.",
        "Ho impostato un timer di 10 minuti.",
        "Configurei um alarme para as 7.",
        "Ik heb een timer van 10 minuten ingesteld.",
        "已设置10分钟的计时器。",
        "タイマーを設定しました。",
    ],
)
def test_a_claimed_action_is_found(text: str) -> None:
    assert claims_action(text)


@pytest.mark.parametrize(
    "text",
    [
        "Shall I set a timer for 10 minutes?",
        "I could not set the timer: the duration was unclear.",
        "I did not send the email.",
        "The file was not deleted.",
        "I can set a timer if you want.",
        "You have 2 PDFs in Documents: taxes-2025.pdf and lease.pdf.",
        "Tomorrow will be sunny, 21 °C.",
        "Set a timer for 10 minutes, or tell me another duration.",
        "Voulez-vous que je règle un minuteur ?",
        "Je n'ai pas envoyé le message.",
        "No he enviado el correo.",
        "我没有发送邮件。",
        "",
    ],
)
def test_no_claim_is_found_where_none_is_made(text: str) -> None:
    assert not claims_action(text)
