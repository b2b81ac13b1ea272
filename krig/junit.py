"""A JUnit file for runs that never reached analysis (HUNG, CRASHED, ERROR...)."""
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
