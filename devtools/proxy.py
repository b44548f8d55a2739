"""A TCP proxy on 127.0.0.1 in front of a real Redis that holds traffic: the connections it
is told to hold forward nothing either way (what a partition looks like to both ends: no
answer, no error) until ``heal()``, when what was held is delivered. Used by the fault tests
and the soak (its task_partition fault)."""

import os
import select
import socket
import threading


class HoldingProxy:
    """Forwards 127.0.0.1:<port> to Redis on ``target_port``. ``hold_all()``: every
    connection is held, open or to come, except those of the processes ``spared`` (a pid or
    a list of pids) if given; ``heal()``: none."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._held_new = False
        self._spared = []
        self._pairs = []  # [client socket, server socket, held Event]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def hold_all(self, spared=()):
        with self._lock:
            self._held_new = True
            self._spared = [spared] if isinstance(spared, int) else list(spared or ())
            for client, _, held in self._pairs:
                if not self._of_spared(client):
                    held.set()

    def _of_spared(self, client):
        return any(_owns(pid, client) for pid in self._spared)

    def heal(self):
        with self._lock:
            self._held_new = False
            for _, _, held in self._pairs:
                held.clear()

    def close(self):
        self._closed = True
        self.heal()
        self.listener.close()
        with self._lock:
            for client, server, _ in self._pairs:
                for sock in (client, server):
                    try:
                        sock.close()
                    except OSError:
                        pass

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            held = threading.Event()
            with self._lock:
                if self._held_new and not self._of_spared(client):
                    held.set()
                self._pairs.append((client, server, held))
            threading.Thread(target=self._pump, args=(client, server, held), daemon=True).start()

    def _pump(self, client, server, held):
        ends = {client: server, server: client}
        try:
            while not self._closed:
                if held.is_set():  # read nothing: it waits in the kernel until healed
                    threading.Event().wait(0.05)
                    continue
                readable, _, _ = select.select(list(ends), [], [], 0.05)
                for sock in readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    ends[sock].sendall(data)
        except OSError:
            return
        finally:
            for sock in ends:
                try:
                    sock.close()
                except OSError:
                    pass


def _owns(pid, accepted):
    """Whether process ``pid`` holds the other end of the connection ``accepted``: its port,
    found in /proc/net/tcp, names a socket inode among the process's descriptors."""
    try:
        port = accepted.getpeername()[1]
    except OSError:  # closed meanwhile
        return False
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    inodes = {row[9] for row in rows if int(row[1].split(":")[1], 16) == port}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False
