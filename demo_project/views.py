"""Views of the demo project."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET


@require_GET
def hello(request: HttpRequest) -> JsonResponse:
    """A trivial JSON endpoint to point rate-limit policies at."""
    return JsonResponse(
        {
            "message": "hello",
            "user": request.user.get_username() if request.user.is_authenticated else None,
            "time": timezone.now().isoformat(),
        }
    )
