"""Run a unittest file written against blueque 1.0's API; exit 0 only if every test asked for
ran and passed (a skipped test is a failure here, never a pass)::

    python harness.py [--engine] FILE TEST_ID...      (TEST_ID: Class.method)

Without ``--engine``, ``import blueque`` finds the blueque installed in this interpreter (the
interop venv's real 1.0.1). With it, it finds the shim package next to this file, which only
re-exports django_blueque.core, and the one private read of blueque's own integration test,
``queue._redis_queue.get_listeners()``, is given an adapter.

Only the standard library is imported here: this file also runs in the blueque 1.0 venv.
"""

import argparse
import importlib.util
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


class RedisQueueAdapter:
    """What blueque 1.0's integration test reads of its private ``Queue._redis_queue``."""

    def __init__(self, queue):
        self._queue = queue

    def get_listeners(self):
        client = self._queue._client
        return client.redis.smembers(client.keys.listeners(self._queue.name))


def use_engine():
    sys.path[:0] = [str(HERE / "shim"), str(REPO)]
    from django_blueque.core.client import Queue

    Queue._redis_queue = property(RedisQueueAdapter)


def load(path):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", action="store_true")
    parser.add_argument("file")
    parser.add_argument("test_ids", nargs="+")
    args = parser.parse_args()
    if args.engine:
        use_engine()
    import blueque

    print(f"blueque from {blueque.__file__}", flush=True)
    module = load(args.file)
    suite = unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromName(test_id, module) for test_id in args.test_ids)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    ran_all = result.testsRun == len(args.test_ids) and not result.skipped
    if not ran_all:
        print(f"ran {result.testsRun} of {len(args.test_ids)}, skipped {len(result.skipped)}")
    return 0 if result.wasSuccessful() and ran_all else 1


if __name__ == "__main__":
    sys.exit(main())
