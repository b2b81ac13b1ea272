"""JUnit files, for CI dashboards (never read back by krig): one writer for all of them.

A run's junit.xml is the judge's (one case per threshold) or, for a run that never reached
the thresholds (HUNG, CRASHED, ERROR, SKIP...), one `run` case saying why; a qualification's
is one case per run. Each is a suite of Cases, its counts taken from the cases."""
import dataclasses
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

from . import safeio

Properties = Mapping[str, object] | Iterable[tuple[str, object]]      # (name, value) pairs, in order


@dataclasses.dataclass
class Case:
    """One test case: `result` is None (passed) or ("failure" | "error" | "skipped", message,
    text); `kind`, when set, is the result's type attribute (krig.contended)."""
    classname: str
    name: str
    properties: list[tuple[str, object]] = dataclasses.field(default_factory=list)     # (name, value) pairs, in order
    result: tuple[str, str, str | None] | None = None
    seconds: float | None = None
    kind: str | None = None


def suite_xml(name: str, cases: list[Case], properties: Properties = (), seconds: float | None = None) -> bytes:
    """The <testsuites> document of one suite; `properties`: the suite's (name, value) pairs."""
    count = {r: sum(1 for c in cases if c.result and c.result[0] == r) for r in ("failure", "error", "skipped")}
    ts = ET.Element("testsuite", name=name, tests=str(len(cases)), failures=str(count["failure"]),
                    errors=str(count["error"]), skipped=str(count["skipped"]))
    if seconds is not None:
        ts.set("time", f"{seconds:.1f}")
    add_properties(ts, properties)
    for c in cases:
        tc = ET.SubElement(ts, "testcase", classname=c.classname, name=c.name)
        if c.seconds is not None:
            tc.set("time", f"{c.seconds:.1f}")
        add_properties(tc, c.properties)
        if c.result:
            what, message, text = c.result
            el = ET.SubElement(tc, what, message=message)
            if c.kind:
                el.set("type", c.kind)
            if text is not None:
                el.text = text
    suites = ET.Element("testsuites")
    suites.append(ts)
    out: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return out


def add_properties(parent: ET.Element, properties: Properties) -> None:
    pairs = list(properties.items() if isinstance(properties, dict) else properties)
    if pairs:
        props = ET.SubElement(parent, "properties")
        for k, v in pairs:
            ET.SubElement(props, "property", name=str(k), value=str(v))


def write(path: str | os.PathLike[str], name: str, cases: list[Case], properties: Properties = (),
          seconds: float | None = None) -> None:
    """Write the suite to `path` through safeio (never through a link someone left there)."""
    safeio.write_bytes(*safeio.split(path), suite_xml(name, cases, properties, seconds))


def write_single(path: str | os.PathLike[str], suite: str, verdict: str, reason: str,
                 properties: dict[str, Any]) -> None:
    """A run that was not judged: one `run` case, skipped for SKIP, an error otherwise."""
    result = ("skipped", reason, None) if verdict == "SKIP" else ("error", f"{verdict}: {reason}", reason)
    write(path, suite, [Case(suite, "run", result=result)], properties)
