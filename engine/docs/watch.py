"""Re-index added folders when their files change.

watchdog gives one recursive watch per folder on every platform (inotify, FSEvents,
ReadDirectoryChangesW); QFileSystemWatcher would need one watch per directory and says nothing
about a file changing inside a watched directory. Events are debounced: a folder is rescanned
DEBOUNCE_S after its last event, and a rescan reads only the files whose size/mtime changed.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

DEBOUNCE_S = 2.0


class FolderWatcher:
    """Watches the service's roots; `refresh()` after roots are added or removed."""

    def __init__(self, service, debounce_s: float = DEBOUNCE_S):
        self.service, self.debounce_s = service, debounce_s
        self._observer = None
        self._watches: dict[str, object] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            from watchdog.observers import Observer
        except ImportError as exc:  # the app still indexes on demand
            self.error = f"watchdog unavailable: {exc}"
            log.warning("folders are not watched: %s", self.error)
            return
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()
        self.refresh()

    def refresh(self) -> None:
        """Watch exactly the added folders that exist (a file root is watched through its folder)."""
        if self._observer is None:
            return
        from watchdog.events import FileSystemEventHandler

        watcher = self

        class Handler(FileSystemEventHandler):
            def __init__(self, root: str):
                self.root = root

            def on_any_event(self, event):
                if event.event_type in ("opened", "closed_no_write"):
                    return  # reads, not changes
                watcher._changed(self.root)

        wanted = {}
        for r in self.service.roots():
            folder = r["path"] if os.path.isdir(r["path"]) else os.path.dirname(r["path"])
            if os.path.isdir(folder):
                wanted[r["path"]] = folder
        with self._lock:
            for root in list(self._watches):
                if root not in wanted:
                    self._observer.unschedule(self._watches.pop(root))
            for root, folder in wanted.items():
                if root not in self._watches:
                    try:
                        self._watches[root] = self._observer.schedule(Handler(root), folder,
                                                                      recursive=os.path.isdir(root))
                    except OSError as exc:  # inotify watch limit, a folder that vanished
                        log.warning("cannot watch %s: %s", folder, exc)

    def _changed(self, root: str) -> None:
        with self._lock:
            self._dirty.add(root)
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.debounce_s, self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            roots, self._dirty = sorted(self._dirty), set()
            self._timer = None
        if roots:
            log.info("files changed under %s: re-indexing", ", ".join(roots))
            self.service.rescan(roots)

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
            self._observer = None
