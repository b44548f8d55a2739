"""The machinery of the repository's two commands, ``python3 rundemo.py`` (demo.py,
demo_install.py, demo_services.py, process_tree.py) and ``python3 runtests.py`` (testing.py,
testing_envs.py): standard library only, run by any Python 3.11+ before anything is installed.
Beside them, the private Redis set-ups of the tests, the benchmarks and the soak (servers.py,
redis_sentinel.py, redis_cluster.py) and a TCP proxy that holds traffic to a Redis (proxy.py).
Not part of the package: the wheel holds django_blueque alone."""
