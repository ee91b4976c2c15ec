"""Processes by pid and process group, read from /proc: what the sandbox supervisor and the deploy activators use to
tell whether a process or a whole group still runs, and to kill a group and wait until it is gone."""

from __future__ import annotations

import os
import signal
import time


def process_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, start time in clock ticks since boot, process group) from /proc, or None if there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command name: state, ppid, pgrp, ... starttime is the 20th of these (field 22 of proc(5)).
    return fields[0], int(fields[19]), int(fields[2])


def process_group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the group? Zombies do not count: where PID 1 never reaps (some container
    inits), killed helpers stay zombies forever and `killpg(pgid, 0)` keeps succeeding."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for name in entries:
        if name.isdigit():
            stat = process_stat(int(name))
            if stat is not None and stat[2] == pgid and stat[0] not in ("Z", "X"):
                return True
    return False


def process_group_kill(pgid: int, *, signum: int = signal.SIGKILL, wait_s: float = 5.0) -> None:
    """Signal the whole group and, for SIGKILL, wait (bounded) until none of it runs any more."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return
    if signum == signal.SIGKILL:
        process_group_wait_dead(pgid, wait_s=wait_s)


def process_group_wait_dead(pgid: int, *, wait_s: float = 5.0) -> bool:
    """After SIGKILL to the group: wait (bounded) until none of it runs. A killed process goes on exiting for a
    moment, under load long enough to be seen running with its command line already gone. False if some still ran
    at the bound (a process stuck in the kernel)."""
    deadline = time.monotonic() + wait_s
    while process_group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
