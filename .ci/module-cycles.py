#!/usr/bin/env python3
"""Import-direction check for a crate's modules (issue 16).

Builds, for the crate root and for every folder module (a directory of `.rs` files:
`store/`, `dispatch/parse/`, … at any depth), the graph "child A names child B" over that
module's children (the files and folders inside it, beside `lib.rs` / `mod.rs`). A path
counts when it is written outside comments, string literals and `#[cfg(test)]` code and
reaches a sibling: `crate::b`, `crate::{b, c::d}`, `super::…` chains (climbing through
inline `mod x { … }` blocks too), `self::super::…`, `$crate::b` in macros, aliases of the
crate (`use crate as root;`, `extern crate self as name;`) or of a module (`use
crate::dispatch;` then `dispatch::parse::…`), and items the parent re-exports (`crate::Store`
where lib.rs has `pub use store::Store`; `super::PostgresStore` where store/mod.rs has
`pub use postgres::PostgresStore`; any `use`, `pub(crate) use`, `self::`, `*` glob form).
The parent file itself (`lib.rs`, `mod.rs`) is not a node. Modules that exist only in tests
(`#[cfg(test)] mod tests;`, or a file that starts with `#![cfg(test)]`) are left out.

A glob of a module from inside it (`use crate::*;` or `use super::*;` in a top-level
module, `use super::*;` in a folder's child) hides which sibling a bare name comes from, so
it is an error outside tests: name the items.

Prints the top-level modules in layers (each above everything it imports), then every
cycle inside a folder module (each strongly connected component of more than one child,
with the edges inside it and where each edge is written). Exits 1 on any cycle or root
glob. --allow lists the modules (`canonical`, `dispatch::parse`, `crate` for the root)
that are one concept and may have cycles among their children (default: canonical).

    python3 .ci/module-cycles.py idem-runtime/src
    python3 .ci/module-cycles.py idem-runtime/src --graph   # every edge with its sites
    python3 .ci/module-cycles.py idem-runtime/src --allow canonical,store
    python3 .ci/module-cycles.py --self-test                 # the checker on made-up crates
"""

import bisect
import os
import re
import sys

DEFAULT_ALLOW = "canonical"


# --- Lexing -----------------------------------------------------------------------------

RAW_STRING = re.compile(r'[bc]?r(#*)"')
CHAR_LITERAL = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'")


def blank(text):
    """text with everything but newlines turned into spaces (offsets and lines kept)."""
    return re.sub(r"[^\n]", " ", text)


def is_word(ch):
    """Whether ch can be part of an identifier."""
    return ch.isalnum() or ch == "_"


def strip_comments_and_strings(text):
    """Blanks comments, string literals (plain, byte, C, and their raw `r#"…"#` forms) and
    char/byte literals, keeping newlines and offsets."""
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
            out.append(blank(text[i:j]))
            i = j
        elif c in "bcr" and (i == 0 or not is_word(text[i - 1])) and RAW_STRING.match(text, i):
            # r"…", br"…", cr"…" with any number of #: no escapes inside.
            m = RAW_STRING.match(text, i)
            close = '"' + m.group(1)
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            # "…", and b"…" / c"…" (the prefix letter was copied as code).
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\x7f', '\u{..}') or a lifetime/label ('a): blank only literals.
            m = CHAR_LITERAL.match(text, i)
            if m:
                out.append(" " * len(m.group(0)))
                i = m.end()
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
        elif ch == stack[-1]:
            stack.pop()
        j += 1
    return j


def skip_space(text, i):
    """Index of the first non-whitespace character at or after i."""
    while i < len(text) and text[i].isspace():
        i += 1
    return i


# --- #[cfg(test)] -----------------------------------------------------------------------

OUTER_CFG = re.compile(r"#\s*\[\s*cfg\s*\(")
INNER_ATTR = re.compile(r"#\s*!\s*\[")
OUTER_ATTR = re.compile(r"#\s*\[")
WORD = re.compile(r"([A-Za-z_]\w*)\s*")
VISIBILITY = re.compile(r"pub\b\s*(?:\([^)]*\)\s*)?")


