"""Run one command confined: a time limit, a file-size limit, and no process left behind.

    python confine.py --timeout SECONDS [--user NAME] [--home DIR] -- COMMAND ...

The autograder starts every run of submitted code through this script, which imports nothing
of the submission. It makes itself a child subreaper (Linux's ``PR_SET_CHILD_SUBREAPER``), so
every process the command starts stays its descendant even after a double fork or ``setsid``;
when the command exits or its time is up, it kills every descendant, again and again until none
is left, and only then exits. A child that "outlives the grader" therefore cannot exist: when
this script's caller sees it exit, nothing the submission started is still running.

With ``--user`` (the caller must be root) the command runs as that user, with ``--home`` as its
home and temporary folder, so that it can write neither the grader's files nor the reference.

Exit status: the command's, or 124 when it ran past ``--timeout`` (on SIGTERM it kills everything
the same way and exits 143).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pwd
import resource
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
FILE_LIMIT_BYTES = 64 * 2**20  # no file the command writes may grow past this (its report included)
TIMED_OUT = 124


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process instead of init (Linux only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def descendants(root: int) -> set[int]:
    """Every live process below `root`, read from /proc (parents first does not matter: all get SIGKILL)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it exited while we looked
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def kill_all(root: int) -> None:
    """SIGKILL every descendant of `root` and reap it, until none is left (forks race the scan)."""
    for _ in range(1000):
        alive = descendants(root)
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
        time.sleep(0.01)
    raise RuntimeError("could not kill every process the confined command started")


def reap() -> None:
    """Collect every exited child (orphans come to us as a subreaper), without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def limits() -> None:
    """In the child, before exec: a cap on file sizes, no core files."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT_BYTES, FILE_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def stop(signum, frame) -> None:
    """On SIGTERM: kill every descendant, then exit."""
    kill_all(os.getpid())
    sys.exit(128 + signum)


def run(command: list[str], timeout: float, user: str | None, home: str | None) -> int:
    """Run `command` confined (see the module docstring); its exit status, or `TIMED_OUT`."""
    become_subreaper()
    signal.signal(signal.SIGTERM, stop)  # a caller giving up (a whole-run limit) still leaves nothing behind
    env = dict(os.environ)
    account = None
    if user is not None:
        account = pwd.getpwnam(user)
        env.update(HOME=home or "/nonexistent", TMPDIR=home or "/nonexistent", USER=user, LOGNAME=user)
    child = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=limits,
                             user=account.pw_uid if account else None, group=account.pw_gid if account else None,
                             extra_groups=[] if account else None, cwd=home if account else None)
    try:
        code = child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = TIMED_OUT
    kill_all(os.getpid())
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, required=True, help="seconds before everything is killed")
    parser.add_argument("--user", help="run the command as this user (needs root)")
    parser.add_argument("--home", help="with --user: its home and temporary folder")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    return run(command, args.timeout, args.user, args.home)


if __name__ == "__main__":
    sys.exit(main())
