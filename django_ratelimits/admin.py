"""Admin for rate-limit policies (grouped fields, bulk switches, a preview in words), and
the offender dashboard's entry beside them on the admin index and in the sidebar."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone, translation
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import capfirst, get_text_list
from django.utils.translation import gettext, ngettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from django_ratelimits import (
    key_functions,
    network_admin,  # noqa: F401  (registers the blocklist's admin)
)
from django_ratelimits.admin_overrides import PolicyTierInline, tier_who
from django_ratelimits.admin_search import BoundedSearch
from django_ratelimits.dashboard.urls import dashboard_urls
from django_ratelimits.engine import Algorithm, Ban
from django_ratelimits.models import OffenderDashboard, Policy, instant
from django_ratelimits.offenders import VIEW_PERMISSION
from django_ratelimits.offenders.text import duration
from django_ratelimits.offenders.text import period as _period
from django_ratelimits.policies.labels import MODE_LABELS, MODE_WORDS
from django_ratelimits.policies.spec import KeyKind, Mode, PolicySpec, Recording
from django_ratelimits.rates import Rate
from django_ratelimits.resolved import language_in_pattern

# The sections of the policy form: what the policy is, where and whom it applies to.
_FIELDSETS: list[tuple[Any, dict[str, Any]]] = [
    (
        pgettext_lazy("policy form section", "What"),
        {
            "fields": (
                "name",
                "description",
                "enabled",
                "mode",
                "algorithm",
                "rates",
                "burst",
                "lease",
                "cost",
            )
        },
    ),
    (
        _("Logins"),
        {"fields": ("counts", "reset_on_success")},
    ),
    (pgettext_lazy("policy form section", "Where"), {"fields": ("path", "methods", "priority")}),
    (
        pgettext_lazy("policy form section", "Who"),
        {"fields": ("key", "key_arg", "identity_budget")},
    ),
    (_("Exemptions"), {"fields": ("exempt_staff", "exempt_superusers", "allow_cidrs")}),
    (_("Escalating ban"), {"fields": ("ban_after", "ban_within", "ban_for", "ban_max")}),
    (_("Failure and recording"), {"fields": ("fail_closed", "record_metadata")}),
]


class KeyArgInput(forms.TextInput):
    """The key argument, offering the key functions a policy may name (a datalist):
    other paths are refused on save (:func:`~django_ratelimits.policies.parse.check_key_arg`)."""

    template_name = "django_ratelimits/widgets/key_arg.html"

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        context["widget"]["attrs"]["list"] = f"{context['widget']['attrs']['id']}_functions"
        context["key_functions"] = key_functions.allowed()
        return context


@admin.register(Policy)
class PolicyAdmin(BoundedSearch):
    list_display = (
        "name",
        "enabled",
        "mode_word",
        "algorithm",
        "rates",
        "key",
        "pattern",
        "methods",
        "priority",
        "updated",
    )
    list_filter = ("enabled", "mode", "algorithm", "key", "fail_closed")
    search_fields = ("name", "description", "path")
    readonly_fields = ("preview", "created_at", "updated_at")
    actions = ("enable", "disable", "switch_to_shadow", "switch_to_enforce")
    inlines = (PolicyTierInline,)
    # The offender dashboard: a link among the object tools, its pages under this admin.
    change_list_template = "admin/django_ratelimits/dashboard/policy_change_list.html"

    class Media:
        # The list's columns stay within 1280 px: its filters go below it on narrower screens.
        css = {"all": ("django_ratelimits/admin.css",)}

    def formfield_for_dbfield(
        self, db_field: models.Field, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "key_arg":
            kwargs["widget"] = KeyArgInput(attrs={"class": "vTextField"})
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_urls(self) -> list[URLPattern]:
        return [*dashboard_urls(self.admin_site), *super().get_urls()]

    def save_model(self, request: HttpRequest, obj: Policy, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if (language := language_in_pattern(obj.path)) is not None:
            # Saved all the same: a policy may be meant for one language (W015 says so too).
            params = {"prefix": language.prefix, "fixed": language.fixed or ""}
            if language.fixed:
                text = gettext(
                    "The path pattern starts with the language prefix “%(prefix)s”: it "
                    "limits the page in that language alone. To limit it in every "
                    "language, write “%(fixed)s”."
                )
            else:
                text = gettext(
                    "The path pattern starts with the language prefix “%(prefix)s”: it "
                    "limits the page in that language alone. To limit it in every "
                    "language, write it without the prefix."
                )
            messages.warning(request, text % params)

    @admin.display(description=_("mode"), ordering="mode")
    def mode_word(self, obj: Policy) -> SafeString:
        mode = Mode(obj.mode)
        return format_html(
            '<span class="rl-mode" title="{}">{}</span>', MODE_LABELS[mode], MODE_WORDS[mode]
        )

    @admin.display(description=_("path pattern"), ordering="path")
    def pattern(self, obj: Policy) -> SafeString | str:
        if not obj.path:
            return "-"
        return format_html('<span title="{}">{}</span>', obj.path, obj.path)

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj: Policy) -> SafeString:
        # With USE_TZ = False the time is naive, TIME_ZONE's already (and localtime()
        # refuses it): shown as stored, its offset in the machine-readable attribute.
        at = instant(obj.updated_at)
        shown = timezone.localtime(at) if settings.USE_TZ else obj.updated_at
        return format_html(
            '<time datetime="{}" title="{}">{}</time>',
            at.isoformat(),
            date_format(shown, "DATETIME_FORMAT"),
            date_format(shown, "SHORT_DATE_FORMAT"),
        )

    def get_fieldsets(self, request: HttpRequest, obj: Policy | None = None) -> Any:
        if obj is None:
            return _FIELDSETS
        return [
            (_("Preview"), {"fields": ("preview",)}),
            *_FIELDSETS,
            (_("History"), {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
        ]

    @admin.display(description=_("What this policy does"))
    def preview(self, obj: Policy) -> SafeString | str:
        """The saved policy in words (not the unsaved values of a form with errors)."""
        saved = Policy.objects.filter(pk=obj.pk).first() if obj.pk else None
        if saved is None:
            return "-"
        try:
            spec = saved.to_spec()
        except (ValidationError, ValueError, TypeError):  # a row edited by hand
            return gettext("The saved policy is invalid: fix the fields below and save.")
        return format_html_join(
            "", "<p>{}</p>", ((line,) for line in describe(spec, saved.enabled))
        )

    @admin.action(description=_("Enable the selected policies"), permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
        self._switch(request, queryset, "enabled", True)

    @admin.action(description=_("Disable the selected policies"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
        self._switch(request, queryset, "enabled", False)

    @admin.action(
        description=_("Switch the selected policies to shadow mode"), permissions=["change"]
    )
    def switch_to_shadow(self, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
        self._switch(request, queryset, "mode", Mode.SHADOW.value)

    @admin.action(
        description=_("Switch the selected policies to enforce mode"), permissions=["change"]
    )
    def switch_to_enforce(self, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
        self._switch(request, queryset, "mode", Mode.ENFORCE.value)

    def _switch(
        self, request: HttpRequest, queryset: QuerySet[Policy], field: str, value: object
    ) -> None:
        """Set ``field`` on the policies that differ, log each change, tell the user.

        ``update()`` changes the version stamp, so workers reload.
        """
        changed = list(queryset.exclude(**{field: value}))
        if changed:
            Policy.objects.filter(pk__in=[policy.pk for policy in changed]).update(
                **{field: value, "updated_at": timezone.now()}
            )
            model_field = Policy._meta.get_field(field)
            assert isinstance(model_field, models.Field)
            with translation.override(None):  # stored untranslated, as admin does
                label = capfirst(str(model_field.verbose_name))
            LogEntry.objects.log_actions(
                user_id=cast(int, request.user.pk),  # admin views have a signed-in user
                queryset=changed,
                action_flag=CHANGE,
                change_message=[{"changed": {"fields": [label]}}],
            )
        self.message_user(
            request,
            ngettext("%(count)d policy changed.", "%(count)d policies changed.", len(changed))
            % {"count": len(changed)},
            messages.SUCCESS,
        )


@admin.register(OffenderDashboard)
class OffenderDashboardAdmin(admin.ModelAdmin):
    """*Offenders* in admin's app list, for staff with ``view_offenders``: its one URL
    (the changelist's) redirects to the dashboard, which checks the permission again."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_changelist",
            )
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponseRedirect:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_ratelimits_offenders"))


