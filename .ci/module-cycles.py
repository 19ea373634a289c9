#!/usr/bin/env python3
"""Import-direction check for a crate's top-level modules (issue 16).

Builds the graph "module A names module B" over the top-level modules of a crate's
`src/` (the files and folders beside `lib.rs`), counting every path that reaches
another top-level module -- `crate::b`, `crate::{b, c::d}`, `super::…` chains that climb
to the crate root, and `$crate::b` in macros -- in code outside comments, string
literals and `#[cfg(test)]` items. `lib.rs` itself (re-exports) is not a node.

Exits 1 and prints every cycle (each strongly connected component of more than one
module, with the edges inside it and where each edge is written) unless the component
is listed with --allow. Prints the layers (each module above everything it imports).

    python3 .ci/module-cycles.py idem-runtime/src
    python3 .ci/module-cycles.py idem-runtime/src --graph   # every edge with its sites
    python3 .ci/module-cycles.py --self-test                 # the checker on made-up crates
"""

import os
import re
import sys


def strip_comments_and_strings(text):
    """Blanks comments, string and char literals (keeping newlines and offsets)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime ('a): blank only literals.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, open_at):
    """Index after the bracket matching the one at open_at."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[text[open_at]]]
    j = open_at + 1
    while j < len(text) and stack:
        ch = text[j]
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        j += 1
    return j


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*(test|all\s*\(\s*test\b[^\]]*)\)\s*\]")


def strip_cfg_test(text):
    """Blanks every item under `#[cfg(test)]` (or `#[cfg(all(test, …))]`)."""
    while True:
        m = CFG_TEST.search(text)
        if not m:
            return text
        j = m.end()
        # The item ends at the first `;` at depth 0 or at the end of its first `{…}` block.
        while j < len(text):
            if text[j] == ";":
                j += 1
                break
            if text[j] in "([":
                j = matching(text, j)
                continue
            if text[j] == "{":
                j = matching(text, j)
                break
            j += 1
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start() : j]) + text[j:]


