"""``python -m bench [--quick] [module ...]``: run every benchmark module in ``bench/`` (or the
named ones) and print their tables. A benchmark module defines ``main(argv)``."""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def modules() -> list[str]:
    here = os.path.dirname(__file__)
    return sorted(m.name for m in pkgutil.iter_modules([here]) if not m.name.startswith("_"))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = [a for a in argv if a.startswith("-")]
    names = [a for a in argv if not a.startswith("-")] or modules()
    failed = 0
    for name in names:
        print(f"\n=== bench.{name} ===", flush=True)
        try:
            importlib.import_module(f"bench.{name}").main(flags)
        except Exception:  # one broken benchmark must not hide the others
            failed += 1
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
