"""The folder store: a store on a path (or a `file://` URL), and every part only it uses.

Why a package of its own: `soma.store.Store(path)` opens `FolderStore` (here, `store`), the
reference every backend's store mirrors; its parts are its own and sit beside it: no-link
opens (`safe_open`, with the kernel's one-call walk in `openat2`), the fan-out folders a
reader holds open (`held_folders`), name files (`name_files`), the group commit and the
durability passes (`commit`), small blobs it wrote kept in memory (`write_cache`), what a
failing folder retries (`retries`) and a read-only store refused (`unwritable`).
`FolderStore` is imported on first use (PEP 562), so that checking a folder
(`safe_open.check_folder`, what `import soma.store` needs) opens no store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from soma.lazy import lazy

__getattr__, __dir__ = lazy(__name__, {"FolderStore": "soma.store.folder.store"}, globals())

if TYPE_CHECKING:  # for type checkers and editors: the same name, imported eagerly
    from soma.store.folder.store import FolderStore as FolderStore
