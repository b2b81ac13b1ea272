"""A QEMU rig: a local guest with emulated NVMe (driver = "qemu")."""
