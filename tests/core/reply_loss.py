"""A TCP proxy in front of a real Redis that loses the reply to one call: what a client sees
when Redis stops (SIGSTOP, a stall) after reading a call and before answering it, or when the
network fails on the way back. The call itself reaches Redis and runs; its caller waits for
a reply that never comes, until its socket timeout."""

import socket
import threading


class ReplyLosingProxy:
    """Forwards 127.0.0.1:<port> to Redis on ``target_port``. Once ``arm()``ed, the first call
    whose bytes contain ``marker`` is forwarded and its connection's replies are dropped from
    then on (the client gives up on its own and closes it)."""

    def __init__(self, target_port, marker):
        self.target_port = target_port
        self.marker = marker
        self.armed = threading.Event()
        self.lost = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self):
        self.armed.set()

    def _accept(self):
        while True:
            try:
                client, _address = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            muted = threading.Event()
            threading.Thread(target=self._pump, args=(client, upstream, muted, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, muted, False),
                             daemon=True).start()

    def _pump(self, source, sink, muted, from_client):
        try:
            while data := source.recv(65536):
                if from_client and self.armed.is_set() and self.marker in data:
                    self.armed.clear()
                    muted.set()
                    self.lost.set()
                if from_client or not muted.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()
