"""A package's names imported on first use (PEP 562), so that importing the package costs only
what is used: soma.store and soma.round keep torch out of `import soma.store` and
`import soma.round.signing` this way (the torch-free command line: soma.cli)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

# Where a lazy name lives: a module (the name is the module's attribute of the same name), a
# (module, attribute) pair, or (module, None) for the module itself under another name.
Where = str | tuple[str, str | None]


def lazy(
    package: str, names: Mapping[str, Where], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: a name of `names`, or a submodule of
    `package`, imported when first asked for and kept in `namespace` (its globals) after."""

    def __getattr__(name: str) -> Any:
        if name in names:
            where = names[name]
            module, attr = (where, name) if isinstance(where, str) else where
            found = importlib.import_module(module)
            value = found if attr is None else getattr(found, attr)
        elif name.startswith("_"):  # `__wrapped__` and the like, looked for by tools
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