def cfg_is_test_only(predicate):
    """Whether a cfg predicate (the text inside `cfg(…)`, strings blanked) holds only in
    test builds: `test`, `all(…, test, …)` (test anywhere in it), `any(…)` whose every
    branch is test-only. `not(test)` and `any(test, x)` are not."""
    tokens = re.findall(r"[A-Za-z_]\w*|[(),=]", predicate)

    def parse(i):
        # -> ((name, [args] or None), next index)
        name, i = tokens[i], i + 1
        if i < len(tokens) and tokens[i] == "(":
            args, i = [], i + 1
            while tokens[i] != ")":
                arg, i = parse(i)
                args.append(arg)
                if tokens[i] == ",":
                    i += 1
            return (name, args), i + 1
        if i < len(tokens) and tokens[i] == "=":
            i += 1  # the value was a string literal, blanked
        return (name, None), i

    def test_only(node):
        name, args = node
        if args is None:
            return name == "test"
        if name == "all":
            return any(test_only(a) for a in args)
        if name == "any":
            return bool(args) and all(test_only(a) for a in args)
        return False

    try:
        node, end = parse(0)
    except IndexError:
        return False
    return end == len(tokens) and test_only(node)


def starts_test_only(text):
    """Whether a file (comments blanked) opens with an inner `#![cfg(test)]` (or any
    test-only cfg) among its leading inner attributes: the whole file is test code."""
    i = skip_space(text, 0)
    while True:
        m = INNER_ATTR.match(text, i)
        if not m:
            return False
        end = matching(text, m.end() - 1)
        body = text[m.end() : end - 1]
        cfg = re.match(r"\s*cfg\s*\(", body)
        if cfg and cfg_is_test_only(body[cfg.end() : body.rfind(")")]):
            return True
        i = skip_space(text, end)


ITEM_MODIFIERS = {"default", "async", "unsafe", "extern", "safe"}
BLOCK_ITEMS = {"mod", "fn", "impl", "struct", "enum", "union", "trait", "macro"}
SEMICOLON_ITEMS = {"use", "const", "static", "type", "crate"}


def item_kind(text, i):
    """The item keyword (`fn`, `struct`, `use`, `macro` for `m! {…}`, …) when text at i starts an
    item (after `pub`/`pub(…)` and modifiers like `async`, `unsafe`, `const fn`), else None
    (a struct field, enum variant, match arm, statement or expression)."""
    m = VISIBILITY.match(text, i)
    j = m.end() if m else i
    saw_extern = False
    while True:
        w = WORD.match(text, j)
        if not w:
            return None
        word, after = w.group(1), w.end()
        nxt = WORD.match(text, after)
        if word in ITEM_MODIFIERS and nxt:
            saw_extern |= word == "extern"
            j = after
            continue
        if word == "const" and nxt and nxt.group(1) in ("fn", "unsafe", "async", "extern"):
            j = after
            continue
        break
    follows = text[after : after + 1]
    if follows == "!" and text[after + 1 : after + 2] != "=":
        return "macro"  # macro_rules! m { … }, or an item-position invocation m! { … }
    if word in BLOCK_ITEMS and (is_word(follows) or (word == "impl" and follows == "<")):
        return word
    if word == "use" or (word in ("const", "static", "type") and is_word(follows)):
        return word
    if word == "crate" and saw_extern:
        return word
    return None


def item_end(text, i, kind):
    """End of the item of the given kind starting at i: its `;`, or its `{…}` body for
    block items (fn, impl, struct, mod, …); `const`/`static`/`use` run to their `;`."""
    j = i
    while j < len(text):
        ch = text[j]
        if ch in "([":
            j = matching(text, j)
            continue
        if ch == "{":
            if kind in SEMICOLON_ITEMS:
                j = matching(text, j)
                continue
            return matching(text, j)
        if ch == ";":
            return j + 1
        if ch in ")]}":
            return j  # the block around the item ends first
        j += 1
    return j


def element_end(text, i):
    """End of the non-item an attribute at i applies to: a struct field, enum variant,
    match arm (`pat => expr,` or `pat => { … }`), statement or block — up to the next `,`
    or `;` at bracket depth 0, never past the bracket that encloses it."""
    if text[i : i + 1] == "{":
        return matching(text, i)
    j = i
    while j < len(text):
        ch = text[j]
        if ch in "([{":
            j = matching(text, j)
            continue
        if ch in ")]}":
            return j
        if ch in ",;":
            return j + 1
        if text.startswith("=>", j):
            k = skip_space(text, j + 2)
            if text[k : k + 1] == "{":
                end = matching(text, k)
                after = skip_space(text, end)
                return after + 1 if text[after : after + 1] == "," else end
            j += 2
            continue
        j += 1
    return j


