#!/usr/bin/env python3
"""Import cycles between the files of each crate (`src/`, `host/src`, `lab/src`, `python/src`,
`kernels-rs/src`): a file imports another when one of its paths (`use` lines and inline
`crate::a::b`, `super::x`, `self::x` paths) names an item of the other's module. Prints each
cycle found, one per line, and exits 1 if there is one; 0 and "no import cycle" otherwise.

    python3 scripts/import_cycles.py
"""

import os
import re
import sys

ROOTS = ["src", "host/src", "lab/src", "python/src", "kernels-rs/src"]
ROOT_FILES = ("lib.rs", "main.rs")


def modules(root):
    """Module path (tuple of names, () for the crate root) -> file, for every .rs under root."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] == "mod" or (len(parts) == 1 and parts[0] + ".rs" in ROOT_FILES):
                parts = parts[:-1]
            found[tuple(parts)] = path
    return found


PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def references(text, here, known):
    """The modules `text` (the file of module `here`) names through crate/super/self paths,
    `use` groups (`{a, b::c}`) expanded one level."""
    out = set()
    code = re.sub(r"//[^\n]*", "", text)
    for use in re.finditer(r"\buse\s+([^;]+);", code):
        body = use.group(1)
        group = re.match(r"(.*?)::\{(.*)\}$", body.strip(), re.S)
        heads = [body] if not group else [group.group(1) + "::" + g.strip() for g in split_top(group.group(2))]
        for head in heads:
            out |= resolve(head, here, known)
    for m in PATH.finditer(code):
        out |= resolve(m.group(1) + m.group(2), here, known)
    return out


def split_top(text):
    depth, part, parts = 0, "", []
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    return parts + [part]


def resolve(path, here, known):
    names = [n for n in re.split(r"::", path.replace(" ", "").replace("\n", "")) if n]
    if not names:
        return set()
    base = list(here)
    if names[0] == "crate":
        base, names = [], names[1:]
    while names and names[0] in ("super", "self"):
        if names[0] == "super":
            base = base[:-1]
        names = names[1:]
    # The longest prefix that is a module of this crate.
    for cut in range(len(names), -1, -1):
        candidate = tuple(base + [n for n in names[:cut]])
        if candidate in known:
            return {candidate}
    return set()


def cycles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main():
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = 0
    for root in ROOTS:
        known = modules(os.path.join(repo, root))
        graph = {}
        for module, path in known.items():
            text = open(path, encoding="utf-8").read()
            # A file's test module may use its parent: that is not an import between files.
            text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
            targets = references(text, module, known) - {module}
            # A parent naming its own submodules (`mod x;` then `x::y`) is containment, not a cycle;
            # a child naming its parent's items is an import of the parent.
            graph[module] = {t for t in targets if t[: len(module)] != module or len(module) == len(t)}
        for component in cycles(graph):
            bad += 1
            files = sorted(os.path.relpath(known[m], repo) for m in component)
            print(f"{root}: " + " <-> ".join(files))
    if bad:
        sys.exit(1)
    print("no import cycle")


if __name__ == "__main__":
    main()
