"""`botpsy doctor`: check llama.cpp, the model, keyring and folders; optionally a bundle."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK


def add_command(sub: Any) -> None:
    """The `doctor` subcommand and its options."""
    doctor = sub.add_parser("doctor", help="check llama.cpp, the model, keyring and folders")
    doctor.add_argument("--model", metavar="PATH", help="check this GGUF instead of the config's")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.add_argument(
        "--retry-layout",
        action="store_true",
        help="try again, in a worker process, the weight layout a crash in the model's first "
        "decode was blamed on, and forget that verdict if it decodes now",
    )
    doctor.add_argument(
        "--retry-gpu",
        action="store_true",
        help="try the GPU again, in a worker process, for a model moved to the CPU after "
        "llama.cpp's GPU backend crashed in its first decode, and forget that verdict if it "
        "decodes now",
    )
    doctor.add_argument(
        "--bundle",
        nargs="?",
        const="",
        metavar="PATH",
        help="also write a diagnostics zip for a bug report (no passwords, no messages) to "
        "PATH (default: the data folder's diagnostics folder) and print where",
    )


def cmd_doctor(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from botpsy_desktop.doctor import run_checks

    checks = run_checks(
        app, model=args.model, retry_layout=args.retry_layout, retry_gpu=args.retry_gpu
    )
    if getattr(args, "bundle", None) is not None:
        from botpsy_desktop.bundle import write_bundle

        written = write_bundle(app, Path(args.bundle) if args.bundle else None, checks)
        print(f"Diagnostics written to {written}", file=err)
    if args.json:
        json.dump([c.as_dict() for c in checks], out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        for c in checks:
            mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "info": "    "}[c.status]
            print(f"[{mark}] {c.name}: {c.detail}", file=out)
            if c.hint and c.status in ("warn", "fail"):
                print(f"       -> {c.hint}", file=out)
    return EXIT_ERROR if any(c.status == "fail" for c in checks) else EXIT_OK
