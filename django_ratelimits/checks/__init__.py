"""System checks (``manage.py check``), by subject.

Configuration checks carry the tag :data:`TAG`; the checks that ask Redis
carry :data:`REDIS_TAG`, so ``manage.py check`` (and ``runserver``,
``migrate``) run both, and ``manage.py check --tag ratelimits`` only the
configuration ones. They sit beside the request side: they import the layers
below them, and nothing imports them but ``apps.ready`` (which registers them).

========================  =========================================================
``E001``                  ``RateLimitMiddleware`` comes before ``AuthenticationMiddleware``
``E002``                  ``DJANGO_RATELIMITS`` is invalid
``E003``                  ``REDIS`` gives no usable client (a decoding one, an unreadable URL or
                          an option redis-py does not take among them)
``E004``                  ``TRUSTED_PROXIES`` trusts every address
``E005``                  a policy row's path pattern is one RE2 refuses
``E006``                  code names a policy that does not exist
``E007``                  a django-ratelimit setting that ``compat`` does not honour
``E008``                  a policy names a key function that is not allowed (one per policy)
``E009``                  ``METRICS`` names a backend whose library is not installed
``E011``                  ``REDIS`` names a Redis Cluster node without ``CLUSTER: True``
                          (most keys get MOVED: fail open), or sets it for a server not in
                          cluster mode
``E012``                  ``RESPONSE_VIEW`` or ``BLOCKED_RESPONSE_VIEW`` cannot be imported
``E100``                  the test kit (``django_ratelimits.testing``) is on outside a test
``E010``                  a policy's escalating ban is inconsistent (in code or in a row)
``W001``                  the app is installed but ``RateLimitMiddleware`` is not
``W002``                  Redis does not answer PING within half a second
``W003``                  (``--deploy``) a full Redis would refuse writes, or its
                          ``maxmemory-policy`` could not be read
``W004``                  the policy table cannot be read, so E006 cannot tell
``W005``                  ``FailedLoginBackend`` is not first in ``AUTHENTICATION_BACKENDS``
``W006``                  a setting is named almost ``DJANGO_RATELIMITS`` (nothing reads it)
``W007``                  the django-redis cache rate limits use sets no socket timeouts
``W011``                  a tier names a group that does not exist (it matches nobody)
``W012``                  an IP override names the IP as counted before ``HASH_IPS``,
                          ``IPV4_PREFIX`` or ``IPV6_PREFIX`` changed (it matches nobody)
``W013``                  a policy row's path pattern is anchored at the start without
                          ``/`` (``^api/``): it matches no request
``W014``                  a sliding-log policy row admits more than 10,000 per window
                          (saved before admin refused it): enforced as saved
``W015``                  a policy row's path pattern starts with a language prefix
                          (``^/en/login/``) on a site that serves pages under language
                          prefixes: it limits the page in that language alone
``W016``                  ``LocaleMiddleware`` comes below ``RateLimitMiddleware`` and the
                          URLconf has translated routes (resolved in a stale language)
``I001``                  ``REDIS`` sets a TLS option only redis-py's sync client takes:
                          async requests' checks run it in a worker thread
========================  =========================================================

``setup`` holds E001 to E004, E007, E009, E012, W001, W006, W007, W016 and I001; ``policies`` E005,
E006, E008, W004, W013, W014 and W015 (with ``references``, the places code names a policy);
``redis_server`` W002, E011 and W003; ``logins`` W005; ``tiers`` W011;
``overrides`` W012; ``bans`` E010; ``kit`` E100.
"""

from __future__ import annotations

from django_ratelimits.checks import (
    bans,
    kit,
    logins,
    overrides,
    policies,
    redis_server,
    setup,
    tiers,
)
from django_ratelimits.checks.common import REDIS_TAG, TAG
from django_ratelimits.checks.redis_server import PING_TIMEOUT

__all__ = [
    "PING_TIMEOUT",
    "REDIS_TAG",
    "TAG",
    "bans",
    "kit",
    "logins",
    "overrides",
    "policies",
    "redis_server",
    "setup",
    "tiers",
]
