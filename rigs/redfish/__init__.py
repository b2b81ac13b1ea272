"""A lab server behind a Redfish BMC (driver = "redfish"), through sushy."""
