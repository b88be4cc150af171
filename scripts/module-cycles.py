#!/usr/bin/env python3
"""Import circles among the library's top-level modules (src/<module>.rs or src/<module>/).

Reads every `crate::<module>` a module's code names (doc comments, `#[cfg(test)] mod tests` and
`tests.rs` files left out: a test may reach anywhere) and prints each circle of modules that
name one another, or "no import circle". Exits 1 when there is one.

    python3 scripts/module-cycles.py          # from the repository's root
    python3 scripts/module-cycles.py --edges  # every module's imports too
"""
import collections
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def module_of(path):
    parts = os.path.relpath(path, SRC).split(os.sep)
    if len(parts) == 1:
        name = parts[0][:-3]
        return None if name == "lib" else name
    return parts[0]


def imports():
    edges = collections.defaultdict(set)
    for root, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(root, name)
            module = module_of(path)
            if module is None:
                continue
            text = open(path, encoding="utf-8").read()
            cut = re.search(r"#\[cfg\((?:all\()?test\b[^\n]*\]\nmod tests", text)
            if cut:
                text = text[: cut.start()]
            code = "\n".join(l for l in text.splitlines() if not l.strip().startswith("//"))
            for target in re.findall(r"crate::([a-z_]+)", code):
                if target != module:
                    edges[module].add(target)
    return edges


def circles(edges):
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                found.append(sorted(component))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def main():
    edges = imports()
    if "--edges" in sys.argv:
        for module in sorted(edges):
            print(f"{module} -> {', '.join(sorted(edges[module]))}")
    found = circles(edges)
    for component in found:
        print("import circle:", " ".join(component))
    if not found:
        print("no import circle")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
