#!/usr/bin/env bash
# The README's test command: install what the tests need, then run them.
#
#   tools/test.sh                 # everything (as root, or as a user who may sudo)
#   tools/test.sh tests/agent -x  # extra arguments go to pytest
#   tools/test.sh --setup-only    # steps 1-3 only (.ci/run checks style before the tests)
#
# 1. tools/install-test-deps.sh: the system packages (apt; quick when they are there),
# 2. pip install -e ".[test]": the app and the test tools (pip compiles llama-cpp-python from
#    source the first time, about 7-10 minutes on two cores, then reuses its cached wheel),
# 3. a llama-server built from the llama.cpp that llama-cpp-python vendors, for the remote-engine
#    tests (10-15 minutes on two cores the first time, with its progress shown; cached in
#    ~/.cache/botpsy-desktop-tests after that),
# 4. pytest in two worker processes (pytest-xdist; about 21 minutes on two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
PYTHON=${PYTHON:-python3}

echo "== system packages (tools/install-test-deps.sh)"
bash tools/install-test-deps.sh
echo "== pip install -e .[test] (llama-cpp-python compiles the first time: ~7-10 min on 2 cores)"
"$PYTHON" -m pip install -q -e ".[test]"
echo "== llama-server for the remote-engine tests (built once, cached)"
nice -n 10 "$PYTHON" -m tests.helpers.llama_server --progress
if [ "${1:-}" = --setup-only ]; then
    exit 0
fi
# The app's modules compiled once: with PYTHONDONTWRITEBYTECODE set (as on some CI images),
# every CLI process a test starts would compile them again.
"$PYTHON" -m compileall -q botpsy_desktop tests tools >/dev/null
# The tests' files (pytest's tmp_path, $TMPDIR) in memory when /dev/shm is a tmpfs with room
# (4 GiB free) that may run programs: on a disk every SQLite commit of the hundreds of profiles
# the tests make waits for fsync, and every file removed after a test is discarded, a few ms
# each (the evaluation harness's 204 sandboxes: 60 s on the disk, 19 s in memory). The same
# code runs; nothing a test checks needs the data to survive a power cut. BOTPSY_TEST_TMP=DIR
# puts them in DIR; BOTPSY_TEST_TMP= (empty) leaves them in $TMPDIR. Removed after the run.
if [ -z "${BOTPSY_TEST_TMP+set}" ]; then
    BOTPSY_TEST_TMP=
    if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ] \
        && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge $((4 * 1024 * 1024)) ]; then
        probe=$(mktemp /dev/shm/botpsy-exec-probe.XXXXXX)
        printf '#!/bin/sh\nexit 0\n' >"$probe" && chmod +x "$probe"
        if "$probe" 2>/dev/null; then BOTPSY_TEST_TMP=/dev/shm; fi  # not mounted noexec
        rm -f "$probe"
    fi
fi
if [ -n "$BOTPSY_TEST_TMP" ]; then
    tmp=$(mktemp -d "$BOTPSY_TEST_TMP/botpsy-tests.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # open to every user as /tmp is (sticky): as root the mail tests' Dovecot runs its mail
    # processes as nobody, in a folder of $TMPDIR that nobody must reach (tests/helpers/mail_servers.py)
    chmod 1777 "$tmp"
    export TMPDIR=$tmp
    set -- --basetemp "$tmp/pytest" "$@"
    echo "== test files in $tmp (BOTPSY_TEST_TMP= keeps them in \$TMPDIR)"
fi
echo "== pytest, in ${BOTPSY_TEST_WORKERS:-2} worker processes (pytest-xdist; BOTPSY_TEST_WORKERS=0 runs in one)"
"$PYTHON" -m pytest -n "${BOTPSY_TEST_WORKERS:-2}" --dist worksteal "$@"
