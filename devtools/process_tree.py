"""The processes below a process, read from /proc: what the demo's services or a benchmark's
listeners started, and which of those still run, so that a stop leaves nothing behind (empty
where there is no /proc).
"""

import os
import signal


def proc_table():
    """{pid: (ppid, start time)} of every process, from /proc (empty where there is none)."""
    table = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry)] = (int(fields[1]), fields[19])
    return table


def descendants(pid, table=None):
    """{pid: start time} of every process below ``pid``."""
    table = proc_table() if table is None else table
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, started) in table.items():
            if ppid == parent and child not in found:
                found[child] = started
                todo.append(child)
    return found


def alive(processes):
    """The subset of {pid: start time} still running as the same process (not a zombie)."""
    table = proc_table()
    living = {}
    for pid, started in processes.items():
        if pid in table and table[pid][1] == started:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except OSError:
                continue
            living[pid] = started
    return living


def sigkill(pids):
    """SIGKILL each of these processes that still exists."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_tree(pid):
    """SIGKILL a process and every process below it (a task process may have a session of its
    own, out of reach of a kill of its listener's group)."""
    sigkill([pid, *descendants(pid)])


def kill_all(processes):
    """SIGKILL the processes of {pid: start time} that still run as the same process."""
    sigkill(alive(processes))
