"""A small Django project for tests/test_django.py: one app (shop), the database from
$ASYNQPY_DJANGO_DB (a postgresql:// URL, else a SQLite file path), Redis from $ASYNQPY_REDIS_URL."""

import os
from urllib.parse import unquote, urlsplit

SECRET_KEY = "test-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "asynqpy.contrib.django", "shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = os.environ.get("ASYNQPY_DJANGO_DB", "/tmp/asynqpy-djangoproj.sqlite3")
if _db.startswith(("postgres://", "postgresql://")):
    _u = urlsplit(_db)
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": _u.path.lstrip("/"), "USER": unquote(_u.username or ""),
        "PASSWORD": unquote(_u.password or ""), "HOST": _u.hostname or "", "PORT": str(_u.port or ""),
    }}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _db,
                             "TEST": {"NAME": _db + ".test"}}}

ASYNQPY = {
    "redis": os.environ.get("ASYNQPY_REDIS_URL", "memory://djangoproj"),
    "default_queue": "shop",
    "concurrency": 2,
}
