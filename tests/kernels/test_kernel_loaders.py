"""The kernel catalog (kernels/catalog.py): --kernel's text is read once into a Given and
loaded by the one loader that takes its kind; nothing below reads the text again."""
import importlib
import inspect
import pathlib
import pkgutil
import subprocess

import pytest

import kernels
from kernels import catalog
from kernels.given import Given, kernel_text, parse
from krig.errors import KrigError, UsageError

TREE = pathlib.Path("/src/linux")
FORMS = {
    "a name": (Given("tiny-6.1", "toml", name="tiny-6.1"), "NamedKernels"),
    "a name with a series": (Given("tiny-6.1,series=s.mbox", "toml", name="tiny-6.1", opts={"series": "s.mbox"}),
                             "DerivedKernels"),
    "a name with drivers": (Given("tiny-6.1,drivers=lab", "toml", name="tiny-6.1", opts={"drivers": "lab"}),
                            "DerivedKernels"),
    "TREE@REF": (Given("/src/linux@v6.1", "git", path=TREE, ref="v6.1"), "DerivedKernels"),
    "TREE@ with like=": (Given("/src/linux@,like=tiny-6.1", "git", path=TREE, opts={"like": "tiny-6.1"}),
                         "DerivedKernels"),
    "a built tree": (Given("/src/linux", "tree", path=TREE), "TreeKernels"),
    "an image": (Given("/boot/vmlinuz", "image", path=pathlib.Path("/boot/vmlinuz")), "ImageKernels"),
    "an image with its config": (Given("/boot/vmlinuz,config=c", "image", path=pathlib.Path("/boot/vmlinuz"),
                                       opts={"config": "c"}), "ImageKernels"),
}


@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_taken_by_exactly_one_loader(form):
    g, want = FORMS[form]
    assert [type(loader).__name__ for loader in catalog.LOADERS if loader.takes(g)] == [want]


class Recorder:
    """A loader that takes built trees and records what it is given."""

    def __init__(self):
        self.seen = []

    def takes(self, g):
        return g.kind == "tree"

    def load(self, g, build, log, read_server=None):
        self.seen.append((g, build))
        return f"kernel of {g.path.name}"


def test_the_catalog_passes_the_given_it_read_to_the_loader_that_takes_it(tmp_path, monkeypatch):
    rec = Recorder()
    others = tuple(x for x in catalog.LOADERS if type(x).__name__ != "TreeKernels")
    monkeypatch.setattr(catalog, "LOADERS", (rec,) + others)
    assert catalog.load_kernel(str(tmp_path), build=True) == f"kernel of {tmp_path.name}"
    assert rec.seen == [(parse(str(tmp_path)), True)]


def test_loaders_that_overlap_are_krigs_fault_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "LOADERS", catalog.LOADERS + (Recorder(),))
    with pytest.raises(KrigError, match=r"^--kernel .*: 2 of krig's kernel loaders take a tree kernel, not one$"):
        catalog.load_kernel(str(tmp_path))


def test_every_loader_is_in_the_catalog():
    """A loader under kernels/ that the catalog does not list would never be chosen: each class
    with `takes` and `load` (the Loader protocol aside) is listed, once."""
    found = []
    for m in pkgutil.iter_modules(kernels.__path__):
        mod = importlib.import_module(f"kernels.{m.name}")
        found += [cls for _, cls in inspect.getmembers(mod, inspect.isclass)
                  if cls.__module__ == mod.__name__ and not getattr(cls, "_is_protocol", False)
                  and callable(getattr(cls, "takes", None)) and callable(getattr(cls, "load", None))]
    assert len(found) >= 4
    assert sorted(c.__name__ for c in found) == sorted(type(x).__name__ for x in catalog.LOADERS)


