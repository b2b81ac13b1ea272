"""sushy-emulator, the real one, with a fault layer in front of it for the Redfish rig's tests:
`python tests/redfish_faults.py FAULTS_FILE --config CFG` runs sushy-tools' own emulator main()
with its WSGI application wrapped. The first line of FAULTS_FILE (read on every request) says
what the BMC does now:
  busy      every request answered 503 Service Unavailable (a BMC busy with itself)
  drop      every request answered 401 (the session dropped, and no new login accepted)
  slow N    every request held N seconds first
  (empty)   nothing: the emulator answers
A fault on top of the real service, as the tests of the IPMI rig put faults on ipmi_sim."""
import json
import pathlib
import sys
import time

FAULTS = pathlib.Path(sys.argv.pop(1))


def faulty(app):
    def wrapped(env, start_response):
        try:
            mode = FAULTS.read_text().split()
        except OSError:
            mode = []
        if mode[:1] == ["slow"]:
            time.sleep(float(mode[1]))
        if mode[:1] in (["busy"], ["drop"]):
            code = "503 Service Unavailable" if mode[0] == "busy" else "401 Unauthorized"
            body = json.dumps({"error": {"code": "Base.1.0.GeneralError", "message": code}}).encode()
            start_response(code, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        return app(env, start_response)
    return wrapped


if __name__ == "__main__":
    from sushy_tools.emulator import main as emulator
    emulator.app.wsgi_app = faulty(emulator.app.wsgi_app)
    sys.exit(emulator.main())