# --------------------------------------------------------------------------- preview

_ALGORITHMS = {
    # Translators: the algorithms as the policy preview names them in "%(algorithm)s".
    Algorithm.FIXED_WINDOW: _("fixed window"),
    Algorithm.SLIDING_WINDOW: _("sliding window"),
    Algorithm.SLIDING_WINDOW_COUNTER: _("sliding window counter (approximate)"),
    Algorithm.SLIDING_LOG: _("sliding log"),
    Algorithm.TOKEN_BUCKET: _("token bucket"),
    Algorithm.GCRA: _("GCRA"),
    Algorithm.CONCURRENCY: _("concurrency"),
}
_SHOWN_NETWORKS = 3


def describe(spec: PolicySpec, enabled: bool = True) -> list[str]:
    """``spec`` in plain sentences, for the admin preview."""
    sentences = [] if enabled else [gettext("Disabled: this policy is not enforced.")]
    sentences.append(
        # Translators: the policy preview's first sentence, e.g. "10 requests per second and
        # 120 per minute per client IP, sliding window.": %(limits)s, %(who)s and
        # %(algorithm)s are the phrases translated below ("%(count)s requests per
        # %(period)s", "per client IP", "sliding window").
        gettext("%(limits)s %(who)s, %(algorithm)s.")
        % {
            "limits": _limits(spec.algorithm, spec.rates),
            "who": _who(spec),
            "algorithm": _algorithm(spec),
        }
    )
    if spec.shadow:
        sentences.append(
            gettext("Shadow mode: requests over the limit are counted and recorded, never blocked.")
        )
    else:
        sentences.append(
            gettext("Requests over the limit get 429 Too Many Requests with Retry-After.")
        )
    if spec.ban is not None and not spec.shadow:
        sentences.append(_ban(spec.ban))
    sentences += [
        # Translators: %(who)s is "in the group “staff”" or "whose profile.plan is “pro”";
        # %(limits)s is "%(count)s requests per %(period)s" and the rest.
        gettext("Signed-in users %(who)s instead: %(limits)s.")
        % {"who": tier_who(tier), "limits": _limits(spec.algorithm, tier.rates)}
        for tier in spec.tiers
    ]
    sentences.append(_where(spec))
    if spec.failed_logins:
        sentences.append(
            gettext(
                "Counts failed logins only; a login over the limit is refused before its "
                "password is checked."
            )
        )
        if spec.reset_on_success:
            sentences.append(gettext("A successful login clears the counters of its username."))
    exempt = _exemptions(spec)
    if exempt:
        # Translators: %(exempt)s lists "staff users", "superusers" and "requests from
        # %(networks)s", joined with "and".
        sentences.append(gettext("Exempt: %(exempt)s.") % {"exempt": exempt})
    if spec.fail_closed:
        sentences.append(gettext("While Redis is unreachable, requests are denied (fail closed)."))
    else:
        sentences.append(
            gettext("While Redis is unreachable, requests are let through (fail open).")
        )
    if spec.record_metadata == Recording.EVERY:
        sentences.append(
            gettext("The user and path of each hit are recorded for the offender dashboard.")
        )
    elif spec.record_metadata == Recording.DENIALS:
        sentences.append(
            gettext("The user and path of each denial are recorded for the offender dashboard.")
        )
    return sentences


