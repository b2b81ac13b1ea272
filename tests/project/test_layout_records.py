"""One way to read a run's records: manifest.json through the run record (krig/record.py), and
every judged or result file (verdict, metrics, thresholds, group, validation, comparison,
bisection, qualification) through its record module; read by line, comments left out."""
import pathlib
import re

import pytest

from conftest import ROOT
from test_layout import PARTS


# -- one way to read a run ---------------------------------------------------------

# Where a run's records (manifest.json; the judge's verdict.json, metrics.json, thresholds.json)
# may be read, written and typed: the run record and the run-directory reader.
RECORD_MODULES = {"krig/record.py", "krig/record_machine.py", "krig/rundir.py", "krig/record_group.py",
                  "krig/record_bisect.py", "krig/record_qualify.py", "krig/record_validation.py",
                  "krig/record_compare.py"}
_JUDGED_FILES = r"(?:\b(?:VERDICT|METRICS|THRESHOLDS|GROUP_FILE|VALIDATE_FILE|BISECT_STATE|SUITE_FILE|QUALIFY_CASES" \
                r"|_?case_file)\b|(?:verdict|metrics|thresholds|group|validate|suite)\.json)"
# What reads a run's records around the record: by key, by hand, or into a record of one's own.
MANIFEST_READS = {
    "reads the manifest by key": re.compile(r"\.manifest(?:\[|\.get\()"),
    "makes a record from JSON": re.compile(r"\bfrom_json\b"),
    "reads manifest.json's raw object": re.compile(r"\bmanifest_json\b"),
    "reads manifest.json by hand": re.compile(r"(?:\bjson\.loads?|\bread_json|\.json|\bopen|\bread_bytes|\bread_text)\("
                                              r"[^\n]*(?:\bMANIFEST\b|manifest\.json)|manifest\.json\W*\.(?:read|open)"),
    "reads or writes a judged file by hand": re.compile(r"(?:\bjson\.(?:loads?|dumps?)|\bread_json|\bwrite_json|\.json"
                                                        r"|\bopen|\bread_bytes|\bread_text|\bwrite_text|\bwrite_bytes)\("
                                                        r"[^\n]*" + _JUDGED_FILES + r"|" + _JUDGED_FILES +
                                                        r"\W*\.(?:read|open|write)"),
    # a judged file's path kept in a name, to be read or written by hand a line later
    "keeps a judged file's path": re.compile(r"^\s*\w+\s*=\s*[\w.()]+\s*/\s*[\"']?" + _JUDGED_FILES + r"[\"']?\s*$"),
}


def manifest_reads(source: str) -> list[str]:
    """'line N: what' for each way `source` reads a run's manifest other than through
    krig.record.RunRecord (comments left out: a sentence about them reads nothing)."""
    import io
    import tokenize
    comments = {(t.start[0], t.start[1]) for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT}
    out = []
    for n, line in enumerate(source.splitlines(), 1):
        cut = min((col for row, col in comments if row == n), default=len(line))
        out += [f"line {n}: {what}" for what, pat in MANIFEST_READS.items() if pat.search(line[:cut])]
    return out


def manifest_reads_under(root: pathlib.Path = ROOT) -> list:
    files = [p for top in (*PARTS, "reproducers", "bench") for p in sorted((root / top).rglob("*.py"))]
    assert len(files) > 50
    return [f"{p.relative_to(root)} {hit}" for p in files if str(p.relative_to(root)) not in RECORD_MODULES
            for hit in manifest_reads(p.read_text())]


