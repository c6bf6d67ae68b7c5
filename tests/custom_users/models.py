"""The user models: a UUID key, an e-mail login without permissions, a text key."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.contrib.auth.models import AbstractBaseUser, AbstractUser, BaseUserManager
from django.db import models


class UUIDUser(AbstractUser):
    """Django's user with a UUID primary key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"  # the models not chosen are left out, as auth.User is


class EmailUserManager(BaseUserManager["EmailUser"]):
    def create_user(self, email: str, password: str | None = None, **extra: Any) -> EmailUser:
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user


class EmailUser(AbstractBaseUser):
    """Signs in by e-mail; no PermissionsMixin (no is_superuser, no groups), no is_staff."""

    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    plan = models.CharField(max_length=20, blank=True)

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    objects = EmailUserManager()

    class Meta:
        swappable = "AUTH_USER_MODEL"


class CharPkUser(AbstractUser):
    """Django's user with a text primary key (an identity provider's subject, say)."""

    id = models.CharField(primary_key=True, max_length=64)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"