def test_like_takes_a_kernel_a_workflow_wrote_for_itself(tmp_path, monkeypatch):
    """like= finds a kernel where every other kernel name is found: kernels/, then the tomls a
    workflow wrote outside the checkout (krig bisect's)."""
    from kernels import definition, derived
    made = tmp_path / "made"
    made.mkdir()
    (made / "made-here.toml").write_text('extends = "tiny-6.1"\n')
    tree = tmp_path / "linux"
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=k", "-c", "user.email=k@example.org", "commit", "-q",
                    "--allow-empty", "-m", "base"], check=True)
    g = parse(f"{tree}@HEAD,like=made-here")
    with pytest.raises(UsageError, match="like=made-here: unknown kernel"):
        derived.derived_spec(g)
    monkeypatch.setattr(definition, "GENERATED_DIRS", [made])
    spec, origin, series = derived.derived_spec(g)
    assert spec.description.endswith("config like made-here") and spec.source == "git" and series is None


def test_the_text_gives_its_public_and_pinned_forms(tmp_path):
    """A Given, and the words of a text a record kept (nothing on disk needed), say the text fit to
    leave the host (its paths by their last names) and TREE@ with its REF pinned, read the way
    parse reads it: the head's last @ makes TREE@REF (a REF may have a /), unless the head is a
    file that exists (its name has an @)."""
    tree = tmp_path / "src" / "linux"
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    g = parse(f"{tree}@,like=tiny-6.1")
    assert g.unpinned() and g.public() == "linux@,like=tiny-6.1"
    assert g.pinned("a" * 40) == f"{tree}@{'a' * 40},like=tiny-6.1"
    assert not parse(f"{tree}@v6.1").unpinned() and not parse("tiny-6.1").unpinned()
    kept = kernel_text("~/gone/linux@origin/master,series=/home/a/s.mbox")
    assert kept.public() == "linux@origin/master,series=s.mbox"
    assert kept.public(tree_as="linux", ref_as="c" * 12) == f"linux@{'c' * 12},series=s.mbox"
    assert kept.paths() == ["~/gone/linux", "/home/a/s.mbox"]
    image = tmp_path / "a@b" / "vmlinuz"
    image.parent.mkdir()
    image.write_bytes(b"")
    words = kernel_text(f"{image},config=/boot/config-6.1,modules=<MODULES>")
    assert not words.at and words.public() == "vmlinuz,config=config-6.1,modules=<MODULES>"
    assert kernel_text("tiny-6.1,drivers=lab1").public() == "tiny-6.1,drivers=lab1"
    with pytest.raises(KrigError, match="not TREE@REF"):
        kernel_text("tiny-6.1").pinned("c" * 12)


def _bzimage(path: pathlib.Path, release: str) -> pathlib.Path:
    """An image file with an x86 setup header naming `release` (what kernels/prebuilt.py reads)."""
    head = bytearray(0x8000)
    head[0x202:0x206] = b"HdrS"
    head[0x20E:0x210] = (0x400).to_bytes(2, "little")          # the version string at 0x600
    version = f"{release} (krig@test) #1".encode()
    head[0x600:0x600 + len(version)] = version
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(head))
    return path


def test_an_image_finds_its_config_beside_it_or_says_where_it_looked(tmp_path, monkeypatch):
    """An image file (the ImageKernels loader): its release from its setup header, its config
    config-<release> beside it, no modules asked of a kernel without CONFIG_MODULES; without a
    config beside it, one line naming the files looked for."""
    monkeypatch.setenv("KRIG_CACHE", str(tmp_path / "cache"))
    img = _bzimage(tmp_path / "boot" / "vmlinuz-6.1.0-test", "6.1.0-test")
    with pytest.raises(UsageError, match=r"no config next to the image \(config-6\.1\.0-test, config-6\.1\.0-test, "
                                         r"\.config, config\); give it as ,config=FILE"):
        catalog.load_kernel(str(img))
    (img.parent / "config-6.1.0-test").write_text("CONFIG_XFS_FS=y\n# CONFIG_MODULES is not set\n")
    k = catalog.load_kernel(str(img))
    assert (k.name, k.release, k.image, k.config) == ("image-vmlinuz-6.1.0-test", "6.1.0-test", img,
                                                      img.parent / "config-6.1.0-test")
    assert k.arg == str(img) and not catalog.krig_builds(str(img))
