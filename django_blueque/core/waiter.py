"""The listener's way of waiting for work without polling: a connection per queue holding a
blocking peek (``BLMOVE pending pending RIGHT RIGHT``), which returns as soon as the list has an
id and leaves it as it was; the listener select()s on these connections."""

import redis

BLOCK_SECONDS = 60
"""How long one blocking peek lasts before it is renewed (the only other idle command)."""

CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)


class PendingWaiter:
    """A connection holding a blocking peek on one queue's pending list."""

    def __init__(self, client, queue):
        self._pool = client.redis.connection_pool
        self.key = client.keys.pending(queue)
        self.conn = None
        self.armed = False

    def arm(self):
        if self.armed:
            return
        if self.conn is None:
            # taken from the pool (connected as the pool connects: through Sentinel, say),
            # and held until closed, so that the pool can cut it when the primary moves
            self.conn = self._pool.get_connection()
        self.conn.send_command("BLMOVE", self.key, self.key, "RIGHT", "RIGHT", BLOCK_SECONDS)
        self.armed = True

    def fileno(self):
        # redis-py keeps the socket here; select() needs its descriptor.
        return self.conn._sock.fileno()

    def settle(self):
        """Read the peek's reply (its value is not needed: the id stays in the list)."""
        self.armed = False
        try:
            self.conn.read_response()
        except CONNECTION_ERRORS:
            self.close()
            raise

    def close(self):
        if self.conn is not None:
            self.conn.disconnect()
            self._pool.release(self.conn)
        self.conn = None
        self.armed = False
