"""Kconfig text: a fragment's options (kernels/fragments/, a reproducer's `config`), fragments
merged in order, a .config read, and what a kernel's .config lacks of what was asked: the final
.config of a build (config_mismatches), or any kernel's against a reproducer's fragment before
it boots (check_config: a missing option is one line)."""
import pathlib
import re

from krig import REPRO_DIR
from krig.errors import UsageError
from .kernel import Kernel

_CONFIG_RE = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_NOTSET_RE = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


def parse_fragment(path: pathlib.Path, label: str | None = None) -> dict:
    """A kconfig fragment -> {CONFIG_X: value}; `# CONFIG_X is not set` -> 'n'."""
    label = label or str(path)
    out = {}
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"{label}: cannot read config fragment ({e.strerror})") from None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _CONFIG_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
            continue
        m = _NOTSET_RE.match(line)
        if m:
            out[m.group(1)] = "n"
            continue
        if line and not line.startswith("#"):
            raise UsageError(f"{label}:{n}: not a kconfig line: {raw!r} (want CONFIG_X=value or "
                             "'# CONFIG_X is not set')")
    return out


def merge_fragments(fragments: list) -> tuple[dict, dict, list]:
    """[(label, path)] -> (values, origin label per option, redefinitions).

    Same rule as scripts/kconfig/merge_config.sh: a later fragment overrides an
    earlier one; redefinitions are reported (label, option, old, new).
    """
    values: dict[str, str] = {}
    origin: dict[str, str] = {}
    redefined: list[tuple[str, str, str, str]] = []
    for label, path in fragments:
        for k, v in parse_fragment(path, label).items():
            if k in values and values[k] != v:
                redefined.append((label, k, values[k], v))
            values[k] = v
            origin[k] = label
    return values, origin, redefined


def read_dotconfig(path: pathlib.Path) -> dict:
    return parse_dotconfig(path.read_text())


def parse_dotconfig(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        m = _CONFIG_RE.match(line) or _NOTSET_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2) if m.re is _CONFIG_RE else "n"
    return out


def config_mismatches(wanted: dict, final: dict) -> list:
    """Requested options the final .config does not honour. A requested =m is
    satisfied by =y (built in); a requested 'not set' by an absent option."""
    bad = []
    for k, v in wanted.items():
        got = final.get(k, "n")
        if v == got or (v == "m" and got == "y"):
            continue
        bad.append((k, v, got))
    return bad


def check_config(kernel: Kernel, repro_name: str, label: str = "--kernel") -> None:
    """A kernel given as a tree or image must have every option the reproducer's fragment asks for."""
    frag = REPRO_DIR / repro_name / "config"
    if not frag.is_file() or kernel.config is None:
        return
    wanted = parse_fragment(frag, f"reproducers/{repro_name}/config")
    have = read_dotconfig(kernel.config)
    modules = kernel.modules_dir is not None and kernel.modules_dir.is_dir() and any(kernel.modules_dir.iterdir())
    for k, v in wanted.items():
        got = have.get(k, "n")
        if v == "n" or got == v or got == "y" or (got == "m" and modules):
            continue
        state = "not set" if got == "n" else f"={got} with no modules installed"
        raise UsageError(f"{label} {kernel.arg or kernel.name}: {k}={v} is {state} in {kernel.config}, "
                         f"and reproducers/{repro_name}/config needs it")
