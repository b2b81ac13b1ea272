"""A lab server behind an IPMI BMC (driver = "ipmi"): power, SOL or a network console, SSH,
kexec, the results pulled back. The Redfish driver builds on it."""
