#!/usr/bin/env python3
"""Counts the public items of the flashrs crate a user sees (default features), from rustdoc's
JSON: every item reachable from the crate root through public modules, re-exports and inherent
impls (trait impls and fields not counted), by kind and by module.

    RUSTC_BOOTSTRAP=1 cargo rustdoc -p flashrs --release --lib -- -Z unstable-options --output-format json
    python3 scripts/public_surface.py target/doc/flashrs.json

With `--features lab` in the first command it counts what the project's tools see.
"""

import collections
import json
import sys


def main(path):
    doc = json.load(open(path))
    index = doc["index"]
    seen, kinds, modules = set(), collections.Counter(), collections.Counter()

    def visit(item_id, module):
        item = index.get(str(item_id))
        if item_id in seen or item is None or item.get("visibility") not in ("public", "default", None):
            return
        seen.add(item_id)
        kind, inner = next(iter(item["inner"].items()))
        kinds[kind] += 1
        modules[module] += 1
        if kind == "module":
            for child in inner["items"]:
                visit(child, item.get("name") or module)
        elif kind in ("struct", "enum", "trait", "union"):
            for impl_id in inner.get("impls", []):
                impl = index.get(str(impl_id), {}).get("inner", {}).get("impl")
                if impl and impl.get("trait") is None and not impl.get("synthetic") and not impl.get("blanket_impl"):
                    for child in impl["items"]:
                        visit(child, module)
            for variant in inner.get("variants", []):
                visit(variant, module)
        elif kind == "use" and inner.get("id") is not None:
            visit(inner["id"], module)

    visit(doc["root"], "flashrs")
    print(f"{sum(kinds.values())} public items")
    print("by kind:  ", ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    print("by module:", ", ".join(f"{m} {n}" for m, n in modules.most_common()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/doc/flashrs.json")