def strip_cfg_test(text):
    """Blanks what every test-only `#[cfg(…)]` applies to: the whole item when the
    attribute (after other attributes) precedes an item, else only the field, variant, arm
    or statement it is on."""
    pos = 0
    while True:
        m = OUTER_CFG.search(text, pos)
        if not m:
            return text
        attr_end = matching(text, text.index("[", m.start()))
        pred_end = matching(text, m.end() - 1)
        if not cfg_is_test_only(text[m.end() : pred_end - 1]):
            pos = m.end()
            continue
        target = skip_space(text, attr_end)
        while (more := OUTER_ATTR.match(text, target)) is not None:
            target = skip_space(text, matching(text, more.end() - 1))
        kind = item_kind(text, target)
        end = item_end(text, target, kind) if kind else element_end(text, target)
        text = text[: m.start()] + blank(text[m.start() : end]) + text[end:]
        pos = end


def clean_source(path):
    """A file's text with comments, strings and test-only code blanked."""
    with open(path, encoding="utf-8") as f:
        return strip_cfg_test(strip_comments_and_strings(f.read()))


# --- Paths ------------------------------------------------------------------------------

IDENT = re.compile(r"\$?[A-Za-z_]\w*|r#[A-Za-z_]\w*")
ALIAS = re.compile(r"\s+as\s+([A-Za-z_]\w*)")
PATH_HEAD = re.compile(r"(?<![\w$])(\$?[A-Za-z_]\w*)\s*::")
USE_DECL = re.compile(r"(?<![\w$])use\s+")
INLINE_MOD = re.compile(r"(?<![\w$])mod\s+([A-Za-z_]\w*)\s*\{")
DECLARED_MOD = re.compile(r"(?<![\w$])mod\s+([A-Za-z_]\w*)\s*;")
EXTERN_SELF = re.compile(r"(?<![\w$])extern\s+crate\s+self\s+as\s+([A-Za-z_]\w*)\s*;")


def parse_tree(text, i):
    """The leaves of the path or use tree at text[i:] as ([segments, …], alias) pairs
    (`crate::{a::B, c::{self, D as E}}` gives crate/a/B, crate/c/self, crate/c/D as E; a
    glob ends in `*`), and the index after it."""
    i = skip_space(text, i)
    if text.startswith("{", i):
        end = matching(text, i)
        leaves, j = [], i + 1
        while j < end - 1:
            j = skip_space(text, j)
            if text[j] in ",}":
                j += 1
                continue
            sub, after = parse_tree(text, j)
            leaves += sub
            j = max(after, j + 1)
        return leaves, end
    if text.startswith("*", i):
        return [(["*"], None)], i + 1
    m = IDENT.match(text, i)
    if not m:
        return [], i
    name = m.group(0).removeprefix("r#")
    k = skip_space(text, m.end())
    if text.startswith("::", k):
        sub, end = parse_tree(text, k + 2)
        if sub:
            return [([name] + segs, alias) for segs, alias in sub], end
        return [([name], None)], k + 2  # `Type::<T>` and the like: the path ends here
    alias = ALIAS.match(text, m.end())
    if alias:
        return [([name], alias.group(1))], alias.end()
    return [([name], None)], m.end()


def resolve(segments, here, aliases):
    """The absolute module path (a list, [] for the crate root) that `segments`, written in
    module `here`, names -- or None when it does not start inside the crate (`std::…`, a
    local name). `aliases` maps names bound to crate paths (`root` -> [])."""
    head, rest = segments[0], segments[1:]
    if head in ("crate", "$crate"):
        base = []
    elif head == "self":
        base = list(here)
    elif head == "super":
        if not here:
            return None
        base = list(here[:-1])
    elif head in aliases:
        base = list(aliases[head])
    else:
        return None
    while rest and rest[0] in ("super", "self"):
        if rest[0] == "super":
            if not base:
                return None
            base = base[:-1]
        rest = rest[1:]
    return base + [s for s in rest if s != "self"]


def inline_mods(text):
    """(open brace, end, name) of every inline `mod name { … }` in text."""
    return [(m.end() - 1, matching(text, m.end() - 1), m.group(1)) for m in INLINE_MOD.finditer(text)]


def module_at(modpath, mods, pos):
    """The module path at offset pos of a file: its file module plus the inline mods around pos."""
    return list(modpath) + [name for start, end, name in mods if start < pos < end]


def use_leaves(text, depth0_only=False):
    """(offset, leaves) for every `use` declaration in text (optionally only those at
    brace depth 0, i.e. of the file's own module)."""
    found = []
    for m in USE_DECL.finditer(text):
        if depth0_only and text.count("{", 0, m.start()) != text.count("}", 0, m.start()):
            continue
        leaves, _ = parse_tree(text, m.end())
        found.append((m.start(), leaves))
    return found


