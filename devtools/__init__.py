"""Development tools of django-ratelimits: used by ``tests/``, ``benchmarks/`` and
``make demo``, never shipped in the wheel (``[tool.setuptools.packages.find]`` includes
only ``django_ratelimits*``).

* :mod:`devtools.redis_harness`: real ``redis-server`` processes and a 3-master cluster;
* :mod:`devtools.reference`: the pure-Python model of every algorithm, which the engine
  tests compare Redis against and :mod:`devtools.accuracy` replays;
* :mod:`devtools.accuracy`: the accuracy table of docs/algorithms.md;
* :mod:`devtools.memory_attack` and :mod:`devtools.rotation_attack`: the attacks whose
  figures docs/reliability.md and docs/security.md quote;
* :mod:`devtools.simulate`: demo traffic through a site's limited URLs (``make demo``).
"""
