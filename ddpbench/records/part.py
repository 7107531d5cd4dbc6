"""The base of every record part, apart so that the record's modules can share it."""

from __future__ import annotations

import msgspec


class Part(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every record part: fields by name only, and unknown fields are an error."""
