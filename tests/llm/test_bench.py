"""`botpsy bench` and tools/bench.py: a small run on the tiny model, so the bench cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop import cli
from botpsy_desktop.llm.bench.common import shared_file_bytes
from botpsy_desktop.llm.bench.measure import TARGETS
from tests.helpers.models import REPO_ROOT, tiny_qwen35_gguf


@pytest.mark.model
def test_the_bench_runs_small_on_the_tiny_model() -> None:
    table, r = _tiny_bench(
        "list_folder,find_files",  # the tiny model's context is 4096 tokens
        *("--n-ctx", "4096", "--repeats", "1", "--requests", "6", "--follow-ups", "3"),
        *("--decode-tokens", "8", "--depths", "256", "--thread-counts", "1,2"),
        timeout=900,
    )
    assert "targets:" in table and "time to first token cold / warm" in table
    assert set(r["targets"]) == {key for key, *_ in TARGETS}

    assert r["tools"] == 2 and r["prefix_tokens"] > 300
    assert r["prefix_tokens_reevaluated_after_first_max"] == 0
    assert 0 < r["ttft_warm_s"] < r["ttft_cold_s"]
    # a real second process: cold evaluates the prefix, the next one restores it from disk
    assert "new process: time to first token cold / prefix on disk" in table
    newp = r["new_process"]
    assert newp["prefix_restored"] is True
    assert newp["evaluated_tokens_cold"] == [newp["evaluated_tokens_cold"][0]]
    assert newp["evaluated_tokens_cold"][0] > r["prefix_tokens"]
    assert all(0 < n < 30 for n in newp["evaluated_tokens_disk"])
    assert newp["file_mib"] > 0 and newp["restore_s"] > 0 and newp["read_verify_s"] > 0
    assert newp["ttft_cold_s"] > 0 and newp["ttft_disk_s"] > 0 and newp["load_s"] > 0
    assert newp["peak_rss_disk_mib"] > mem_floor_mib(r)
    # the first request after an import starts from what the import prepared, as a later one
    assert "new process: first request after import / a later request" in table
    assert newp["prepare_at_import_s"] > 0 and newp["ttft_first_after_import_s"] > 0
    assert all(0 < n < 30 for n in newp["evaluated_tokens_first_after_import"])
    for rows in (r["follow_ups_with_warm"], r["follow_ups_without_warm"]):
        assert len(rows) == 3 and all(row["reused"] >= r["prefix_tokens"] for row in rows)
    # after a warm-up, a follow-up evaluates its own message only
    assert all(row["evaluated"] < 30 for row in r["follow_ups_with_warm"])
    assert r["three_step_turns"] == [3] and r["three_step_arithmetic_s"] > 0
    for key in ("raw_prefill_tps", "raw_decode_tps", "app_decode_tps"):
        assert r[key] > 0, key
    assert r["app_constrained_decode_tps"] > 0
    # the app's own CPU per token, in milliseconds, worker and app side, free and in a call
    assert "app's own CPU per token" in table
    for key in (
        "own_cpu_ms_per_token",
        "own_cpu_ms_per_token_in_call",
        "own_cpu_ms_per_token_at_gpu_pace",
    ):
        own = r[key]
        assert own["worker"] > 0 and own["app"] > 0, key
        assert own["total"] == pytest.approx(own["worker"] + own["app"], abs=1e-3), key
        assert own["tokens_per_message"] >= 1 and own["ms_per_token"] > 0, key
        assert 0 <= own["padded_share"] <= 1, key
    assert r["own_cpu_ms_per_token_at_gpu_pace"]["ms_per_token"] >= 4.0  # decodes padded
    mem = r["memory"]
    assert mem["requests"] == 6 and mem["peak_rss_mib"] >= mem["rss_after_last_mib"] > 0
    assert mem["weights_mib"] > 20 and mem["recurrent_state_mib"] >= 0
    # measured through a worker with the app's prefix store: its checkpoints wait on disk
    assert mem["prefix_cache_mb"] == 1024 and mem["checkpoints_on_disk"] >= 1
    assert [d["context"] for d in r["depths"]] == [256]
    assert [t["threads"] for t in r["threads_sweep"]] == [1, 2]
    assert len(r["load_average_start"]) == 3


def _tiny_bench(tools: str, *options: str, timeout: int = 600) -> tuple[str, dict[str, Any]]:
    """tools/bench.py on the tiny model with these tools and one thread: its table and JSON."""
    model = str(tiny_qwen35_gguf())
    command = [sys.executable, str(REPO_ROOT / "tools" / "bench.py"), "--model", model]
    command += ["--tools", tools, "--threads", "1", *options]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr
    table, _, last_line = proc.stdout.rstrip().rpartition("\n")
    result: dict[str, Any] = json.loads(last_line)
    return table, result


@pytest.mark.model
def test_the_bench_measures_memory_alone() -> None:
    _, r = _tiny_bench(
        "list_folder", "--n-ctx", "4096", "--requests", "3", "--memory-only", "--json"
    )
    mem = r["memory"]
    assert mem["requests"] == 3 and mem["peak_rss_mib"] >= mem["rss_after_last_mib"] > 0
    assert mem["checkpoints_on_disk"] >= 1 and r["targets"]["memory.rss_growth"]["value"] < 1
    assert "ttft_cold_s" not in r and "new_process" not in r  # nothing but the memory rows


def test_bench_without_a_model_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--home", str(tmp_path), "bench"]) == cli.EXIT_ERROR
    assert "Pass --model FILE.gguf" in capsys.readouterr().err


def test_bench_refuses_unknown_tools_and_bad_depths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")  # never loaded: the arguments are checked first
    base = ["--home", str(tmp_path), "bench", "--model", str(model)]
    assert cli.main([*base, "--tools", "list_folder,no_such_tool"]) == cli.EXIT_ERROR
    assert "No tool named no_such_tool" in capsys.readouterr().err
    assert cli.main([*base, "--depths", "4k"]) == cli.EXIT_ERROR
    assert "--depths '4k' or --thread-counts '' is not a list" in capsys.readouterr().err


def mem_floor_mib(result: dict[str, object]) -> float:
    """A new process holds at least the model's weights."""
    memory = result["memory"]
    assert isinstance(memory, dict)
    return float(memory["weights_mib"])


