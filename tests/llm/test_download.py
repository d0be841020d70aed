"""Hub downloads against a local stand-in server: resume, progress, checksums, failures, time."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from botpsy_desktop.llm.models.download import (
    DownloadError,
    HubClient,
    HubFile,
    Progress,
    exclusive_lock,
    format_progress,
    hub_endpoint,
)
from tests.helpers.hub import Faults, HubStandIn, free_port, write_gguf

REPO = "qvac/BotPsy-0.8B"
NAME = "BotPsy-0.8B-Q4_K_M.gguf"


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "m.gguf", 3 << 20).read_bytes()


@pytest.fixture(autouse=True)
def no_ambient_hub_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests see neither the developer's Hugging Face login nor their HF_* variables."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token-here"))


@pytest.fixture
def hub(model_bytes: bytes) -> Iterator[HubStandIn]:
    with HubStandIn() as h:
        h.add_file(REPO, NAME, model_bytes)
        h.add_file(REPO, "README.md", b"# BotPsy-0.8B\n", lfs=False)
        yield h


def client(hub: HubStandIn, **kw: object) -> HubClient:
    options: dict[str, object] = {"stall_timeout_s": 5.0, "retries": 0, **kw}
    return HubClient(hub.url, **options)  # type: ignore[arg-type]


def remote(hub: HubStandIn, path: str = NAME, **kw: object) -> HubFile:
    with client(hub, **kw) as c:
        return next(f for f in c.repo_info(REPO).files if f.path == path)


def test_repo_info_lists_files_with_the_lfs_sha256(hub: HubStandIn, model_bytes: bytes) -> None:
    with client(hub) as c:
        info = c.repo_info(REPO)
    assert info.commit == hub.repos[REPO].commit and not info.gated
    gguf = next(f for f in info.files if f.path == NAME)
    assert gguf.sha256 == hashlib.sha256(model_bytes).hexdigest()
    assert gguf.size == len(model_bytes)
    readme = next(f for f in info.files if f.path == "README.md")
    assert readme.sha256 is None and readme.blob_id is not None
    (req,) = hub.requests("/api/")
    assert req.path == f"/api/models/{REPO}/revision/main" and req.query == "blobs=true"


def test_a_download_reports_progress_and_verifies(
    hub: HubStandIn, model_bytes: bytes, tmp_path: Path
) -> None:
    events: list[Progress] = []
    f = remote(hub)
    with client(hub) as c:
        dest = c.download(f, tmp_path / "models" / NAME, on_progress=events.append)
    assert dest.read_bytes() == model_bytes
    assert sorted(p.name for p in dest.parent.iterdir()) == [f".{NAME}.lock", NAME]
    # the file was asked at the commit the API named, and redirected like the Hub does
    resolve = hub.requests(f"/{REPO}/resolve/")[0]
    assert resolve.path == f"/{REPO}/resolve/{f.commit}/{NAME}" and resolve.status == 302
    done = [e.done for e in events]
    assert done == sorted(done) and events[0].done == 0
    assert events[-1].finished and events[-1].done == events[-1].total == len(model_bytes)
    assert events[-1].bytes_per_s > 0


def test_an_interrupted_download_resumes_where_it_stopped(
    hub: HubStandIn, model_bytes: bytes, tmp_path: Path
) -> None:
    dest = tmp_path / NAME
    f = remote(hub)
    hub.faults = Faults(cut_after=1_000_000)
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, dest)
    assert err.value.kind == "interrupted"
    assert "run the same command again to resume" in str(err.value)
    first = hub.file_requests()[0]
    part = tmp_path / f"{NAME}.part"
    assert first.range is None and first.sent == 1_000_000 == part.stat().st_size
    assert not dest.exists()

    events: list[Progress] = []
    with client(hub) as c:
        c.download(f, dest, on_progress=events.append)
    second = hub.file_requests()[1]
    # the second run asked only for the rest, and the server sent only the rest
    assert second.range == "bytes=1000000-" and second.status == 206
    assert second.sent == len(model_bytes) - 1_000_000
    assert first.sent + second.sent == len(model_bytes)
    assert dest.read_bytes() == model_bytes and not part.exists()
    checked = [e for e in events if e.phase == "check"]
    assert checked[-1].done == 1_000_000  # the saved bytes were re-hashed, not re-downloaded
    assert next(e for e in events if e.phase == "download").resumed_from == 1_000_000


def test_a_broken_transfer_is_resumed_within_the_same_run(
    hub: HubStandIn, model_bytes: bytes, tmp_path: Path
) -> None:
    f = remote(hub)
    hub.faults = Faults(cut_after=300_000)
    with client(hub, retries=1) as c:
        c.download(f, tmp_path / NAME)
    first, second = hub.file_requests()
    assert (first.sent, second.range) == (300_000, "bytes=300000-")
    assert (tmp_path / NAME).read_bytes() == model_bytes


def test_a_server_that_ignores_range_still_gives_a_correct_file(
    hub: HubStandIn, model_bytes: bytes, tmp_path: Path
) -> None:
    f = remote(hub)
    hub.faults = Faults(cut_after=500_000)
    with client(hub) as c, pytest.raises(DownloadError):
        c.download(f, tmp_path / NAME)
    hub.faults = Faults(ignore_range=True)
    with client(hub) as c:
        c.download(f, tmp_path / NAME)
    second = hub.file_requests()[1]
    assert second.range == "bytes=500000-" and second.status == 200
    assert (tmp_path / NAME).read_bytes() == model_bytes


def test_a_checksum_mismatch_is_reported_and_the_file_removed(
    hub: HubStandIn, tmp_path: Path
) -> None:
    f = remote(hub)
    hub.faults = Faults(corrupt=True)
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / NAME)
    assert err.value.kind == "integrity"
    assert "SHA-256" in err.value.message and "removed" in err.value.message
    assert "download it anew" in err.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{NAME}.lock"]


def test_a_truncated_file_is_reported_and_removed(hub: HubStandIn, tmp_path: Path) -> None:
    f = remote(hub)
    hub.short_by = 1000  # the server's copy ends early but says so in Content-Length
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / NAME)
    assert err.value.kind == "integrity" and "truncated" in err.value.message
    assert f"{f.size - 1000:,} of {f.size:,} bytes" in err.value.message
    assert not (tmp_path / NAME).exists() and not (tmp_path / f"{NAME}.part").exists()


def test_a_file_kept_in_git_is_checked_with_its_git_object_id(
    hub: HubStandIn, tmp_path: Path
) -> None:
    f = remote(hub, "README.md")
    with client(hub) as c:
        assert c.download(f, tmp_path / "README.md").read_bytes() == b"# BotPsy-0.8B\n"
    hub.faults = Faults(corrupt=True)
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / "again" / "README.md")
    assert err.value.kind == "integrity" and "git checksum" in err.value.message


@pytest.mark.parametrize(
    "fault", [Faults(stall_after=200_000), Faults(trickle=True)], ids=["silent", "trickle"]
)
def test_a_stalled_server_fails_within_the_stall_timeout(
    hub: HubStandIn, tmp_path: Path, fault: Faults, model_bytes: bytes
) -> None:
    f = remote(hub)
    hub.faults = fault
    start = time.monotonic()
    with client(hub, stall_timeout_s=0.6) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / NAME)
    assert time.monotonic() - start < 5
    assert err.value.kind == "stalled" and "no data for 0.6 s" in err.value.message
    assert "resume" in err.value.hint
    part = (tmp_path / f"{NAME}.part").read_bytes()
    assert part and part == model_bytes[: len(part)]  # what arrived, kept in order for a resume
    # the stand-in counts a piece after writing it: a trickled byte can be read before it is
    # counted, or written into the connection the client has just left (a race under load)
    assert abs(len(part) - hub.file_requests()[0].sent) <= (1 if fault.trickle else 0)


def test_offline_is_one_sentence_and_fast(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.monotonic()
    with HubClient(f"http://127.0.0.1:{free_port()}") as c, pytest.raises(DownloadError) as err:
        c.repo_info(REPO)
    assert time.monotonic() - start < 5
    assert err.value.kind == "offline" and "Cannot reach the Hugging Face Hub" in err.value.message
    assert "botpsy model import PATH" in err.value.hint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.repo_info(REPO)
    assert err.value.kind == "offline" and "HF_HUB_OFFLINE" in err.value.message
    assert hub.log == []


def test_a_server_that_accepts_but_never_answers_fails_in_bounded_time() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # the kernel completes the connection; nobody ever answers
        port = listener.getsockname()[1]
        start = time.monotonic()
        with (
            HubClient(f"http://127.0.0.1:{port}", stall_timeout_s=0.5) as c,
            pytest.raises(DownloadError) as err,
        ):
            c.repo_info(REPO)
    assert time.monotonic() - start < 5
    assert err.value.kind == "stalled" and "did not answer within 0.5 s" in err.value.message


def test_a_gated_repository_says_what_to_do(
    hub: HubStandIn, model_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.repos[REPO].gated = True
    hub.tokens |= {"hf_granted", "hf_waiting"}
    hub.repos[REPO].granted = {"hf_granted"}
    f = remote(hub)  # the file list is public, as on the Hub

    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / NAME)
    assert err.value.kind == "gated" and hub.log[-1].status == 401
    assert "Accept them at" in err.value.hint and "HF_TOKEN" in err.value.hint

    monkeypatch.setenv("HF_TOKEN", "hf_waiting")
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / NAME)
    assert err.value.kind == "gated" and hub.log[-1].status == 403
    assert "has no access to it yet" in err.value.message

    monkeypatch.delenv("HF_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text("hf_granted\n", encoding="utf-8")
    monkeypatch.setenv("HF_TOKEN_PATH", str(token_file))  # where `hf auth login` saves it
    with client(hub) as c:
        assert c.download(f, tmp_path / NAME).read_bytes() == model_bytes
    assert hub.log[-1].authorization is not None

    monkeypatch.setenv("HF_TOKEN", "hf_revoked")
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.repo_info(REPO)
    assert err.value.kind == "auth" and "refused your token" in err.value.message


def test_missing_repository_revision_and_file_are_named(hub: HubStandIn) -> None:
    with client(hub) as c:
        with pytest.raises(DownloadError) as err:
            c.repo_info("qvac/NoSuchModel")
        assert err.value.kind == "not_found"
        assert "qvac/NoSuchModel was not found" in err.value.message
        assert "private, set HF_TOKEN" in err.value.hint
        with pytest.raises(DownloadError) as err:
            c.repo_info(REPO, "v9")
        assert "has no revision called v9" in err.value.message
        f = remote(hub)
        gone = HubFile(REPO, f.commit, "gone.gguf", 10, "0" * 64, None)
        with pytest.raises(DownloadError) as err:
            c.download(gone, Path("/nonexistent-botpsy-test") / "x")
    assert err.value.kind == "not_found" and "gone.gguf was not found in" in err.value.message


def test_the_disk_space_check_comes_before_any_transfer(hub: HubStandIn, tmp_path: Path) -> None:
    f = remote(hub)
    huge = HubFile(f.repo, f.commit, f.path, 1 << 60, f.sha256, None)
    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(huge, tmp_path / NAME)
    assert err.value.kind == "disk" and "Not enough disk space" in err.value.message
    assert hub.file_requests() == [] and not (tmp_path / f"{NAME}.part").exists()


def test_one_download_of_a_file_at_a_time(hub: HubStandIn, tmp_path: Path) -> None:
    f = remote(hub)
    with (
        exclusive_lock(tmp_path / f".{NAME}.lock", "test"),
        client(hub) as c,
        pytest.raises(DownloadError) as err,
    ):
        c.download(f, tmp_path / NAME)
    assert err.value.kind == "busy" and hub.file_requests() == []


def test_cancel_stops_and_keeps_what_arrived(hub: HubStandIn, tmp_path: Path) -> None:
    f = remote(hub)
    cancel = threading.Event()
    hub.faults = Faults(trickle=True)

    def on_progress(p: Progress) -> None:
        if p.phase == "download" and p.done > 0:
            cancel.set()

    with client(hub) as c, pytest.raises(DownloadError) as err:
        c.download(f, tmp_path / NAME, on_progress=on_progress, cancel=cancel)
    assert err.value.kind == "cancelled" and "resume" in err.value.hint
    assert (tmp_path / f"{NAME}.part").stat().st_size > 0


def test_progress_line_shows_speed_and_time_left() -> None:
    mib = 1024 * 1024
    line = format_progress(Progress("download", NAME, 230 * mib, 502 * mib, 0, 12.5 * mib, 18.4))
    assert line.startswith(f"{NAME} [##########-")
    assert "45.8% 230.0 MiB/502.0 MiB 12.5 MiB/s 0:22 left" in line
    done = format_progress(Progress("download", NAME, 502 * mib, 502 * mib, 0, 9e6, 61, True))
    assert done.endswith("100.0% 502.0 MiB/502.0 MiB in 1:01")
    assert "--:-- left" in format_progress(Progress("check", NAME, 0, 10, 0, 0.0, 0.0))


def test_the_endpoint_comes_from_hf_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub_endpoint() == "https://huggingface.co"
    assert hub_endpoint("http://mirror.example/") == "http://mirror.example"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    assert hub_endpoint("http://mirror.example") == "http://127.0.0.1:9"
