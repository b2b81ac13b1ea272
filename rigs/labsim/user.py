"""The user a simulated lab server's parts run as when krig is root: `krig-lab`.

A simulated IPMI server's ipmi_sim and the QEMU it starts (rigs/labsim/bmc.py) run as
`krig-lab`, a system user without a home or a login shell that `make setup` creates
(`make lab-user`, idempotent). It is not `krig-qemu`, the user of
every QEMU guest the QEMU rig runs (rigs/qemu/confine.py): a guest that escapes its
QEMU reaches no simulated server's BMC, console, libvirt socket or state.

There is no fallback user: a missing `krig-lab` is one line naming `make setup` (`nobody`
would share its rights with every other `nobody` process). When krig is not root, the
parts keep krig's own user.
"""
import os
import pwd

USER = "krig-lab"


def lab_user() -> str | None:
    """The user a simulated server's parts run as: None when krig is not root (they keep
    krig's user); a RigError in one line when krig is root and `krig-lab` does not exist."""
    if os.geteuid() != 0:
        return None
    if not exists():
        from krig.errors import RigError
        raise RigError(f"the user {USER} that simulated lab servers run as does not exist; "
                       "run `make setup` (or `make lab-user`)")
    return USER


def lab_ids() -> tuple[int, int] | None:
    """(uid, gid) of lab_user(), None when the parts keep krig's user."""
    who = lab_user()
    if who is None:
        return None
    pw = pwd.getpwnam(who)
    return pw.pw_uid, pw.pw_gid


def exists() -> bool:
    try:
        pwd.getpwnam(USER)
        return True
    except KeyError:
        return False