def file_bindings(text, modpath, mods, aliases, modules):
    """{name: absolute path} for the names this file's `use` declarations bind to crate
    modules (`use crate as root;` binds root -> []; `use crate::dispatch;` binds dispatch),
    so `root::b::…` and `dispatch::parse::…` count as paths. `modules`: the crate's module
    paths (tuples); a name bound to an item (`Turn`) reaches nothing its `use` does not."""
    bound = dict(aliases)
    for _ in range(3):  # a binding may go through one made earlier
        for pos, leaves in use_leaves(text):
            here = module_at(modpath, mods, pos)
            for segments, alias in leaves:
                target = resolve(segments, here, bound)
                if target is None or tuple(target) not in modules:
                    continue
                name = alias or [s for s in segments if s != "self"][-1]
                if name not in ("_", "crate", "$crate", "self", "super"):
                    bound[name] = target
    return bound


def starts_path(text, pos, head, crate_names):
    """Whether the name at pos begins a path rather than continuing one (`x::self::`):
    only a name of the crate itself (`extern crate self as mine;`) may follow a leading
    `::` (`::mine::b`)."""
    k = pos - 1
    while k >= 0 and text[k].isspace():
        k -= 1
    if k < 1 or text[k - 1 : k + 1] != "::":
        return True
    k -= 2
    while k >= 0 and text[k].isspace():
        k -= 1
    # `a::`, `<T as Tr>::` continue a path; `-> ::mine`, `=> ::mine`, `(::mine` start one.
    continues = k >= 0 and (is_word(text[k]) or (text[k] == ">" and text[k - 1 : k] not in ("-", "=")))
    return head in crate_names and not continues


def path_refs(text, modpath, mods, aliases, crate_names=()):
    """(absolute path, offset) for every path in text that starts inside the crate:
    at `crate`, `$crate`, `self`, `super` or a name in `aliases`."""
    refs, last_end = [], 0
    for m in PATH_HEAD.finditer(text):
        head = m.group(1)
        if m.start() < last_end or not (head in ("crate", "$crate", "self", "super") or head in aliases):
            continue
        if not starts_path(text, m.start(), head, crate_names):
            continue
        leaves, last_end = parse_tree(text, m.start())
        here = module_at(modpath, mods, m.start())
        for segments, _ in leaves:
            target = resolve(segments, here, aliases)
            if target is not None:
                refs.append((target, m.start()))
    return refs


def public_names(text):
    """Names a module file defines or re-exports visibly outside it (what `pub use m::*`
    brings in): `pub`/`pub(crate)` items and `pub use` leaves."""
    names = set(re.findall(
        r"(?<![\w$])pub\b\s*(?:\([^)]*\)\s*)?(?:(?:const|async|unsafe|extern|default)\s+)*"
        r"(?:fn|struct|enum|union|trait|type|const|static|mod)\s+([A-Za-z_]\w*)", text))
    for m in re.finditer(r"(?<![\w$])pub\b\s*(?:\([^)]*\)\s*)?use\s+", text):
        for segments, alias in parse_tree(text, m.end())[0]:
            names.add(alias or [s for s in segments if s != "self"][-1])
    return names


# --- The crate's modules ----------------------------------------------------------------