def test_a_run_is_read_only_through_the_run_record():
    """krig/record.py's RunRecord is the one way a run is read: outside the record modules no
    code reads the manifest by key, makes a Manifest (or Verdict) from JSON, reads manifest.json
    itself, or reads or writes verdict.json, metrics.json or thresholds.json but through
    krig/record.py, group.json but through krig/record_group.py, validate.json but through
    krig/record_validation.py, a bisection's state.json but through krig/record_bisect.py, or a
    qualification's suite.json and case files but through krig/record_qualify.py; reproducers'
    analyze.py and the benchmarks included."""
    bad = manifest_reads_under()
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("snippet, found", [
    ("cpus = run.manifest.get('machine', {}).get('cpus')\n", ["line 1: reads the manifest by key"]),
    ("x = 1\nrepro = RunDir(d).manifest['reproducer']\n", ["line 2: reads the manifest by key"]),
    ("man = Manifest.from_json(RunDir(d).manifest_json())\n",
     ["line 1: makes a record from JSON", "line 1: reads manifest.json's raw object"]),
    ("m = json.loads((d / 'manifest.json').read_text())\n", ["line 1: reads manifest.json by hand"]),
    ("m = safeio.read_json(d, MANIFEST)\n", ["line 1: reads manifest.json by hand"]),
    ("m = run.json(MANIFEST)\n", ["line 1: reads manifest.json by hand"]),
    ("raise UsageError(f'{d}: no {MANIFEST}')\n", []),
    ("m = RunRecord.read(d).manifest  # not .manifest.get( nor from_json\n", []),
    ("rel = RunRecord.read(d).manifest.release\n", []),
    ("v = json.loads((d / 'verdict.json').read_text())\n", ["line 1: reads or writes a judged file by hand"]),
    ("m = run.json(METRICS, {})\n", ["line 1: reads or writes a judged file by hand"]),
    ("run.write_json(THRESHOLDS, rows)\n", ["line 1: reads or writes a judged file by hand"]),
    ("(d / 'metrics.json').write_text(text)\n", ["line 1: reads or writes a judged file by hand"]),
    ("if not run.exists(VERDICT):\n", []),
    ("v = RunRecord.read(d).verdict\n", []),
    ("g = read_json(gdir / GROUP_FILE)\n", ["line 1: reads or writes a judged file by hand"]),
    ("if (p / GROUP_FILE).is_file():\n", []),
    ("(out / BISECT_STATE).write_text(json.dumps(state))\n", ["line 1: reads or writes a judged file by hand"]),
    ("state = read_json(bdir / BISECT_STATE)\n", ["line 1: reads or writes a judged file by hand"]),
    ("text = git_bisect_run(tree_p, out / BISECT_STATE)\n", []),
    ("suite = read_json(qdir / SUITE_FILE)\n", ["line 1: reads or writes a judged file by hand"]),
    ("write_json(qdir / 'suite.json', data)\n", ["line 1: reads or writes a judged file by hand"]),
    ("elif (p / SUITE_FILE).is_file():\n", []),
    ("rec = read_json(_case_file(qdir, c['id']))\n", ["line 1: reads or writes a judged file by hand"]),
    ("write_json(case_file(qdir, cid), rec)\n", ["line 1: reads or writes a judged file by hand"]),
    ("c = json.loads((qdir / QUALIFY_CASES / name).read_text())\n", ["line 1: reads or writes a judged file by hand"]),
    ("(qdir / QUALIFY_CASES).mkdir(parents=True, exist_ok=True)\n", []),
    ("state = json.loads((vdir / VALIDATE_FILE).read_text())\n", ["line 1: reads or writes a judged file by hand"]),
    ("write_json(vdir / VALIDATE_FILE, state)\n", ["line 1: reads or writes a judged file by hand"]),
    ("(d / 'validate.json').write_text(json.dumps(state))\n", ["line 1: reads or writes a judged file by hand"]),
    ("if (vdir / VALIDATE_FILE).exists():\n", []),
    ("state = read_validation(vdir, '-o')\n", []),
    ("vfile = vdir / VALIDATE_FILE\nstate = json.loads(vfile.read_text())\n", ["line 1: keeps a judged file's path"]),
    ("f = run_dir / 'verdict.json'\n", ["line 1: keeps a judged file's path"]),
    ("made = read_validation(vdir) if (vdir / VALIDATE_FILE).exists() else None\n", []),
])
def test_the_checker_sees_a_manifest_read_around_the_record(snippet, found):
    assert manifest_reads(snippet) == found