@pytest.mark.model
def test_the_bench_can_time_only_a_new_process_with_the_prefix_on_disk() -> None:
    table, r = _tiny_bench("list_folder", "--n-ctx", "2048", "--repeats", "2", "--new-process-only")
    assert "new process: prefix on disk / cold" in table
    assert "warm / cold time to first token" not in table  # only what was measured
    newp = r["new_process"]
    assert newp["prefix_restored"] is True
    assert len(newp["ttft_cold_all_s"]) == len(newp["ttft_disk_all_s"]) == 2
    assert all(n > r["prefix_tokens"] for n in newp["evaluated_tokens_cold"])
    assert r["targets"]["new_process.ttft_disk_over_cold"]["value"] > 0


def _rss_file_kib(pid: int | str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile")


@pytest.mark.skipif(not Path("/proc/self/pagemap").is_file(), reason="reads /proc (Linux)")
def test_the_pages_of_a_library_two_processes_hold_are_counted_once() -> None:
    """The memory figure adds the app's and the worker's resident sizes, less the file pages
    resident in both (libpython, libc...): one page of memory, counted by both sizes."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        shared = shared_file_bytes(("self", child.pid))
        # two interpreters share the interpreter's own pages at least, and no more than the
        # smaller of their file-backed resident sizes
        assert 1024 * 1024 < shared <= 1024 * min(_rss_file_kib("self"), _rss_file_kib(child.pid))
        assert shared_file_bytes(("self",)) == 0  # one process shares nothing with itself
        assert shared_file_bytes(("self", 2**31 - 1)) == 0  # no such process: nothing counted
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(10)
        child.stdout.close()