def module_path(src, path):
    """['store', 'sqlite'] for src/store/sqlite/mod.rs or src/store/sqlite.rs."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] == "mod" or rel in (["lib"], ["main"]):
        rel = rel[:-1]
    return rel


def folder_children(src):
    """{folder path: set of child names}: the root and every directory holding `.rs`
    files, each with its `.rs` files (not lib.rs/main.rs/mod.rs) and its directories."""
    levels = {}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        rel = os.path.relpath(root, src)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        has_rs = [f for f in files if f.endswith(".rs")]
        if not has_rs and parts:
            continue
        skip = {"mod.rs"} | ({"lib.rs", "main.rs"} if not parts else set())
        children = {f[:-3] for f in has_rs if f not in skip}
        levels[parts] = children
        for k in range(len(parts)):
            levels.setdefault(parts[:k], set()).add(parts[k])
    return levels


def module_file(src, modpath):
    """The file that holds module modpath (lib.rs for the root), or None."""
    if not modpath:
        for name in ("lib.rs", "main.rs"):
            if os.path.exists(os.path.join(src, name)):
                return os.path.join(src, name)
        return None
    for candidate in (os.path.join(src, *modpath, "mod.rs"), os.path.join(src, *modpath) + ".rs"):
        if os.path.exists(candidate):
            return candidate
    return None


class Crate:
    """The modules of a crate's src/: folder levels with their children, test-only
    modules, and what each parent file re-exports."""

    def __init__(self, src):
        self.src = src
        self.levels = folder_children(src)
        self.raw = {}  # path -> text with comments and strings blanked
        self.clean = {}  # path -> that, with test-only code blanked too
        for root, _, files in os.walk(src):
            for f in files:
                if f.endswith(".rs"):
                    path = os.path.join(root, f)
                    with open(path, encoding="utf-8") as fh:
                        self.raw[path] = strip_comments_and_strings(fh.read())
                    self.clean[path] = strip_cfg_test(self.raw[path])
        self.test_only = self.find_test_only()
        self.levels = {
            level: {c for c in children if level + (c,) not in self.test_only}
            for level, children in self.levels.items()
            if not self.under_test(level)
        }
        self.modules = {()} | {tuple(module_path(src, p)) for p in self.raw} | set(self.levels)
        self.aliases = {m.group(1): [] for text in self.clean.values() for m in EXTERN_SELF.finditer(text)}
        self.reexports, self.globs, self.public = {}, {}, {}
        for level in self.levels:
            self.reexports[level], self.globs[level] = self.parent_reexports(level)

    def find_test_only(self):
        """Modules that exist only in tests: declared `#[cfg(test)] mod x;` by their
        parent, or whose file starts with `#![cfg(test)]`."""
        found = set()
        for level, children in self.levels.items():
            parent = module_file(self.src, level)
            if parent is None:
                continue
            declared = set(DECLARED_MOD.findall(self.raw[parent]))
            kept = set(DECLARED_MOD.findall(self.clean[parent]))
            found |= {level + (name,) for name in declared - kept if name in children}
        for path, text in self.raw.items():
            if starts_test_only(text):
                found.add(tuple(module_path(self.src, path)))
        return found

    def under_test(self, modpath):
        """Whether modpath is a test-only module or inside one."""
        return any(tuple(modpath[: k + 1]) in self.test_only for k in range(len(modpath)))

    def parent_reexports(self, level):
        """({name: child}, [glob children]) for the `use` declarations of a folder's own
        file (lib.rs, mod.rs) that bring a child's item into the folder: `pub use b::X`,
        `use b::Y`, `pub(crate) use self::b::Z as W`, `pub use crate::…::b::V`, `pub use b::*`."""
        parent = module_file(self.src, level)
        children = self.levels[level]
        if parent is None:
            return {}, []
        pending, globs = {}, []
        for _, leaves in use_leaves(self.clean[parent], depth0_only=True):
            for segments, alias in leaves:
                absolute = resolve(segments, level, self.aliases)
                if absolute is None:  # a path relative to the folder: `b::X`, `b::{self}`
                    absolute = list(level) + [s for s in segments if s != "self"]
                if absolute[: len(level)] != list(level) or len(absolute) <= len(level):
                    continue
                first = absolute[len(level)]
                if absolute[-1] == "*":
                    if len(absolute) == len(level) + 2 and first in children:
                        globs.append(first)
                    continue
                name = alias or absolute[-1]
                if name not in children and name != first:
                    pending[name] = first
        found = {}
        for name, first in pending.items():
            for _ in range(len(pending) + 1):  # `use b::X; pub use X as Y;`
                if first in children or first not in pending:
                    break
                first = pending[first]
            if first in children:
                found[name] = first
        return found, globs

    def child_named(self, level, name):
        """The child of folder `level` that `level::name` reaches: the child itself, a
        re-export of the folder's file, or an item of a child it glob-re-exports."""
        if name in self.levels[level]:
            return name
        if name in self.reexports[level]:
            return self.reexports[level][name]
        for child in self.globs[level]:
            path = module_file(self.src, level + (child,))
            if path and path not in self.public:
                self.public[path] = public_names(self.clean[path])
            if path and name in self.public[path]:
                return child
        return None

    def files(self):
        """(path, module path) of every source file outside test-only modules, sorted."""
        for path in sorted(self.clean):
            modpath = module_path(self.src, path)
            if not self.under_test(modpath):
                yield path, modpath


