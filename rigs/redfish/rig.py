"""The Redfish rig: a real server driven through its BMC's Redfish service (rigs/redfish/bmc.py,
on the sushy library), its console a network serial console (rigs/netconsole.py), commands,
files, kexec and the results pull over SSH exactly as the IPMI rig does them (rigs/ipmi/rig.py,
rigs/ipmi/server.py: this rig is that one with another BMC). The rig file format is in
rigs/redfish/spec.py and docs/lab-server.md."""
from rigs.ipmi.rig import IpmiRig
from rigs.ipmi.server import IpmiServer
from rigs.redfish.bmc import RedfishBmc
from rigs.redfish.spec import validate_spec


class RedfishServer(IpmiServer):
    def prepare(self, run_dir, needs):
        super().prepare(run_dir, needs)
        self.facts.update(self.bmc.server_facts())

    def close(self):
        try:
            super().close()
        finally:
            self.bmc.close()


class RedfishRig(IpmiRig):
    kind = "redfish"
    validate, bmc_class, server_class = staticmethod(validate_spec), RedfishBmc, RedfishServer
