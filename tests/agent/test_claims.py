"""Claims of actions in an answer: found in the languages the model answers in, and only there
(offers, questions, negations and plain information are not claims)."""

from __future__ import annotations

import pytest

from botpsy_desktop.agent.claims import NOTE, as_ran, claims_action, note_for
from botpsy_desktop.eval.claims_eval import CLAIMS_SET, HELD_OUT, load, measure


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


# --- each claimed action against the calls that really ran ------------------------------------


def test_a_false_claim_next_to_a_true_one_is_noted() -> None:
    """A timer was set; the answer also claims a 6:00 flight alarm that was never set."""
    text = "Timer set for 10 minutes. Your flight alarm at 6:00 is set too."
    note = note_for(text, ["set_timer"])
    assert note and note != NOTE
    assert "an alarm" in note and "set_timer" in note
    assert note_for(text, ["set_timer", "set_alarm"]) == ""


@pytest.mark.parametrize(
    "text",
    [
        "Alarm cancelled.",
        "I switched off your 6:00 alarm.",
        "Don't worry, it won't ring.",
        "Your alarm has been deleted.",
        "The flight alarm is removed.",
        "I turned off the alarm for tomorrow.",
        "Your alarm won't go off tomorrow.",
    ],
)
def test_paraphrases_of_a_false_cancellation_are_noted(text: str) -> None:
    assert note_for(text, []) == NOTE
    assert note_for(text, ["set_timer"])  # a timer set backs no cancellation
    assert note_for(text, ["cancel_alarm"]) == ""


def test_the_checker_holds_its_measured_precision_and_recall() -> None:
    """The figures docs/GATE.md gives (python tools/eval_claims.py): at least 300 answers in
    the nine languages; on the held-out set, written after the checker and never used to
    change it, the floor of what was measured."""
    development, held_out = load(CLAIMS_SET), load(HELD_OUT)
    assert len(development) >= 300
    assert {c.lang for c in development} == {"en", "fr", "de", "es", "it", "pt", "nl", "zh", "ja"}
    dev = measure(development)
    for lang, score in dev.items():
        assert score.precision >= 0.9 and score.recall >= 0.9, (lang, score)
    held = measure(held_out)["all"]
    assert held.precision >= 0.9 and held.recall >= 0.4, held


def test_a_change_by_a_tool_the_checker_does_not_know_backs_the_claim() -> None:
    """A tool server's or plug-in's change ran: its name says nothing about what it did, so the
    answer is not told that nothing was carried out."""
    text = "Your summary is saved in summary.txt."
    assert note_for(text, []) == NOTE
    assert note_for(text, [as_ran("write_note")]) == ""
    assert note_for("Alarm cancelled.", ["set_timer", as_ran("crm_update_contact")]) == ""
    assert note_for("Alarm cancelled.", [as_ran("set_timer")])  # a known tool stays checked
