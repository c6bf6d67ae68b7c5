"""The offender dashboard in Django admin: who was limited, from where, by which policy.

Thin on purpose: the offenders service (``django_ratelimits.offenders``) reads
and acts; here ``forms`` validate what a page asks, ``present`` turns what the
service returns into what templates and the JSON endpoint show, and ``views``
serve them under the policy admin (see ``urls``). docs/dashboard.md describes
the pages and the JSON.
"""
