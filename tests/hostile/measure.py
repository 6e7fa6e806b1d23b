"""Run a command and say what it cost the host, for tests/test_hostile_guests.py.

    python measure.py BACKSTOP_MIB BACKSTOP_SECONDS ADDRESS_SPACE_BYTES COMMAND...

Prints one JSON object: the command's exit status, stdout and stderr; the
wall time from its start until it and every process it started have ended;
the peak resident size of the largest of them (getrusage RUSAGE_CHILDREN of
this process, which waits for all of them: the command waits for the
workers it forks, and any it leaves behind are reparented here, a child
subreaper, and waited for here, so each one's peak is counted); the largest
resident size seen by polling /proc (a second opinion, and what the
backstop acts on).

The backstop protects the machine from a harness that does not bound its
guest: the command gets an address-space limit, and its whole session is
killed once any process in it holds more than BACKSTOP_MIB or the session
runs past BACKSTOP_SECONDS; `backstop` then says which. The backstop lies
far above what the tests allow, so it never decides a test that passes.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.02
PAGE = os.sysconf("SC_PAGE_SIZE")


def _session_rss(session: int) -> dict[int, int]:
    """pid -> resident bytes of every process in `session`."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
            if int(fields[3]) != session:  # field 6 of stat(5): the session id
                continue
            with open(f"/proc/{name}/statm", "rb") as statm:
                found[int(name)] = int(statm.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return found


def main() -> None:
    backstop_bytes = int(sys.argv[1]) << 20
    backstop_seconds = float(sys.argv[2])
    address_space = int(sys.argv[3])
    command = sys.argv[4:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")

    def limit_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                             preexec_fn=limit_address_space)
    finished = threading.Event()
    watched = {"peak": 0, "backstop": None}

    def watch() -> None:
        while not finished.wait(POLL_SECONDS):
            sizes = _session_rss(child.pid)
            watched["peak"] = max([watched["peak"], *sizes.values()])
            over = [pid for pid, size in sizes.items() if size > backstop_bytes]
            late = time.monotonic() - started > backstop_seconds
            if (over or late) and watched["backstop"] is None:
                watched["backstop"] = (f"process {over[0]} held {sizes[over[0]] >> 20} MiB" if over
                                       else f"still running after {backstop_seconds:g} s")
            if watched["backstop"] is not None:
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = child.communicate()
    while True:  # whatever the command left running is ours now: wait for it (the watcher ends it if need be)
        try:
            os.wait()
        except ChildProcessError:
            break
    seconds = time.monotonic() - started
    finished.set()
    watcher.join()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10  # KiB on Linux
    print(json.dumps({"exit": child.returncode, "stdout": stdout.decode(errors="replace"),
                      "stderr": stderr.decode(errors="replace"), "seconds": seconds, "peak_rss": peak,
                      "polled_rss": watched["peak"], "backstop": watched["backstop"]}))


if __name__ == "__main__":
    main()
