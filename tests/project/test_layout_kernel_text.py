"""One reader of the --kernel text: kernels/given.py splits it (NAME, PATH, TREE@REF, the options
after the commas) and says what it names; every other module asks it (a Given, or a KernelText
for a text a record kept: its public and pinned forms, its paths), and only the kernel loaders
ask a Given its kind. Read with ast, nothing imported.

What a second reader looks like, each named by file and line:

    splits at commas, then at = or @     one function splitting a string at "," and a piece at
                                         "=" or "@" (or testing `"@" in` it)
    matches an option by its key         "drivers=", "series=", ... compared, searched, split at
                                         or in a regular expression
    splits TREE@REF by a pattern         a regular expression with a group on each side of an @
    asks a Given its kind                `.kind` compared with "toml", "git", "tree" or "image"
"""
import ast
import pathlib

from conftest import ROOT

# the one module that reads the text, and the loaders that own the kinds it reads into
READER = "kernels/given.py"
LOADERS = {READER, "kernels/named.py", "kernels/derived.py", "kernels/prebuilt.py"}
TOPS = ("krig", "rigs", "kernels", "analysis", "workflows", "reproducers", "bench")

OPTION_KEYS = frozenset(f"{k}=" for k in ("config", "modules", "like", "series", "drivers", "drivers-scope"))
GIVEN_KINDS = frozenset(("toml", "git", "tree", "image"))
SPLITS = frozenset(("split", "rsplit", "partition", "rpartition"))
MATCHES = SPLITS | {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "removeprefix",
                    "removesuffix", "replace"}
REGEX = frozenset(("compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer"))


