"""Email addresses said aloud are written as the tools need them, and nothing else is touched."""

from __future__ import annotations

import pytest

from botpsy_desktop.speech.written import written_addresses, written_forms


@pytest.mark.parametrize(
    ("heard", "written"),
    [
        ("email ana at example dot org what I have on friday",
         "email ana@example.org what I have on friday"),
        ("Email Ana at example.org, what I have on Friday.",
         "Email ana@example.org, what I have on Friday."),
        ("write to john dot smith at mail dot example dot com please",
         "write to john.smith@mail.example.com please"),
        ("send it to bob at example dot co dot uk", "send it to bob@example.co.uk"),
        ("add ana at example dot org to my contacts", "add ana@example.org to my contacts"),
        ("écris à marie arobase exemple point fr", "écris à marie@exemple.fr"),
        ("escribe a juan arroba correo punto es", "escribe a juan@correo.es"),
        ("send it to ana@example.org", "send it to ana@example.org"),
        # not an address: no known domain at the end, or not about mail
        ("meet ana at home at five", "meet ana at home at five"),
        ("mail bob at work", "mail bob at work"),
        ("email ana at example dot orgasm", "email ana at example dot orgasm"),
        ("look at example dot com", "look at example dot com"),
        ("set an alarm at seven dot thirty", "set an alarm at seven dot thirty"),
    ],
)  # fmt: skip
def test_an_address_said_aloud_is_written(heard: str, written: str) -> None:
    assert written_addresses(heard) == written


@pytest.mark.parametrize(
    ("heard", "written"),
    [
        # as Whisper wrote espeak-ng's "documents slash taxes" and "~/music/jazz"
        ("Open the document slash taxes folder.", "Open the document/taxes folder."),
        ("List the files in downloads slash photos slash 2024",
         "List the files in downloads/photos/2024"),
        ("Copy till the slash music slash jazz to my backup folder.",
         "Copy ~/music/jazz to my backup folder."),
        ("move it to tilde slash documents", "move it to ~/documents"),
        ("Read Document, slash Party.txt, and put the party in my calendar.",
         "Read Document/Party.txt, and put the party in my calendar."),
        ("What is in my home folder slash projects?", "What is in ~/projects?"),
        ("rename notes dot t x t to ideas dot t x t", "rename notes.txt to ideas.txt"),
        ("open notes dot text", "open notes.txt"),
        ("move report dot PDF to documents", "move report.PDF to documents"),
        ("find budget underscore 2025 dot xlsx", "find budget_2025.xlsx"),
        ("delete the file draft dash two dot docx", "delete the file draft-two.docx"),
        ("play song dot mp3", "play song.mp3"),
        ("email ana at example dot org the report dot pdf",
         "email ana@example.org the report.pdf"),
        ("open notes.t x t", "open notes.txt"),
        # not a path or a file name
        ("set an alarm at seven dot thirty", "set an alarm at seven dot thirty"),
        ("set a timer for 2 dot 5 minutes", "set a timer for 2 dot 5 minutes"),
        ("what's new on example dot com", "what's new on example dot com"),
        ("I saved the report. Log the time at five", "I saved the report. Log the time at five"),
        ("the weather slash forecast for Paris", "the weather slash forecast for Paris"),
        ("open the file i dot e", "open the file i dot e"),
        ("open version 2.1 notes", "open version 2.1 notes"),
    ],
)  # fmt: skip
def test_a_path_or_a_file_name_said_aloud_is_written(heard: str, written: str) -> None:
    assert written_forms(heard) == written