def collect_edges(crate):
    """({folder: {(child, child): [site, …]}}, [root glob problems]) over every file."""
    edges = {level: {} for level in crate.levels}
    globs = []
    for path, modpath in crate.files():
        text = crate.clean[path]
        mods = inline_mods(text)
        newlines = [i for i, ch in enumerate(text) if ch == "\n"]
        aliases = file_bindings(text, modpath, mods, crate.aliases, crate.modules)
        for target, pos in path_refs(text, modpath, mods, aliases, crate.aliases):
            here = module_at(modpath, mods, pos)
            site = f"{os.path.relpath(path, crate.src)}:{bisect.bisect_left(newlines, pos) + 1}"
            for k in range(len(here)):
                level, child = tuple(here[:k]), here[k]
                if level not in crate.levels or child not in crate.levels[level]:
                    break
                if tuple(target[:k]) != level or len(target) <= k:
                    break
                if target[k] == "*":
                    globs.append((level, site))
                    break
                other = crate.child_named(level, target[k])
                if other and other != child:
                    sites = edges[level].setdefault((child, other), [])
                    if site not in sites:
                        sites.append(site)
    return edges, globs


# --- Graphs -----------------------------------------------------------------------------


def strongly_connected(nodes, edges):
    """Tarjan's strongly connected components of the graph, in reverse topological order."""
    graph = {v: set() for v in nodes}
    for a, b in edges:
        graph[a].add(b)
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps, graph


def layers(comps, graph):
    """{layer: [component names]}: a component's layer is one above the highest it imports."""
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    layer = {}
    for i, c in enumerate(comps):  # Tarjan emits components in reverse topological order
        deps = {comp_of[w] for v in c for w in graph[v]} - {i}
        layer[i] = 1 + max((layer[d] for d in deps), default=-1)
    by_layer = {}
    for i, c in enumerate(comps):
        by_layer.setdefault(layer[i], []).append("+".join(sorted(c)))
    return by_layer


def cycles_in(nodes, edges):
    """The components of more than one module."""
    return [c for c in strongly_connected(nodes, edges)[0] if len(c) > 1]


def show_sites(sites, most=3):
    """`a.rs:1, b.rs:2 …`"""
    return ", ".join(sites[:most]) + (" …" if len(sites) > most else "")


def name_of(level):
    """`dispatch::parse` for ('dispatch', 'parse'), `crate` for the root."""
    return "::".join(level) or "crate"


def print_cycle(comp, edges, indent="  "):
    """The edges inside one cycle with where each is written."""
    for (a, b), sites in sorted(edges.items()):
        if a in comp and b in comp:
            print(f"{indent}{a} -> {b}: {show_sites(sites)}")


# --- Self-test --------------------------------------------------------------------------


