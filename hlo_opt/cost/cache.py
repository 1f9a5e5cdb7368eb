"""The on-disk cache of measured costs.

One JSON file per (name, device kind, jax version) under `$HLO_OPT_CACHE_DIR` or
`~/.cache/hlo_opt`. Its header repeats what the file is for; a file whose header does not
match, or that does not parse, is ignored with a warning and rebuilt. Writes merge with
what is on disk under an exclusive lock and land by rename, so several processes can
share a cache without losing or tearing entries. Never pickle; never fatal: if the
directory cannot be written, the cache lives on in memory and says so once.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:        # not POSIX: rename is still atomic; merging is best effort
    fcntl = None

logger = logging.getLogger("hlo_opt")

FORMAT = 1


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    return Path(explicit or os.environ.get("HLO_OPT_CACHE_DIR")
                or Path.home() / ".cache" / "hlo_opt")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")[:40] or "x"


class Cache:
    """A string-keyed map of JSON values, persisted as described above."""

    def __init__(self, name: str, header: dict, directory: str | os.PathLike | None = None):
        self.header = {"format": FORMAT, "name": name, **header}
        tag = hashlib.sha256(json.dumps(self.header, sort_keys=True).encode()).hexdigest()[:8]
        label = "-".join(_slug(str(header.get(k, ""))) for k in ("device", "jax"))
        self.path = cache_dir(directory) / f"{_slug(name)}-{label}-{tag}.json"
        self.entries: dict[str, object] = self._read(warn=True)
        self._dirty: dict[str, object] = {}
        self._write_failed = False

    def get(self, key: str, default=None):
        return self.entries.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, key: str, value) -> None:
        self.entries[key] = self._dirty[key] = value

    def _read(self, warn: bool) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            if warn:
                logger.warning("hlo_opt: cache %s is unreadable (%s); rebuilding it",
                               self.path, err)
            return {}
        if not isinstance(data, dict) or data.get("header") != self.header or \
                not isinstance(data.get("entries"), dict):
            if warn:
                logger.warning("hlo_opt: cache %s was written for something else "
                               "(header %r); rebuilding it", self.path,
                               data.get("header") if isinstance(data, dict) else None)
            return {}
        return data["entries"]

    def flush(self) -> None:
        """Merge this process's new entries into the file."""
        if not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked():
                merged = {**self._read(warn=False), **self._dirty}
                write_json(self.path, {"header": self.header, "entries": merged},
                           indent=0, sort_keys=True)
        except OSError as err:
            if not self._write_failed:
                logger.warning("hlo_opt: cannot write cache %s (%s); keeping it in "
                               "memory", self.path, err)
            self._write_failed = True
            return
        self.entries = {**merged, **self.entries}
        self._dirty.clear()

    @contextlib.contextmanager
    def _locked(self):
        if fcntl is None:
            yield
            return
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def write_json(path: str | os.PathLike, data, **dump) -> None:
    """`data` as JSON at `path`, never torn: written to a temp file beside it, synced,
    and renamed over it (a reader sees the old file or the new, whole)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, **dump)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
