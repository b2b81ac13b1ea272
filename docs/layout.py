"""`python docs/layout.py`: docs/layout.png, krig's folders as floors, drawn from the imports that
tests/project/test_layout.py reads (the same graph, the same floors): a box a folder, as wide within its
floor as its lines of Python; an arrow a folder's imports of another's modules, with their count; an arrow that runs
back up (an import of a higher floor) drawn red. `--check` prints the counts and draws nothing.
"""
import collections
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import test_layout  # noqa: E402  (the rule's own reader of the imports)

ORDER = {"krig": 0, "rigs": 0, "kernels": 1, "analysis": 2, "workflows": 0}
FILL = {1: "#d9e7f5", 2: "#e3f1df", 3: "#f8e6d0"}


def folder_graph(root: pathlib.Path = ROOT) -> tuple[dict, dict]:
    """({(from, to): imports}, {folder: lines}) over the parts, a subpackage counted in its folder."""
    edges = collections.Counter()
    for mod, deps in test_layout.graph(root).items():
        a = mod.split(".")[0]
        for d in deps:
            b = d.split(".")[0]
            if a != b and a in test_layout.FLOORS and b in test_layout.FLOORS:
                edges[a, b] += 1
    lines = {p: sum(len(f.read_text(errors="replace").splitlines()) for f in (root / p).rglob("*.py"))
             for p in test_layout.FLOORS}
    return dict(edges), lines


def boxes(lines: dict) -> dict:
    """folder -> (x, y, width, height): a row a floor, widths by lines, a gap between boxes, the
    right margin left for the arrows that pass a floor by."""
    out, per_floor = {}, collections.defaultdict(list)
    for p, floor in test_layout.FLOORS.items():
        per_floor[floor].append(p)
    for floor, parts in per_floor.items():
        parts.sort(key=ORDER.get)
        gap, span = 0.03, 0.83
        room = span - gap * (len(parts) - 1)
        total = sum(lines[p] for p in parts)
        x = 0.05
        for p in parts:
            w = room * lines[p] / total
            out[p] = (x, 0.08 + (floor - 1) * 0.3, w, 0.18)
            x += w + gap
    return out


def draw(dest: pathlib.Path) -> tuple[int, int]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    edges, lines = folder_graph()
    at = boxes(lines)
    fig, ax = plt.subplots(figsize=(10, 6.5))
    ax.set_axis_off()
    for p, (x, y, w, h) in at.items():
        ax.add_patch(Rectangle((x, y), w, h, facecolor=FILL[test_layout.FLOORS[p]], edgecolor="#444"))
        ax.text(x + w / 2, y + h / 2, f"{p}/\n{lines[p]:,} lines", ha="center", va="center", fontsize=11)
    up = 0
    for (a, b), n in sorted(edges.items()):
        (xa, ya, wa, ha), (xb, yb, wb, hb) = at[a], at[b]
        back = test_layout.FLOORS[b] > test_layout.FLOORS[a]
        up += back
        same = test_layout.FLOORS[a] == test_layout.FLOORS[b]
        skip = abs(test_layout.FLOORS[a] - test_layout.FLOORS[b]) > 1      # passes a floor by: on the right
        start = (xa + wa / 2, ya if yb < ya else ya + ha)
        end = (xb + wb / 2, yb + hb if yb < ya else yb)
        if same:
            start, end = (xa + wa, ya + ha / 2), (xb, yb + hb / 2)
        if skip:
            start, end = (xa + wa, ya + ha / 2), (xb + wb, yb + hb / 2)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1 + n ** 0.5 / 3,
                                     color="#c0392b" if back else "#555",
                                     connectionstyle="arc3,rad=-0.35" if skip else "arc3,rad=0.08"))
        label = (0.975, (ya + yb + hb) / 2 + 0.03) if skip else ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        ax.text(*label, str(n), fontsize=8, color="#333", bbox={"boxstyle": "round,pad=0.15", "fc": "white",
                                                                "ec": "none"})
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 0.95)
    ax.set_title(f"krig's folders as floors, drawn from their imports: {sum(edges.values())} imports "
                 f"between folders, {up} running back up", fontsize=11)
    fig.savefig(dest, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return sum(edges.values()), up


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        edges, lines = folder_graph()
        for (a, b), n in sorted(edges.items()):
            print(f"{a} -> {b}: {n}")
        return
    dest = ROOT / "docs" / "layout.png"
    n, up = draw(dest)
    print(f"layout: {dest}: {n} imports between folders, {up} running back up")


if __name__ == "__main__":
    main()