def self_test():
    """The checker finds the cycles it should and only those (run by .ci/run first)."""
    import subprocess
    import tempfile

    def check(files, args):
        with tempfile.TemporaryDirectory() as src:
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
                with open(os.path.join(src, name), "w") as f:
                    f.write(text)
            run = subprocess.run([sys.executable, __file__, src, *args], capture_output=True, text=True)
            return run.returncode, run.stdout + run.stderr

    lib = "pub mod a; pub mod b; pub mod c;\npub use b::Bee;\n"
    uses_a = {"b.rs": "use crate::a::Y;", "c.rs": ""}  # so an edge a -> b is a cycle
    # (name, files, expected exit[, text expected in the output[, extra arguments]])
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
        # 1. cycles between the children of a folder module, at any depth
        ("a cycle inside a folder, through its re-export", {
            "a/mod.rs": "mod d; mod e;\npub use e::Eel;", "a/d.rs": "use super::Eel;",
            "a/e.rs": "use crate::a::d::X;", "b.rs": "", "c.rs": ""}, 1, "import cycle inside a: d, e"),
        ("a cycle inside a nested folder", {
            "a/mod.rs": "mod p; mod q;", "a/p/mod.rs": "mod x; mod y;", "a/p/x.rs": "use super::y::Y;",
            "a/p/y.rs": "fn f() { crate::a::p::x::g(); }", "a/q.rs": "", "b.rs": "", "c.rs": ""}, 1,
         "import cycle inside a::p: x, y"),
        ("a folder's child importing a sibling's child", {
            "a/mod.rs": "mod p; mod q;", "a/p/mod.rs": "mod x;", "a/p/x.rs": "use crate::a::q::Q;",
            "a/q.rs": "use super::p::P;", "b.rs": "", "c.rs": ""}, 1, "p -> q: a/p/x.rs:1"),
        ("a cycle inside a folder listed with --allow", {
            "a/mod.rs": "mod d; mod e;", "a/d.rs": "use super::e::E;", "a/e.rs": "use super::d::D;",
            "b.rs": "", "c.rs": ""}, 0, "no cycle inside any", ["--allow", "a"]),
        ("folders in one direction", {
            "a/mod.rs": "mod d; mod e;\npub use d::Dee;", "a/d.rs": "", "a/e.rs": "use super::Dee;",
            "b.rs": "", "c.rs": ""}, 0, "1 folder modules, no cycle inside any"),
        # 2. #[cfg(test)] on less than an item blanks only that
        ("cfg(test) on a struct field", dict(uses_a, **{
            "a.rs": "pub struct S {\n    #[cfg(test)]\n    probe: u32,\n    other: u8,\n}\n"
                    "impl S { fn f() -> crate::b::Bee { todo!() } }"}), 1),
        ("cfg(test) on an enum variant", dict(uses_a, **{
            "a.rs": "pub enum E { #[cfg(test)] T, U }\npub fn g() { crate::b::f(); }"}), 1),
        ("cfg(test) on match arms", dict(uses_a, **{
            "a.rs": "fn f(x: u8) { match x { #[cfg(test)] 0 => { () } #[cfg(test)] 1 => (), _ => () }\n"
                    " crate::b::f(); }"}), 1),
        ("cfg(test) on an item after other attributes", dict(uses_a, **{
            "a.rs": "#[cfg(test)]\n#[derive(Debug)]\npub(crate) struct S { b: crate::b::Bee }\n"
                    "#[cfg(test)] const X: u8 = S { a: crate::b::K }.g(crate::b::h());\n"
                    "#[cfg(test)] pub async unsafe fn g() { crate::b::f() }"}), 0),
        # 3. forms that reach the crate root
        ("use crate::* outside tests", dict(uses_a, **{"a.rs": "use crate::*;\nfn f() -> b::Bee { todo!() }"}),
         1, "glob import"),
        ("use super::* in a top-level module", dict(uses_a, **{"a.rs": "use super::*;\nfn f() -> Bee { todo!() }"}),
         1, "glob import"),
        ("use crate as root", dict(uses_a, **{"a.rs": "use crate as root;\nfn f() -> root::b::Bee { todo!() }"}), 1),
        ("extern crate self as name", dict(uses_a, **{
            "lib.rs": lib + "extern crate self as mine;", "a.rs": "fn f() -> mine::b::Bee { todo!() }"}), 1),
        ("a module bound by use", dict(uses_a, **{"a.rs": "use crate::{c, b};\nfn f() -> b::Bee { todo!() }"}), 1),
        ("lib.rs: use b::Wasp", dict(uses_a, **{"lib.rs": lib + "use b::Wasp;", "a.rs": "fn f(_: crate::Wasp) {}"}), 1),
        ("lib.rs: pub(crate) use b::Moth", dict(uses_a, **{
            "lib.rs": lib + "pub(crate) use b::Moth;", "a.rs": "fn f(_: crate::Moth) {}"}), 1),
        ("lib.rs: pub use self::b::Hornet", dict(uses_a, **{
            "lib.rs": lib + "pub use self::b::{Hornet as Wasp};", "a.rs": "fn f(_: crate::Wasp) {}"}), 1),
        ("lib.rs: pub use b::*", dict(uses_a, **{
            "lib.rs": lib + "pub use b::*;", "a.rs": "fn f(_: crate::Ant) {}", "b.rs": "use crate::a::Y;\npub struct Ant;"}), 1),
        # 4. super:: inside inline modules
        ("super from an inline mod stays in the file", dict(uses_a, **{
            "a.rs": "mod b { pub struct X; }\nmod inner { use super::b::X; }"}), 0),
        ("super::super from an inline mod", dict(uses_a, **{"a.rs": "mod inner { use super::super::b::Bee; }"}), 1),
        # 5. raw byte strings and C strings
        ("raw byte and C strings", dict(uses_a, **{
            "a.rs": "const S: &[u8] = br\"C:\\\";\nconst T: &[u8] = br#\"\\\"#;\nconst U: &CStr = cr\"\\\";\n"
                    "use crate::b::Bee;\nconst V: &str = \"x\";"}), 1),
        ("char escapes", dict(uses_a, **{
            "a.rs": "const Q: [char; 2] = ['\\x41','\"'];\nuse crate::b::Bee;\nconst T: &str = \"x\";"}), 1),
        # 6. test-only code that is not a plain #[cfg(test)] item
        ("cfg(all(feature, test))", dict(uses_a, **{
            "a.rs": "#[cfg(all(feature = \"x\", test))]\nmod tests { use crate::b::Bee; }"}), 0),
        ("cfg(all(feature, not(test))) is real code", dict(uses_a, **{
            "a.rs": "#[cfg(all(feature = \"x\", not(test)))]\nmod real { use crate::b::Bee; }"}), 1),
        ("a file starting with #![cfg(test)]", dict(uses_a, **{
            "a.rs": "mod checks;", "a/checks.rs": "//! Checks.\n#![cfg(test)]\nuse crate::b::Bee;"}), 0),
        ("#[cfg(test)] mod tests; out of line", dict(uses_a, **{
            "a/mod.rs": "#[cfg(test)]\nmod tests;\nmod d;", "a/d.rs": "",
            "a/tests.rs": "use crate::b::Bee;\nuse super::d::D;"}), 0, "1 folder modules, no cycle inside any"),
    ]
    failed = 0
    for name, files, expected, *more in cases:
        text = more[0] if more else ""
        args = more[1] if len(more) > 1 else []
        files = dict({"lib.rs": lib}, **files)
        got, output = check(files, args)
        ok = got == expected and text in output
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {got}, expected {expected}")
        if not ok:
            print("     " + output.replace("\n", "\n     "))
    return 1 if failed else 0


