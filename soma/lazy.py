"""A package's names imported on first use (PEP 562), so that importing the package costs only
what is used: soma.store and soma.round keep torch out of `import soma.store` and
`import soma.round.signing` this way (the torch-free command line: soma.cli). And a module
imported on its first attribute use (`OnUse`): how the store's modules import torch only when
a tensor is encoded or decoded, with no function-level import in each method that meets one."""

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


class OnUse:
    """A module imported the first time one of its attributes is asked for, which then
    takes this stand-in's place in the importing module's globals (so later uses cost what a
    plain `import` costs): how the store keeps torch, and the tensor-file module that needs
    it, out of every path that never meets a tensor (opening a store, a JSON record, a name,
    a claim), without a function-level import in each method that does.

    Written at a module's top as `torch = OnUse("torch", globals())`, beside the eager
    `import torch` under `TYPE_CHECKING` that type checkers and editors read instead."""

    def __init__(self, module: str, namespace: dict[str, Any], name: str | None = None) -> None:
        self._module = module
        self._namespace = namespace
        self._name = name or module.rpartition(".")[2]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # `__wrapped__` and the like, looked for by tools
            raise AttributeError(attr)
        found = importlib.import_module(self._module)
        if self._namespace.get(self._name) is self:
            self._namespace[self._name] = found
        return getattr(found, attr)

    def __repr__(self) -> str:
        return f"<{self._module}, imported on first use>"
