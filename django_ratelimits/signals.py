"""Signals a project can connect to.

``rate_limited``: a policy denied a request (also in shadow mode, with
``shadow=True``). Sent with ``request``, ``policy`` (a
:class:`~django_ratelimits.policies.spec.PolicySpec`), ``result`` (the denying
:class:`~django_ratelimits.engine.LimitResult`) and ``shadow``. For a failed-login
policy, once per login, by its look before the password (refused with 429, or in
shadow mode would have been); the charge of a failure, which refuses nothing, sends
none.

``backend_failed``: Redis could not decide a request. Sent with ``request``,
``error`` (a :class:`~django_ratelimits.engine.errors.BackendError`), ``policies``
(the policies that went unchecked) and ``fail_closed`` (whether the request is
refused because of them). Once per request and policy: a request Redis fails in two
steps (a login's look, then its failure's charge; a compat count, then a look) names
each policy once.

``network_blocked``: a request from a blocked network was refused (403), before
any limit. Sent with ``request`` and ``entry`` (a
:class:`~django_ratelimits.policies.networks.BlockedEntry`: ``network``,
``reason``, ``expires_at``), once per refusal: count them there.
"""

from __future__ import annotations

from django.dispatch import Signal

rate_limited = Signal()
backend_failed = Signal()
network_blocked = Signal()