def _limits(algorithm: Algorithm, rates: tuple[Rate, ...]) -> str:
    first, *others = rates
    if algorithm is Algorithm.CONCURRENCY:
        return ngettext(
            "At most %(count)s request in flight at once",
            "At most %(count)s requests in flight at once",
            first.limit,
        ) % {"count": first.limit}
    parts = [
        # Translators: %(period)s is "second", "minute", "5 minutes"...
        ngettext(
            "%(count)s request per %(period)s", "%(count)s requests per %(period)s", first.limit
        )
        % {"count": first.limit, "period": _period(first.period)}
    ]
    parts += [
        # Translators: a policy's second and later rates, after "%(count)s requests per
        # %(period)s", e.g. "120 per minute".
        gettext("%(count)s per %(period)s") % {"count": rate.limit, "period": _period(rate.period)}
        for rate in others
    ]
    # Translators: joins the last two items of a list, as in "a, b and c".
    return str(get_text_list(parts, gettext("and")))


def _who(spec: PolicySpec) -> str:
    phrases = {
        # Translators: whom a policy counts, after its rates in the policy preview:
        # "10 requests per minute per client IP".
        KeyKind.IP: _("per client IP"),
        KeyKind.USER: _("per signed-in user (anonymous requests are not counted)"),
        KeyKind.USER_OR_IP: _("per user, or per client IP when anonymous"),
        KeyKind.IP_AND_USER: _("per client IP and, separately, per signed-in user"),
        KeyKind.HEADER: _("per value of the %(arg)s header (per client IP without it)"),
        KeyKind.CALLABLE: _("per key that %(arg)s returns (nothing counted when it returns None)"),
        KeyKind.USERNAME: _("per username tried"),
        KeyKind.IP_AND_USERNAME: _("per client IP and, separately, per username tried"),
        KeyKind.IP_USERNAME_PAIR: _("per pair of client IP and username tried"),
    }
    return str(phrases[spec.key]) % {"arg": spec.key_arg}


