"""The pages a task process writes between waiting for its task and its task's first line, and
the Python objects on them: where its copy-on-write faults come from (issue 17).

    python bench/cow_pages.py [--tasks 3]

Its own redis-server and a ForkingRunner (concurrency 1) whose callback stops its own process
(SIGSTOP) as its first act. While the spare waits for its task, this harness reads the spare's
page map (/proc/PID/pagemap: the pages mapped in it alone) and copies its writable memory
(/proc/PID/mem); it enqueues a task, and once the process stopped, it reads both again. A page
mapped in the process alone since is a page the way to the task wrote: copied from its parent
at that write (a copy-on-write fault), or new. The words that changed on it are then named by
the object they fall in, from a list of every object the process can reach (the callback
writes it after SIGCONT). A refcount changed is at offset 0; in a code object (Python 3.11),
offset 48 holds its call count (``co_warmup``). Linux only, as root or the processes' owner.
"""

import argparse
import bisect
import gc
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from infra import private_redis  # noqa: E402

from django_blueque.core import Client, runner  # noqa: E402

QUEUE = "cow_pages"
PAGE = 4096


def stop_and_list_objects(task):
    """The callback: stop here (the harness reads the memory), then list what it can reach."""
    os.kill(os.getpid(), signal.SIGSTOP)
    gc.unfreeze()  # the listener froze its heap before forking (runner._freeze_heap)
    found = gc.get_objects() + list(sys.modules.values())
    for container in list(found):
        found += gc.get_referents(container)
    rows = {id(obj): f"{id(obj)} {sys.getsizeof(obj)} {type(obj).__name__}: "
                     f"{_short(obj)}" for obj in found}
    Path(task.parameters).write_text("\n".join(rows.values()))
    return ""


def _short(obj):
    try:
        return repr(obj)[:90].replace("\n", " ")
    except Exception:  # noqa: BLE001 - any repr may fail; the address still tells something
        return "?"


def _mappings(pid):
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(None, 5)
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        yield start, end, fields[1], fields[5] if len(fields) > 5 else "[anon]"


def own_pages(pid):
    """{address: mapping name} of the writable pages mapped in ``pid`` alone."""
    pages = {}
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for start, end, mode, name in _mappings(pid):
            if "w" not in mode:
                continue
            pagemap.seek(start // PAGE * 8)
            entries = struct.iter_unpack("Q", pagemap.read((end - start) // PAGE * 8))
            for index, (entry,) in enumerate(entries):
                if entry >> 63 & 1 and entry >> 56 & 1:  # present, exclusively mapped
                    pages[start + index * PAGE] = name.rsplit("/", 1)[-1]
    return pages


def memory(pid, addresses):
    copied = {}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for address in addresses:
            try:
                mem.seek(address)
                copied[address] = mem.read(PAGE)
            except OSError:
                pass
    return copied


def writable(pid):
    return [page for start, end, mode, name in _mappings(pid)
            if "w" in mode and not name.startswith("[v") for page in range(start, end, PAGE)]


def _state(pid):
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _descendants(pid):
    found = []
    for thread in Path(f"/proc/{pid}/task").iterdir():
        for child in (thread / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


def one_task(queue, listener, listing):
    """The pages the spare wrote on its way to the task's first line, each with its words
    changed and the objects they fall in."""
    spares = _descendants(listener.pid)
    before = {pid: (own_pages(pid), memory(pid, writable(pid))) for pid in spares}
    queue.enqueue(str(listing))
    deadline = time.monotonic() + 10
    while not (stopped := [pid for pid in spares if _state(pid) == "T"]):
        if time.monotonic() > deadline:
            raise SystemExit("no task process stopped at its task's first line")
        time.sleep(0.002)
    pid = stopped[0]
    was_own, was = before[pid]
    written = {page: name for page, name in own_pages(pid).items() if page not in was_own}
    now = memory(pid, written)
    os.kill(pid, signal.SIGCONT)
    while listing.stat().st_size == 0:
        time.sleep(0.01)
    time.sleep(0.2)  # the listing written whole
    objects = sorted((int(address), int(size), text) for address, size, text in (
        line.split(" ", 2) for line in listing.read_text().splitlines()))
    starts = [address for address, _, _ in objects]
    report = []
    for page, name in sorted(written.items()):
        old, new = was.get(page), now.get(page, b"")
        words = [offset for offset in range(0, PAGE, 8)
                 if old is not None and old[offset:offset + 8] != new[offset:offset + 8]]
        report.append(f"{page:x} {name}: {'new' if old is None else len(words)} words changed")
        for offset in words[:6]:
            address = page + offset
            index = bisect.bisect_right(starts, address) - 1
            change = (f"{int.from_bytes(old[offset:offset + 8], 'little')} -> "
                      f"{int.from_bytes(new[offset:offset + 8], 'little')}")
            if index >= 0 and address < objects[index][0] + objects[index][1]:
                report.append(f"    +{address - objects[index][0]} of {objects[index][2]}: "
                              f"{change}")
            else:
                report.append(f"    {address:x} (no object listed): {change}")
    return len(written), report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="blueque-cow-") as tmp, \
            private_redis(Path(tmp)) as url:
        listener = subprocess.Popen([sys.executable, __file__, "--listen", url])
        try:
            queue = Client(url).get_queue(QUEUE)
            time.sleep(2)
            for number in range(args.tasks):
                listing = Path(tmp) / f"objects-{number}"
                listing.touch()
                count, report = one_task(queue, listener, listing)
                print(f"task {number}: {count} pages written on the way to its first line")
                if number == args.tasks - 1:
                    print("\n".join(report))
                time.sleep(0.5)
        finally:
            listener.terminate()
            listener.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--listen"]:
        runner.ForkingRunner(Client(sys.argv[2]), QUEUE, stop_and_list_objects,
                             concurrency=1).run()
    else:
        main()
