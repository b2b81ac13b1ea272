"""`krig list`: the reproducers (with their presets), rigs and kernels, each a name line and its
description wrapped under it, within 80 columns. A reproducer shows the first sentence of its
description (the rest is in its repro.toml); a rig or kernel its whole one-line description."""
import re
import textwrap

from kernels.catalog import load_kernel
from kernels.definition import kernel_names
from kernels.spec import KernelNotBuilt
from rigs import load_rig, rig_names
from krig.errors import KrigError
from krig.reproducer import load_reproducer, reproducer_names

WIDTH = 80
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def first_sentence(text: str) -> str:
    """The first sentence of a description's first paragraph, on one line."""
    para = " ".join(text.strip().split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(para, 1)[0]


def entry(name: str, tag: str, text: str) -> list:
    """`  name  tag` and the text wrapped under it, 6 columns in, every line <= WIDTH columns."""
    head = f"  {name:24s} {tag}".rstrip() if len(name) <= 24 else f"  {name}  {tag}".rstrip()
    lines = textwrap.wrap(head, WIDTH, subsequent_indent=" " * 27, break_on_hyphens=False)
    return lines + textwrap.wrap(text, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6,
                                 break_on_hyphens=False)


def list_lines() -> list:
    out = ["reproducers:"]
    for n in reproducer_names():
        r = load_reproducer(n)
        out += entry(n, f"presets: {', '.join(sorted(r.presets)) or '-'}", first_sentence(r.description))
    out.append("rigs:")
    for n in rig_names():
        try:
            rig = load_rig(n)
            out += entry(n, rig.kind, rig.spec.description)
        except KrigError as e:
            out += entry(n, "INVALID", str(e))
    out.append("kernels:")
    not_built = False
    for n in kernel_names():
        try:
            k = load_kernel(n)
            out += entry(n, k.release, k.description)
        except KrigError as e:
            if isinstance(e, KernelNotBuilt):
                out += entry(n, "(not built)", e.description)
                not_built = True
            else:
                out += entry(n, "(not available)", str(e))
    if not_built:
        out.append("  (build one with `krig kernel build <name>`)")
    return out


def cmd_list(a) -> int:
    print("\n".join(list_lines()))
    return 0