def _strings(node: ast.AST) -> list[str]:
    """The string constants a node is, or a tuple of them holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _method(node: ast.AST) -> tuple[str, list[str]] | None:
    """(method, its first argument's strings) of a call `x.method("...")`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        return node.func.attr, _strings(node.args[0])
    return None


def _regex(node: ast.AST) -> list[str]:
    """The pattern of a call re.compile("..."), re.match("...", ...), ..."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REGEX
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args):
        return _strings(node.args[0])
    return []


def _scopes(tree: ast.Module):
    """Each function's own nodes (nested functions apart), and the module's outside any function."""
    def own(root):
        todo = list(ast.iter_child_nodes(root))
        while todo:
            n = todo.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            yield n
            todo.extend(ast.iter_child_nodes(n))
    yield list(own(tree))
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield list(own(n))


def _splits_at_commas_then_at_eq_or_at(nodes: list) -> list[int]:
    commas, pieces = [], False
    for n in nodes:
        m = _method(n)
        if m and m[0] in SPLITS and "," in m[1]:
            commas.append(n.lineno)
        elif m and m[0] in SPLITS and {"=", "@"} & set(m[1]):
            pieces = True
        elif isinstance(n, ast.Compare) and "@" in _strings(n.left) and isinstance(n.ops[0], (ast.In, ast.NotIn)):
            pieces = True
    return commas if pieces else []


def _option_key_matches(nodes: list) -> list[int]:
    out = []
    for n in nodes:
        m = _method(n)
        said = set(m[1]) if m and m[0] in MATCHES else set()
        if isinstance(n, ast.Compare) and isinstance(n.ops[0], (ast.In, ast.NotIn, ast.Eq, ast.NotEq)):
            said |= {s for side in (n.left, *n.comparators) for s in _strings(side)}
        if said & OPTION_KEYS or any(k in p for p in _regex(n) for k in OPTION_KEYS):
            out.append(n.lineno)
    return out


def _tree_at_ref_pattern(nodes: list) -> list[int]:
    return [n.lineno for n in nodes if any(")@(" in p for p in _regex(n))]


def _kind_asked(nodes: list) -> list[int]:
    out = []
    for n in nodes:
        if not isinstance(n, ast.Compare) or not isinstance(n.ops[0], (ast.In, ast.NotIn, ast.Eq, ast.NotEq)):
            continue
        sides = (n.left, *n.comparators)
        if any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides) and \
                GIVEN_KINDS & {v for s in sides for v in _strings(s)}:
            out.append(n.lineno)
    return out


def kernel_text_reads(rel: str, source: str) -> list[str]:
    """'FILE line N: what' for each way `source` (the file `rel`) reads a --kernel text itself."""
    tree = ast.parse(source, rel)
    checks = []
    if rel != READER:
        checks += [("splits at commas, then at = or @ (kernels/given.py kernel_text)",
                    _splits_at_commas_then_at_eq_or_at),
                   ("matches a --kernel option by its key (kernels/given.py parse: Given.opts)", _option_key_matches),
                   ("splits TREE@REF by a pattern (kernels/given.py kernel_text)", _tree_at_ref_pattern)]
    if rel not in LOADERS:
        checks.append(("asks a Given its kind (a loader's to know: kernels/catalog.py)", _kind_asked))
    found = {(line, what) for nodes in _scopes(tree) for what, check in checks for line in check(nodes)}
    return [f"{rel} line {line}: {what}" for line, what in sorted(found)]


def second_readers(root: pathlib.Path = ROOT) -> list[str]:
    """Every place of the tree at root (the checkout, or a copy a test breaks) that reads the
    --kernel text besides kernels/given.py."""
    out = []
    for top in TOPS:
        for p in sorted((root / top).rglob("*.py")):
            if "bin" not in p.parts and "__pycache__" not in p.parts:
                out += kernel_text_reads(str(p.relative_to(root)), p.read_text())
    return out


def test_the_kernel_text_is_read_in_one_module():
    bad = second_readers()
    assert not bad, "the --kernel text read outside kernels/given.py (ask a Given or a KernelText):\n" + "\n".join(bad)


# Second readers the check names, one of each signature: a split at commas (a path's parts, a
# bundle's paths), a Given's kind asked, an option's key matched, TREE@REF split by a pattern.
SECOND_READERS = [
    ("krig/results.py", '''
def split_kernel_arg(arg: str) -> tuple:
    head, *opts = arg.split(",")
    tree, at, ref = head.rpartition("@") if "@" in head and "/" not in head.rpartition("@")[2] else (head, "", "")
    return tree, at, ref, opts
''', "splits at commas"),
    ("workflows/bundle.py", '''
def local_paths(k):
    head, *opts = k.arg.split(",")
    return [head.rpartition("@")[0] if "@" in head else head] + [o.partition("=")[2] for o in opts]
''', "splits at commas"),
    ("workflows/validate.py", '''
def _check_base(g, base):
    if g.kind in ("tree", "image"):
        raise UsageError(f"--base {base}: a series needs a base krig can build")
''', "asks a Given its kind"),
    ("kernels/catalog.py", '''
def krig_builds(g):
    return g.kind == "git" or "series" in g.opts
''', "asks a Given its kind"),
    ("workflows/reply.py", '''
def drivers_of(cmd):
    return [w for w in cmd if w.startswith("drivers=") or ",drivers=" in w]
''', "matches a --kernel option by its key"),
    ("workflows/kcidb.py", '''
import re
SERIES = re.compile(r",series=([^,]+)")
''', "matches a --kernel option by its key"),
    ("workflows/bisect.py", '''
import re
def tree_of(head):
    m = re.match(r"^(.+)@([^@]*)$", head)
    return m.group(1) if m else None
''', "splits TREE@REF by a pattern"),
]


def test_the_check_names_each_second_reader():
    for rel, source, what in SECOND_READERS:
        found = kernel_text_reads(rel, source)
        assert found and all(f.startswith(f"{rel} line ") for f in found) and any(what in f for f in found), \
            (rel, found)
    # kernels/given.py itself, and a loader asking its Given's kind, are not second readers
    assert kernel_text_reads(READER, SECOND_READERS[0][1]) == []
    assert kernel_text_reads("kernels/derived.py", SECOND_READERS[3][1]) == []
    # nor a rig's kind, a message naming an option, or a comma-separated list of numbers
    innocent = ('ok = rig.kind == "ipmi"\nraise E(f"drivers={v}: no such rig")\n'
                'sizes = [int(s) for s in a.sizes.split(",")]\n')
    assert kernel_text_reads("workflows/run.py", innocent) == []
