#!/usr/bin/env python3
"""Import graph of the crate: files, their `crate::` and `super::` imports,
the strongly connected components (import circles), and the layer rule.

    python3 scripts/layers.py            # summary; exit 1 if a rule breaks
    python3 scripts/layers.py --graph    # every edge
    python3 scripts/layers.py --max-circle N   # fail if a circle has > N files

The layer rule: a file may import only from its own layer or a lower one
(LAYERS below, lowest first). Comments and strings are ignored; `#[cfg(test)]`
modules are counted like the rest (tests live with the code they test)."""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

# Lowest first. A file's layer is the first folder under src/, or the file
# itself for top-level files.
LAYERS = ["base", "sync", "mem", "graph", "observe", "exec", "policy", "core", "api"]
TOP_LEVEL = {"lib": "api", "bench_parts": "api", "engine": "api", "config": "api", "data": "api", "future": "api"}


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel == ["lib"]:
        return ()
    return tuple(rel)


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'b?"(\\.|[^"\\])*"', '""', text)
    return text


def expand(tree):
    """Expand a use tree `a::{b, c::{d, e}}` into paths."""
    tree = tree.strip()
    depth = 0
    for i, ch in enumerate(tree):
        if ch == "{":
            prefix = tree[:i].rstrip(":").strip()
            inner = tree[i + 1 : tree.rindex("}")]
            parts, cur, d = [], "", 0
            for c in inner:
                if c == "," and d == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                d += c == "{"
                d -= c == "}"
                cur += c
            parts.append(cur)
            out = []
            for p in parts:
                if p.strip():
                    for e in expand(p):
                        out.append(prefix + "::" + e if prefix else e)
            return out
    return [re.sub(r"\s+as\s+\w+$", "", tree)]


def resolve(path, here, modules):
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = None
    for n in range(len(segs), -1, -1):
        cand = base + tuple(segs[:n])
        if cand in modules:
            best = cand
            break
    return best


def inline_modules_as_self(text):
    """`super::` inside an inline module (`mod tests { use super::*; }`)
    names the file's own module: rewrite it so."""
    out, i = [], 0
    for m in re.finditer(r"\bmod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        j, depth = m.end(), 1
        while depth and j < len(text):
            depth += (text[j] == "{") - (text[j] == "}")
            j += 1
        out.append(text[i : m.end()])
        out.append(re.sub(r"\bsuper::", "self::", text[m.end() : j]))
        i = j
    out.append(text[i:])
    return "".join(out)


def load():
    modules = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(root, f)
                modules[module_of(p)] = {
                    "path": os.path.relpath(p, os.path.join(SRC, "..")),
                    "is_mod": f in ("mod.rs", "lib.rs"),
                    "text": inline_modules_as_self(strip(open(p).read())),
                }
    edges = {m: set() for m in modules}
    for m, info in modules.items():
        text = info["text"]
        paths = []
        for u in re.finditer(r"\buse\s+([^;]+);", text):
            paths += expand(u.group(1))
        paths += re.findall(r"\b((?:crate|super)(?:::\w+)+)", text)
        for p in paths:
            t = resolve(p, m, modules)
            if t is not None and t != m and t != ():
                edges[m].add(t)
    return modules, edges


def is_ancestor(a, b):
    return len(a) < len(b) and b[: len(a)] == a


def sccs(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in edges:
        if v not in index:
            visit(v)
    return out


def layer(m):
    if not m:
        return "api"
    if len(m) == 1 and m[0] in TOP_LEVEL:
        return TOP_LEVEL[m[0]]
    return m[0] if m[0] in LAYERS else None


def name(m):
    return "::".join(m) or "lib"


def main():
    args = sys.argv[1:]
    modules, edges = load()
    files = [m for m in modules if m != ()]
    comps = sorted(sccs(edges), key=len, reverse=True)
    biggest = comps[0] if comps else []
    print(f"files: {len(modules)}")
    per = {}
    for m in modules:
        per.setdefault(layer(m) or "(none)", []).append(m)
    for lay in LAYERS + ["(none)"]:
        if lay in per:
            print(f"  {lay:8} {len(per[lay]):3} files")
    print(f"largest import circle: {len(biggest)} files")
    for c in comps:
        if len(c) > 1:
            print("  circle:", ", ".join(sorted(name(m) for m in c)))
    bad = []
    for m in files:
        lm = layer(m)
        for t in edges[m]:
            lt = layer(t)
            if lm in LAYERS and lt in LAYERS and LAYERS.index(lt) > LAYERS.index(lm):
                bad.append(f"{name(m)} ({lm}) imports {name(t)} ({lt})")
    unlayered = [name(m) for m in files if layer(m) is None]
    print(f"upward imports: {len(bad)}")
    for b in sorted(bad):
        print("  " + b)
    if "--graph" in args:
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f"{name(m)} -> {name(t)}")
    fail = False
    if "--max-circle" in args:
        limit = int(args[args.index("--max-circle") + 1])
        if len(biggest) > limit:
            print(f"FAIL: an import circle of {len(biggest)} files (limit {limit})")
            fail = True
    if "--strict" in args:
        if bad or unlayered:
            print("FAIL: upward imports or files outside the layers:", unlayered)
            fail = True
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
