"""What a store call raises instead of a driver exception.

    Exception
    ├── fairgate.core.errors.StoreUnavailable   the database could not answer
    │                                           (refused, timed out, locked too long,
    │                                           schema missing); each caller decides
    │                                           what it means (503 for requests)
    └── StoreConflict                           a uniqueness or reference rule refused
                                                the write (a name taken, a row gone)

Nothing else leaves ``fairgate.store``: SQLAlchemy, aiosqlite and asyncpg errors
are translated at the transaction boundary (:meth:`Store.read`, :meth:`Store.write`).
Messages never hold the URL, a password or a secret.
"""

from __future__ import annotations

from fairgate.core.errors import StoreUnavailable

__all__ = ["StoreConflict", "StoreUnavailable"]


class StoreConflict(Exception):
    """A write broke a uniqueness or foreign-key constraint; nothing was written."""
