"""Demo traffic for a site that uses django-ratelimits (``make demo``): the traffic
itself in :mod:`devtools.simulate.traffic`, the command line in
:mod:`devtools.simulate.__main__` (``python -m devtools.simulate``).

Development tooling, not part of the installed package: it drives Django's test client
and creates ``sim-*`` users in the site's database.
"""