# --- Main -------------------------------------------------------------------------------


def parse_args(args):
    """(src, show_graph, allowed folder paths) from the command line."""
    show_graph = "--graph" in args
    allow = DEFAULT_ALLOW
    if "--allow" in args:
        k = args.index("--allow")
        allow = args[k + 1] if k + 1 < len(args) else ""
        del args[k : k + 2]
    allowed = set()
    for name in filter(None, allow.split(",")):
        name = name.strip()
        allowed.add(() if name == "crate" else tuple(re.split(r"::|/", name)))
    args = [a for a in args if not a.startswith("--")]
    return (args[0] if args else "idem-runtime/src"), show_graph, allowed


def report_top_level(src, tops, edges, allowed):
    """Prints the top-level modules in layers and any cycle between them; True on a cycle."""
    comps, graph = strongly_connected(tops, edges)
    print(f"{src}: {len(tops)} top-level modules, {len(edges)} edges between them")
    for lvl, names in sorted(layers(comps, graph).items()):
        print(f"  layer {lvl}: {', '.join(sorted(names))}")
    cycles = [] if () in allowed else [c for c in comps if len(c) > 1]
    if not cycles:
        print("no import cycle between top-level modules")
    for c in cycles:
        print(f"\nimport cycle between {len(c)} modules: {', '.join(sorted(c))}")
        print_cycle(c, edges)
    return bool(cycles)


def report_folders(levels, edges, allowed):
    """Prints each cycle inside a folder module not in `allowed` (or that there is none);
    True on a cycle."""
    folders = sorted(level for level in levels if level)
    checked = [level for level in folders if level not in allowed]
    nested = [(level, sorted(c)) for level in checked for c in cycles_in(levels[level], edges[level])]
    for level, members in sorted(nested):
        print(f"import cycle inside {name_of(level)}: {', '.join(members)}")
        print_cycle(set(members), edges[level])
    if not nested:
        skipped = [name_of(level) for level in folders if level in allowed]
        note = f" (cycles allowed inside {', '.join(skipped)})" if skipped else ""
        print(f"{len(checked)} folder modules, no cycle inside any{note}")
    return bool(nested)


def report_globs(globs):
    """Prints each glob of a folder taken from inside it; True if there is one."""
    for level, site in globs:
        what = "the crate root" if not level else name_of(level)
        print(f"glob import of {what} from inside it at {site}: name the items (globs are for tests)")
    return bool(globs)


def main():
    """Runs the check (or --help, --self-test); the exit status."""
    args = sys.argv[1:]
    if "--help" in args or "-h" in args:
        print(__doc__.strip())
        return 0
    if "--self-test" in args:
        return self_test()
    src, show_graph, allowed = parse_args(args)
    crate = Crate(src)
    edges, globs = collect_edges(crate)
    if show_graph:
        for level in sorted(edges):
            prefix = name_of(level) + ": " if level else ""
            for (a, b), sites in sorted(edges[level].items()):
                print(f"{prefix}{a} -> {b}: {show_sites(sites, 4)}")
        print()
    failed = report_top_level(src, crate.levels[()], edges[()], allowed)
    failed |= report_folders(crate.levels, edges, allowed)
    failed |= report_globs(globs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
