#!/usr/bin/env python3
"""Fails when the sibling modules of a module tree depend on each other in a circle.

For each tree (a directory whose modules are checked against each other), the nodes are the
modules its root file declares (`mod x;` in mod.rs, lib.rs or main.rs), each with every file
below it. An edge x -> y is any path from a file of x that names sibling y:
`use super::y::..`, `super::y::f()`, `crate::pool::y::T`, `use super::{y, ..}`, and names the
root re-exports from y (`super::T` where the root says `pub use y::T`). Comments and string
literals are ignored; inline modules (`mod tests { .. }`) move `super` one level down, and
`#[path]` modules belong to the module that declares them.

What it cannot see: a dependency that names no path, such as a method of a type defined
elsewhere (`pool.write()` from a module that never names `write`). Keep those one way by
design; the module doc of each tree states the order.

Usage: scripts/check-module-cycles.py [--graph] [--list] [TREE ...]
  TREE     a directory (crates/engine/src/pool) or a crate's src/; default: TREES below
  --graph  also print every edge with one place that makes it
  --list   print the trees checked by default and exit
Exit 0: no cycle; 1: a cycle (printed with the references that make it); 2: bad usage.
"""

import os
import re
import sys

# The trees checked by default (scripts/test.sh runs this). Add a line to check another.
TREES = [
    "crates/engine/src/pool",
    "crates/slog/src",
    "crates/fardisk/src",
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(
    r"(?P<attrs>(?:#\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(?P<name>" + IDENT + r")\s*(?P<end>[;{])"
)
PATH_ATTR = re.compile(r'#\[\s*path\s*=\s*"(?P<path>[^"]+)"\s*\]')
USE_ITEM = re.compile(r"\buse\s+(?P<tree>[^;]+);")
PATH_EXPR = re.compile(r"\b(?P<path>(?:crate|super|self)(?:\s*::\s*(?:" + IDENT + r"))+)")


def strip_comments_and_strings(src):
    """Blanks comments, string and char literals, keeping line breaks and offsets."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not src[i - 1].isalnum()):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", src[i : j + 1]))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:]):
            m = re.match(r"'(\\.|[^\\'])'", src[i:])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        elif c == "'" and re.match(r"'\\u\{[0-9a-fA-F]+\}'", src[i:]):
            m = re.match(r"'\\u\{[0-9a-fA-F]+\}'", src[i:])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(text):
    """`a::{b, c::{d, self}}` -> [[a, b], [a, c, d], [a, c]] (renames and globs dropped)."""
    text = re.sub(r"\s+", "", text)
    text = re.sub(r"^::", "", text)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        if cur:
            parts.append(cur)
        return parts

    def expand(prefix, s):
        if not s:
            return []
        brace = s.find("{")
        if brace >= 0 and s.endswith("}"):
            head = [p for p in s[:brace].split("::") if p]
            out = []
            for part in split_top(s[brace + 1 : -1]):
                out.extend(expand(prefix + head, part))
            return out
        s = s.split("as", 1)[0] if re.search(r"(?<=[A-Za-z0-9_])as(?=[A-Za-z_])", s) else s
        segs = [p for p in s.split("::") if p]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        if segs and segs[-1] == "*":
            segs = segs[:-1]
        return [prefix + segs]

    return expand([], text)


def line_of(src, offset):
    return src.count("\n", 0, offset) + 1


class Tree:
    """One module tree: its root file, its sibling modules and the files of each."""

    def __init__(self, spec):
        self.spec = spec.rstrip("/")
        directory = os.path.join(ROOT, self.spec)
        if not os.path.isdir(directory):
            raise SystemExit(f"check-module-cycles: {spec} is not a directory")
        self.crate_src, self.base = self.find_crate(directory)
        self.root_file = self.find_root_file(directory)
        # file -> module path (relative to the crate root), for every file of the tree
        self.module_of = {}
        # sibling name -> files of that sibling
        self.files = {}
        self.walk(self.root_file, self.base, None)
        self.siblings = set(self.files)
        self.reexports = self.read_reexports(self.root_file, self.base)
        crate_root = self.find_root_file(self.crate_src)
        self.crate_reexports = self.read_reexports(crate_root, []) if self.base else {}

    @staticmethod
    def find_crate(directory):
        d = directory
        while d != ROOT and not os.path.exists(os.path.join(os.path.dirname(d), "Cargo.toml")):
            d = os.path.dirname(d)
        if d == ROOT:
            raise SystemExit(f"check-module-cycles: no crate around {directory}")
        rel = os.path.relpath(directory, d)
        return d, [] if rel == "." else rel.split(os.sep)

    @staticmethod
    def find_root_file(directory):
        for name in ("mod.rs", "lib.rs", "main.rs"):
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
        sibling_file = directory + ".rs"
        if os.path.exists(sibling_file):
            return sibling_file
        raise SystemExit(f"check-module-cycles: no mod.rs, lib.rs or main.rs in {directory}")

    def walk(self, path, module, sibling):
        """Records `path` as module `module` of `sibling` and follows its `mod x;` lines."""
        self.module_of[path] = module
        if sibling is not None:
            self.files.setdefault(sibling, []).append(path)
        with open(path, encoding="utf-8") as f:
            src = strip_comments_and_strings(f.read())
        here = os.path.dirname(path)
        owns_dir = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")
        for m in MOD_DECL.finditer(src):
            if m.group("end") != ";":
                continue
            name = m.group("name")
            attr = PATH_ATTR.search(m.group("attrs") or "")
            if attr:
                child = os.path.normpath(os.path.join(here, attr.group("path")))
            else:
                sub = here if owns_dir else os.path.join(here, os.path.basename(path)[:-3])
                child = os.path.join(sub, name + ".rs")
                if not os.path.exists(child):
                    child = os.path.join(sub, name, "mod.rs")
            if not os.path.exists(child):
                continue  # a module generated or gated away; nothing to read
            self.walk(child, module + [name], name if sibling is None else sibling)

    def read_reexports(self, path, module):
        """Names a root file takes from its children (`pub use x::T;`): T -> x."""
        with open(path, encoding="utf-8") as f:
            src = strip_comments_and_strings(f.read())
        names = {}
        for m in USE_ITEM.finditer(src):
            for segs in expand_use_tree(m.group("tree")):
                if len(segs) >= 2 and segs[0] not in ("crate", "super", "self", "std"):
                    names[segs[-1]] = module + segs[:-1]
                elif len(segs) >= 3 and segs[0] in ("crate", "self"):
                    rest = segs[1:]
                    base = [] if segs[0] == "crate" else module
                    names[segs[-1]] = base + rest[:-1]
        return names

    def target(self, absolute):
        """The sibling an absolute module path names, if any."""
        n = len(self.base)
        if absolute[:n] == self.base and len(absolute) > n:
            head = absolute[n]
            if head in self.siblings:
                return head
            via = self.reexports.get(head)
            if via and via[:n] == self.base and len(via) > n and via[n] in self.siblings:
                return via[n]
        if self.base and absolute and absolute[0] in self.crate_reexports:
            via = self.crate_reexports[absolute[0]] + [absolute[0]]
            if via != absolute:
                return self.target(via)
        return None


def resolve(segs, module):
    """Absolute path of `segs` written in module `module` (None if not crate-relative)."""
    if not segs or segs[0] not in ("crate", "super", "self"):
        return None
    cur = list(module)
    i = 0
    if segs[0] == "crate":
        cur, i = [], 1
    while i < len(segs) and segs[i] in ("super", "self"):
        if segs[i] == "super":
            if not cur:
                return None
            cur.pop()
        i += 1
    return cur + segs[i:]


def inline_module_at(src):
    """For each offset, the inline modules (`mod x { .. }`) around it, as a lookup function."""
    spans = []
    for m in MOD_DECL.finditer(src):
        if m.group("end") != "{":
            continue
        depth, j = 1, m.end()
        while j < len(src) and depth:
            depth += src[j] == "{"
            depth -= src[j] == "}"
            j += 1
        spans.append((m.end(), j, m.group("name")))

    def around(offset):
        return [name for start, end, name in spans if start <= offset < end]

    return around


def edges_of(tree):
    """(from, to) -> first place (file:line  path) that makes the edge."""
    edges = {}
    for sibling, files in sorted(tree.files.items()):
        for path in files:
            with open(path, encoding="utf-8") as f:
                src = strip_comments_and_strings(f.read())
            around = inline_module_at(src)
            found = []
            use_spans = []
            for m in USE_ITEM.finditer(src):
                use_spans.append((m.start(), m.end()))
                for segs in expand_use_tree(m.group("tree")):
                    found.append((m.start(), segs))
            for m in PATH_EXPR.finditer(src):
                if any(a <= m.start() < b for a, b in use_spans):
                    continue
                found.append((m.start(), re.sub(r"\s+", "", m.group("path")).split("::")))
            for offset, segs in found:
                absolute = resolve(segs, tree.module_of[path] + around(offset))
                to = tree.target(absolute) if absolute else None
                if to and to != sibling and (sibling, to) not in edges:
                    rel = os.path.relpath(path, ROOT)
                    edges[(sibling, to)] = f"{rel}:{line_of(src, offset)}  {'::'.join(segs)}"
    return edges


def find_cycles(nodes, edges):
    """Strongly connected components with more than one module (Tarjan), each as a cycle."""
    succ = {n: sorted(b for (a, b) in edges if a == n) for n in nodes}
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    cycles = []
    for comp in comps:
        # One concrete circle through the component: breadth-first from its first module back.
        start, members = comp[0], set(comp)
        prev, frontier, seen = {}, [start], {start}
        back = None
        while frontier and back is None:
            nxt = []
            for v in frontier:
                for w in succ[v]:
                    if w == start:
                        back = v
                        break
                    if w in members and w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
                if back is not None:
                    break
            frontier = nxt
        path = [start]
        v = back
        while v != start:
            path.insert(1, v)
            v = prev[v]
        cycles.append((comp, path + [start]))
    return cycles


def check(spec, show_graph):
    tree = Tree(spec)
    edges = edges_of(tree)
    if show_graph:
        print(f"{spec}: {len(tree.siblings)} modules, {len(edges)} edges")
        for (a, b), where in sorted(edges.items()):
            print(f"  {a} -> {b}    ({where})")
    cycles = find_cycles(tree.siblings, edges)
    for comp, path in cycles:
        print(f"module cycle in {spec}: {' -> '.join(path)}")
        for a, b in zip(path, path[1:]):
            print(f"  {a} -> {b}: {edges[(a, b)]}")
        if len(comp) > len(path) - 1:
            # More than one circle: every edge among these modules, so all can be cut at once.
            print(f"  the modules {', '.join(comp)} all reach each other; their edges:")
            for (a, b), where in sorted(edges.items()):
                if a in comp and b in comp and (a, b) not in zip(path, path[1:]):
                    print(f"    {a} -> {b}: {where}")
    if not cycles:
        print(f"{spec}: no module cycle among {len(tree.siblings)} modules")
    return not cycles


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = {a for a in argv if a.startswith("--")}
    unknown = flags - {"--graph", "--list"}
    if unknown:
        print(f"check-module-cycles: unknown option {sorted(unknown)[0]}; see --help in the file header", file=sys.stderr)
        return 2
    if "--list" in flags:
        print("\n".join(TREES))
        return 0
    ok = True
    for spec in args or TREES:
        ok &= check(spec, "--graph" in flags)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
