"""The simulated lab server anyone starts: `krig lab sim up NAME` (a disk-booted Debian
behind ipmi_sim or sushy-emulator, on 127.0.0.1)."""
