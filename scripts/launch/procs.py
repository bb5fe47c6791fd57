"""The launchers' one way to start and stop a job's processes (launch_job's
supervise.Job, ps_run's RunJob, train_ctr's PyTorch reference): each in a
process group of its own that gets SIGKILL when the launcher dies, even by
SIGKILL (PR_SET_PDEATHSIG), and stopped by a signal to its group, SIGKILL
TERM_GRACE_S later. Standard library only."""
import ctypes
import os
import signal
import subprocess
import time

TERM_GRACE_S = 3.0  # SIGTERM -> SIGKILL
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with(parent):
    """A preexec_fn: the child gets SIGKILL when `parent` dies."""
    def preexec():
        _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os._exit(1)
    return preexec


def spawn(cmd, stdout=None, stderr=None, env=None):
    """`cmd` in a process group of its own (its pid is the group's id), its
    stdin closed, dying with this process."""
    return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, process_group=0,
                            preexec_fn=_die_with(os.getpid()), close_fds=True, bufsize=0)


def signal_group(pid, sig):
    """`sig` to the process group of `pid`; False when none is left."""
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop(popens, sig=signal.SIGTERM, grace=TERM_GRACE_S):
    """`sig` to the group of each of `popens` still running, SIGKILL to those
    still running `grace` seconds later; waits for every one. Returns those
    that needed SIGKILL."""
    live = [p for p in popens if p.poll() is None]
    for p in live:
        signal_group(p.pid, sig)
    deadline = time.monotonic() + grace
    stubborn = []
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stubborn.append(p)
    for p in stubborn:
        signal_group(p.pid, signal.SIGKILL)
    for p in popens:
        p.wait()
    return stubborn
