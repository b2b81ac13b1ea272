"""What a kernel tree's own build files say about its modules and options, read as
scripts/kconfig/streamline_config.pl (`make localmodconfig`) reads them.

    modules(tree)   {module name: [(CONFIG_X, directory)]} from every Makefile and Kbuild's (arch/x86's
                    and none of another arch's)
                    `obj-$(CONFIG_X) += name.o` (joined continuation lines; `-` in a name is `_`,
                    as in /proc/modules); a module an object of several options maps to each
    kconfig(tree)   {CONFIG_X: Symbol} from the Kconfig files, walked from the top one along
                    `source` (SRCARCH=x86): the symbol's type, whether it has a prompt (a user
                    can set it), the file it is defined in, and what it depends on: the `if`
                    blocks and menus around it and its own `depends on` lines

Nothing here runs the tree's code: the files are read as text.
"""
import dataclasses
import os
import pathlib
import re

SRCARCH = "x86"
_OBJ_RE = re.compile(r"obj-\$[({](CONFIG_[A-Za-z0-9_]+)[)}]\s*[+:]?=\s*(.*)")
_ENTRY = ("config", "menuconfig")
_TYPES = ("bool", "tristate", "int", "hex", "string", "def_bool", "def_tristate")
_BLOCK_WORDS = ("config", "menuconfig", "choice", "endchoice", "comment", "menu", "endmenu", "if", "endif",
                "source", "osource", "rsource", "orsource", "mainmenu")
_SKIP_DIRS = {"tools", "Documentation", "scripts", "samples", ".git", "usr"}


def _joined(text: str):
    """Lines with backslash continuations joined, comments cut."""
    line = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            line += raw[:-1] + " "
            continue
        yield (line + raw).split("#", 1)[0]
        line = ""
    if line:
        yield line.split("#", 1)[0]


def modules(tree: pathlib.Path) -> dict:
    """{module: [(CONFIG_X, directory relative to tree)]}, in the order the Makefiles say it."""
    out: dict = {}
    tree = pathlib.Path(tree)
    for d, dirs, files in os.walk(tree):
        rel = os.path.relpath(d, tree)
        dirs[:] = sorted(x for x in dirs if not (rel == "." and x in _SKIP_DIRS) and
                         not (rel == "arch" and x != SRCARCH))
        for f in sorted(files):
            if f not in ("Makefile", "Kbuild"):
                continue
            try:
                text = (pathlib.Path(d) / f).read_text(errors="replace")
            except OSError:
                continue
            for line in _joined(text):
                m = _OBJ_RE.search(line)
                if not m:
                    continue
                for obj in m.group(2).split():
                    if obj.endswith(".o"):
                        name = obj[:-2].replace("-", "_")
                        if "$" in name or "/" in name:
                            continue
                        pair = (m.group(1), rel)
                        if pair not in out.setdefault(name, []):
                            out[name].append(pair)
    return out


@dataclasses.dataclass
class Symbol:
    name: str
    type: str | None = None
    prompt: bool = False
    where: str = ""                 # the Kconfig file that defines it (the first with a prompt)
    depends: list = dataclasses.field(default_factory=list)    # expressions, all of which must hold
    in_choice: bool = False


def atoms(expr: str) -> list:
    """The symbols an expression needs set, when it is a conjunction: `A && (B && C)` -> [A, B, C];
    a part with `||`, `!` or a comparison needs no one symbol and gives none."""
    out = []
    for part in _split_and(expr):
        part = part.strip()
        while part.startswith("(") and part.endswith(")") and _balanced(part[1:-1]):
            part = part[1:-1].strip()
        if "&&" in part and part != expr.strip():
            out += atoms(part)
        elif re.fullmatch(r"[A-Za-z0-9_]+", part) and part not in ("y", "m", "n"):
            out.append(part)
    return out


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def _split_and(expr: str) -> list:
    parts, depth, cur, i = [], 0, "", 0
    while i < len(expr):
        c = expr[i]
        depth += (c == "(") - (c == ")")
        if depth == 0 and expr.startswith("&&", i):
            parts.append(cur)
            cur, i = "", i + 2
            continue
        cur += c
        i += 1
    return parts + [cur]


class _Walk:
    """One pass over the Kconfig files from the top, `source` followed where it stands."""

    def __init__(self, tree: pathlib.Path):
        self.tree = tree
        self.symbols: dict = {}
        self.seen: set = set()

    def file(self, rel: str, conds: list, choice: bool) -> None:
        rel = rel.replace("$(SRCARCH)", SRCARCH).replace("$SRCARCH", SRCARCH)
        path = self.tree / rel
        if "$" in rel or rel in self.seen or not path.is_file():
            return
        self.seen.add(rel)
        lines = list(_joined(path.read_text(errors="replace")))
        stack = [("file", list(conds), choice)]        # (kind, conditions, inside a choice)
        entry, help_indent = None, None
        for raw in lines:
            if help_indent is not None:
                indent = len(raw) - len(raw.lstrip())
                if not raw.strip() or (help_indent and indent >= help_indent):
                    continue
                if help_indent == 0 and indent > 0:
                    help_indent = indent          # the help text's indentation: its first line's
                    continue
                help_indent = None
            words = raw.split(None, 1)
            if not words:
                continue
            word, rest = words[0], (words[1].strip() if len(words) > 1 else "")
            if word in ("help", "---help---"):
                help_indent = 0
                continue
            if word in _BLOCK_WORDS:
                entry = self.block(word, rest, stack, rel)
            elif entry is not None:
                self.attribute(entry, word, rest, stack)

    def block(self, word: str, rest: str, stack: list, rel: str):
        conds, choice = stack[-1][1], stack[-1][2]
        if word in _ENTRY:
            sym = Symbol(rest.split()[0]) if rest else None
            if sym is None:
                return None
            sym.where, sym.depends, sym.in_choice = rel, list(conds), choice
            return sym
        if word in ("if", "menu", "choice"):
            frame = (word, list(conds) + ([rest] if word == "if" else []), choice or word == "choice")
            stack.append(frame)
            return frame if word != "if" else None
        if word in ("endif", "endmenu", "endchoice") and len(stack) > 1:
            stack.pop()
        elif word in ("source", "osource", "rsource", "orsource"):
            target = rest.strip('"')
            if word.startswith(("r", "or")):
                target = str(pathlib.Path(rel).parent / target)
            self.file(target, conds, choice)
        return None

    def attribute(self, entry, word: str, rest: str, stack: list) -> None:
        if isinstance(entry, tuple):             # a menu's or choice's own `depends on`
            if word == "depends" and rest.startswith("on "):
                entry[1].append(rest[3:].strip())
            return
        if word in _TYPES:
            entry.type = word.replace("def_", "")
            entry.prompt = entry.prompt or (word in ("bool", "tristate", "int", "hex", "string") and '"' in rest)
        elif word == "prompt":
            entry.prompt = True
        elif word == "depends" and rest.startswith("on "):
            entry.depends.append(rest[3:].strip())
        else:
            return
        self.keep(entry)

    def keep(self, sym: Symbol) -> None:
        have = self.symbols.get(sym.name)
        if have is None or (sym.prompt and not have.prompt):
            self.symbols[sym.name] = sym


def kconfig(tree: pathlib.Path) -> dict:
    """{CONFIG_X: Symbol} of the tree's Kconfig files (x86)."""
    w = _Walk(pathlib.Path(tree))
    w.file("Kconfig", [], False)
    return {f"CONFIG_{k}": v for k, v in w.symbols.items()}
