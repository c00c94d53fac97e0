"""The signing module at the path it had before ``core/`` was grouped into subpackages (issue 44),
for code written against it: docs/security.md documented ``load_keys`` and ``trust_gate`` for
library use here. New code imports :mod:`asynqpy.core.security.signing`; nothing in the package
imports this module."""

from __future__ import annotations

from .security.signing import *  # noqa: F403
from .security.signing import load_keys as load_keys
from .security.signing import trust_gate as trust_gate
