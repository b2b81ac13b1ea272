"""JUnit files: one for runs that never reached analysis (HUNG, CRASHED, ERROR...), and the
judge's own made to say what thresholds.json says of a contended host."""
import xml.etree.ElementTree as ET

from . import safeio


def write_single(path, suite: str, verdict: str, reason: str, properties: dict):
    ts = ET.Element("testsuite", name=suite, tests="1", failures="0",
                    errors="0" if verdict == "SKIP" else "1", skipped="1" if verdict == "SKIP" else "0")
    props = ET.SubElement(ts, "properties")
    for k, v in properties.items():
        ET.SubElement(props, "property", name=str(k), value=str(v))
    tc = ET.SubElement(ts, "testcase", classname=suite, name="run")
    if verdict == "SKIP":
        ET.SubElement(tc, "skipped", message=reason)
    else:
        ET.SubElement(tc, "error", message=f"{verdict}: {reason}").text = reason
    suites = ET.Element("testsuites")
    suites.append(ts)
    raw = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    safeio.write_bytes(*safeio.split(path), raw)


def mark_contended(raw: bytes, thresholds: set) -> bytes:
    """The judge's junit.xml (pytest's, made by krig in its own temporary directory) of a run
    whose host was contended: the failed case of each threshold the judge recorded as
    "contended" in thresholds.json (`thresholds`: their krig_threshold) becomes a skipped one
    saying why, so that a CI dashboard reading junit.xml does not count a busy host's timing
    crossing as the kernel's failure. The suites' failure and skip counts follow."""
    root = ET.fromstring(raw)
    for ts in root.iter("testsuite"):
        moved = 0
        for tc in ts.iter("testcase"):
            props = {p.get("name"): p.get("value") for p in tc.iter("property")}
            failure = tc.find("failure")
            if failure is None or props.get("krig_threshold") not in thresholds:
                continue
            tc.remove(failure)
            ET.SubElement(tc, "skipped", type="krig.contended",
                          message=f"host contended, not blamed on the kernel: {props.get('krig_message', '')}")
            moved += 1
        if moved:
            ts.set("failures", str(int(ts.get("failures", "0")) - moved))
            ts.set("skipped", str(int(ts.get("skipped", "0")) + moved))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
