"""``tests.i18n_urls`` with every language prefixed, the default one too."""

from __future__ import annotations

from tests.i18n_urls import routes

urlpatterns = routes(prefix_default_language=True)
