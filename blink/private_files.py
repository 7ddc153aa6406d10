"""Private on-disk state: every SQLite file Blink writes is readable by its owner only.

The files hold prompts, generated text, cached responses and API-key hashes, so another local
user must not read them: the database file is created ``0600`` before SQLite opens it, and a
directory Blink creates for it is ``0700``. SQLite creates a database's ``-wal``, ``-shm`` and
``-journal`` companions with the database file's own mode, so fixing the main file's mode
before the first ``sqlite3.connect`` covers them; companions left by an older Blink are
tightened too. A directory that already exists (the user's choice) keeps its mode.

No ``umask`` change: the umask is process-wide, and changing it around one file would race
with every other thread creating files.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def private_dir(path: str | Path) -> Path:
    """Create ``path`` and any missing parents as ``0700`` directories; existing ones are left alone."""
    target = Path(path).expanduser()
    missing: list[Path] = []
    probe = target
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:  # another process made it between the check and here
            continue
        os.chmod(directory, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
    return target


def private_sqlite_path(path: str | Path) -> Path:
    """Prepare a SQLite database path: its folder (``0700`` if created here), the file ``0600``.

    Call before ``sqlite3.connect``; returns the expanded path to connect to.
    """
    target = Path(path).expanduser()
    private_dir(target.parent)
    os.close(os.open(target, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE))
    for file in (target, *(target.with_name(target.name + s) for s in _SQLITE_COMPANIONS)):
        _tighten(file)  # files written 0644 by an older Blink
    return target


def _tighten(file: Path) -> None:
    try:
        os.chmod(file, PRIVATE_FILE_MODE)
    except FileNotFoundError:
        pass
    except PermissionError:  # another user's file: opening it is that user's decision, not ours
        pass