def _algorithm(spec: PolicySpec) -> str:
    name = str(_ALGORITHMS[spec.algorithm])
    if spec.algorithm is Algorithm.CONCURRENCY:
        return gettext("each holding its slot until its response ends, at most %(lease)s") % {
            "lease": _period(spec.rates[0].period)
        }
    if not spec.algorithm.has_burst:
        return name
    if spec.burst is None:
        return gettext("%(algorithm)s with bursts up to the limit") % {"algorithm": name}
    return gettext("%(algorithm)s with bursts of up to %(burst)s") % {
        "algorithm": name,
        "burst": spec.burst,
    }


def _ban(ban: Ban) -> str:
    values = {
        "after": ban.after,
        "within": duration(ban.within),
        "for": duration(ban.duration),
        "max": duration(ban.maximum),
    }
    if ban.maximum == ban.duration:
        return (
            gettext(
                "After %(after)s denials within %(within)s, the identity is blocked for %(for)s."
            )
            % values
        )
    return (
        gettext(
            "After %(after)s denials within %(within)s, the identity is blocked for %(for)s, "
            "doubled on each repeat up to %(max)s (forgotten after %(max)s with no ban)."
        )
        % values
    )


def _where(spec: PolicySpec) -> str:
    methods = str(get_text_list(sorted(spec.methods), gettext("and")))
    if not spec.path:
        if spec.methods:
            return gettext(
                "Applies only where a decorator or DRF throttle names “%(name)s”, "
                "to %(methods)s requests."
            ) % {"name": spec.name, "methods": methods}
        return gettext("Applies only where a decorator or DRF throttle names “%(name)s”.") % {
            "name": spec.name
        }
    if spec.methods:
        return gettext("Applies to %(methods)s requests whose path matches “%(path)s”.") % {
            "methods": methods,
            "path": spec.path,
        }
    return gettext("Applies to requests of every method whose path matches “%(path)s”.") % {
        "path": spec.path
    }


def _exemptions(spec: PolicySpec) -> str:
    exempt = []
    if spec.exempt_staff:
        exempt.append(gettext("staff users"))
    if spec.exempt_superusers:
        exempt.append(gettext("superusers"))
    if spec.allow_cidrs:
        shown = [str(network) for network in spec.allow_cidrs[:_SHOWN_NETWORKS]]
        hidden = len(spec.allow_cidrs) - len(shown)
        if hidden:
            shown.append(
                ngettext("%(count)s more network", "%(count)s more networks", hidden)
                % {"count": hidden}
            )
        networks = str(get_text_list(shown, gettext("and")))
        exempt.append(gettext("requests from %(networks)s") % {"networks": networks})
    return str(get_text_list(exempt, gettext("and")))