def module_path(src, path):
    """['store', 'sqlite'] for src/store/sqlite/mod.rs or src/store/sqlite.rs."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return rel


def top_level_refs(text, modpath, tops, reexports):
    """(top module, line) for every path in text that names another top-level module."""
    refs = []

    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    def group_heads(start):
        # Names at depth 1 of the `{…}` group that opens at start.
        end = matching(text, start)
        inner, depth, heads, token = text[start + 1 : end - 1], 0, [], ""
        expect = True
        for ch in inner:
            if ch in "{([":
                depth += 1
            elif ch in "})]":
                depth -= 1
            if depth == 0 and ch == ",":
                expect = True
                continue
            if depth == 0 and expect:
                if ch.isalnum() or ch == "_":
                    token += ch
                    continue
                if token:
                    heads.append(token)
                    token, expect = "", False
        if token and expect:
            heads.append(token)
        return heads

    for m in re.finditer(r"(?<![\w$])(\$?crate\s*::\s*|(?:super\s*::\s*)+)", text):
        head = m.group(1)
        # `super::…` reaches the crate root only when it climbs exactly out of this
        # file's module path; fewer stay inside this top-level module.
        if "super" in head and head.count("super") != len(modpath):
            continue
        after = m.end()
        if text[after : after + 1] == "{":
            names = group_heads(after)
        else:
            nm = re.match(r"[A-Za-z_]\w*", text[after:])
            names = [nm.group(0)] if nm else []
        for name in names:
            target = name if name in tops else reexports.get(name)
            if target:
                refs.append((target, line_of(m.start())))
    return refs


def root_reexports(src, tops):
    """{name: module} for the items lib.rs re-exports (`pub use store::{Store, …}`), so that
    `crate::Store` counts as naming `store`."""
    text = strip_cfg_test(strip_comments_and_strings(open(os.path.join(src, "lib.rs"), encoding="utf-8").read()))
    found = {}
    for m in re.finditer(r"pub\s+use\s+(?:crate\s*::\s*)?(\w+)\s*::([^;]*);", text):
        if m.group(1) not in tops:
            continue
        for name in re.findall(r"\b([A-Za-z_]\w*)\b", m.group(2)):
            if name not in ("self", "as") and name not in tops:
                found.setdefault(name, m.group(1))
    return found


def self_test():
    """The checker finds the cycles it should and only those (run by .ci/run first)."""
    import subprocess
    import tempfile

    def check(files):
        with tempfile.TemporaryDirectory() as src:
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
                open(os.path.join(src, name), "w").write(text)
            run = subprocess.run([sys.executable, __file__, src], capture_output=True, text=True)
            return run.returncode

    lib = "pub mod a; pub mod b; pub mod c;\npub use b::Bee;\n"
    cases = [
        ("one direction", {"a.rs": "use crate::b::Bee;", "b.rs": "use crate::c::X;", "c.rs": ""}, 0),
        ("a use cycle", {"a.rs": "use crate::b::Bee;", "b.rs": "fn f() { crate::a::g(); }", "c.rs": ""}, 1),
        ("a grouped import", {"a.rs": "use crate::{c::X, b};", "b.rs": "use crate::{a::Y};", "c.rs": ""}, 1),
        ("through a root re-export", {"a.rs": "fn f(_: crate::Bee) {}", "b.rs": "use crate::a::Y;", "c.rs": ""}, 1),
        ("super from a folder", {"a/mod.rs": "mod d;", "a/d.rs": "use super::super::b::Bee;", "b.rs": "use crate::a::Y;", "c.rs": ""}, 1),
        ("super within a folder", {"a/mod.rs": "mod d;", "a/d.rs": "use super::Y;", "b.rs": "use crate::a::Y;", "c.rs": ""}, 0),
        ("comments, strings, cfg(test)", {
            "a.rs": "// crate::b::Bee\n/* crate::b */\nconst S: &str = \"crate::b::Bee\";\n"
                    "#[cfg(test)]\nmod tests { use crate::b::Bee; }\n",
            "b.rs": "use crate::a::Y;", "c.rs": ""}, 0),
        ("macros", {"a.rs": "macro_rules! m { () => { $crate::b::Bee } }", "b.rs": "use crate::a::Y;", "c.rs": ""}, 1),
    ]
    failed = 0
    for name, files, expected in cases:
        files = dict(files, **{"lib.rs": lib})
        got = check(files)
        ok = got == expected
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {got}, expected {expected}")
    return 1 if failed else 0


def main():
    args = sys.argv[1:]
    if "--self-test" in args:
        return self_test()
    show_graph = "--graph" in args
    allow = []
    if "--allow" in args:
        k = args.index("--allow")
        allow = [set(args[k + 1].split(","))]
        del args[k : k + 2]
    args = [a for a in args if not a.startswith("--")]
    src = args[0] if args else "idem-runtime/src"

    tops = set()
    for entry in os.listdir(src):
        if entry.endswith(".rs") and entry != "lib.rs":
            tops.add(entry[:-3])
        elif os.path.isdir(os.path.join(src, entry)):
            tops.add(entry)

    reexports = root_reexports(src, tops)
    edges = {}  # (a, b) -> [site, …]
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            modpath = module_path(src, path)
            if not modpath:
                continue  # lib.rs: the crate's re-exports
            me = modpath[0]
            text = strip_cfg_test(strip_comments_and_strings(open(path, encoding="utf-8").read()))
            for other, line in top_level_refs(text, modpath, tops, reexports):
                if other != me:
                    edges.setdefault((me, other), []).append(f"{os.path.relpath(path, src)}:{line}")

    graph = {t: set() for t in tops}
    for a, b in edges:
        graph[a].add(b)

    # Tarjan's strongly connected components.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(tops):
        if v not in index:
            visit(v)

    if show_graph:
        for (a, b), sites in sorted(edges.items()):
            print(f"{a} -> {b}: {', '.join(sites[:4])}{' …' if len(sites) > 4 else ''}")
        print()

    cycles = [c for c in comps if len(c) > 1 and c not in allow]
    # Layers: a module's layer is one above the highest layer it imports (cycles collapsed).
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    layer = {}
    for i, c in enumerate(comps):  # Tarjan emits components in reverse topological order
        deps = {comp_of[w] for v in c for w in graph[v]} - {i}
        layer[i] = 1 + max((layer[d] for d in deps), default=-1)
    by_layer = {}
    for i, c in enumerate(comps):
        by_layer.setdefault(layer[i], []).append("+".join(sorted(c)))
    print(f"{src}: {len(tops)} top-level modules, {len(edges)} edges between them")
    for lvl in sorted(by_layer):
        print(f"  layer {lvl}: {', '.join(sorted(by_layer[lvl]))}")
    if not cycles:
        print("no import cycle between top-level modules")
        return 0
    for c in cycles:
        print(f"\nimport cycle between {len(c)} modules: {', '.join(sorted(c))}")
        for (a, b), sites in sorted(edges.items()):
            if a in c and b in c:
                print(f"  {a} -> {b}: {', '.join(sites[:3])}{' …' if len(sites) > 3 else ''}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
