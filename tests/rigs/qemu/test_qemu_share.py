"""The guest's share as the host reads it (rigs/qemu/share.py, the QEMU mailbox): no guest boots.

The share's files are laid out here as QEMU's mapped-xattr model leaves them (a guest
symlink is a regular file whose user.virtfs.mode says S_IFLNK), plus real host links and
FIFOs (what a share without a mapped model would hand over).

Covers: rigs/qemu/mailbox.py, rigs/qemu/share.py."""
import os
import stat

import pytest

from krig.errors import RigError
from rigs.qemu import share as qemu_share
from rigs.qemu.rig import QemuMachine
from rigs.qemu.mailbox import MailboxCommand


def guest_made(path, mode: int, content: bytes = b""):
    """A file as mapped-xattr stores what the guest made: regular on the host, its type in an xattr."""
    path.write_bytes(content)
    os.setxattr(path, qemu_share.XATTR_MODE, mode.to_bytes(4, "little"))


@pytest.fixture
def share(tmp_path):
    src, dest = tmp_path / "out", tmp_path / "run"
    src.mkdir()
    dest.mkdir()
    (tmp_path / "host-secret").write_text("secret\n")
    return tmp_path, src, dest


def test_the_work_directory_keeps_user_xattrs():
    """The mapped model the rig picks on this filesystem (ext4 keeps user xattrs)."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        assert qemu_share.security_model(d) == "mapped-xattr"


def test_pull_takes_regular_files_and_refuses_what_the_guest_made_otherwise(share):
    tmp, src, dest = share
    (src / "samples.tsv").write_text("time\tx\n1\t2\n")
    (src / "sub").mkdir()
    (src / "sub" / "trace-cmd.log").write_text("ok\n")
    guest_made(src / "link", stat.S_IFLNK | 0o777, str(tmp / "host-secret").encode())
    guest_made(src / "fifo", stat.S_IFIFO | 0o644)
    guest_made(src / "sub" / "dev", stat.S_IFCHR | 0o600)
    guest_made(src / "plain", stat.S_IFREG | 0o644, b"guest data\n")
    (src / "hostlink").symlink_to(tmp / "host-secret")
    os.mkfifo(src / "hostfifo")
    (src / "verdict.json").write_text('{"verdict": "PASS"}')
    (dest / "stdout").write_text("krig's\n")
    (src / "stdout").write_text("the guest's\n")

    refused = qemu_share.pull_tree(src, dest)

    text = "\n".join(refused)
    assert f"out/link is a symlink the guest made -> {tmp / 'host-secret'}" in text
    assert "out/fifo is a FIFO the guest made" in text
    assert "out/sub/dev is a character device the guest made" in text
    assert "out/hostlink is a symlink on the host" in text
    assert "out/hostfifo is a FIFO on the host" in text
    assert "out/verdict.json takes the name of krig's own verdict.json" in text
    assert "out/stdout takes the name of krig's own stdout" in text
    assert len(refused) == 7, refused
    # what is data came across, readable, and krig's own file was not replaced
    assert (dest / "samples.tsv").read_text() == "time\tx\n1\t2\n"
    assert (dest / "sub" / "trace-cmd.log").read_text() == "ok\n"
    assert (dest / "plain").read_text() == "guest data\n"
    assert (dest / "stdout").read_text() == "krig's\n"
    assert stat.S_IMODE((dest / "plain").stat().st_mode) == 0o644
    for p in dest.rglob("*"):
        mode = p.lstat().st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), p
        assert not p.is_file() or b"secret" not in p.read_bytes(), p


def test_pull_refuses_a_linked_subdirectory(share):
    tmp, src, dest = share
    (tmp / "elsewhere").mkdir()
    (src / "d").symlink_to(tmp / "elsewhere")
    refused = qemu_share.pull_tree(src, dest)
    assert refused == ["out/d is a symlink on the host"]
    assert not (dest / "d").exists()


def mailbox(tmp_path):
    m = QemuMachine("test")
    m.share = tmp_path / "share"
    (m.share / "ctl").mkdir(parents=True)
    return MailboxCommand(m), m.share / "ctl"


def test_mailbox_answers_are_data(tmp_path):
    cmd, ctl = mailbox(tmp_path)
    (ctl / "0.rc").write_text("oops\n")
    with pytest.raises(RigError, match=r"ctl/0.rc holds 'oops', not an exit status"):
        cmd._rc("0.rc")
    (ctl / "1.rc").write_text("300\n")
    with pytest.raises(RigError, match="not an exit status"):
        cmd._rc("1.rc")
    (ctl / "2.rc").write_text("3\n")
    assert cmd._rc("2.rc") == 3
    os.mkfifo(ctl / "2.out")             # would block a reader that opened it as a file
    with pytest.raises(RigError, match=r"ctl/2.out: .*FIFO"):
        cmd._read("2.out")
    (tmp_path / "secret").write_text("secret\n")
    (ctl / "2.err").symlink_to(tmp_path / "secret")
    with pytest.raises(RigError, match=r"ctl/2.err"):
        cmd._read("2.err")


def test_mailbox_requests_replace_a_planted_link(tmp_path):
    cmd, ctl = mailbox(tmp_path)
    target = tmp_path / "host-file"
    target.write_text("untouched\n")
    (ctl / "7.argv").symlink_to(target)
    (ctl / "7.req").symlink_to(target)
    cmd._post("7", ["echo", "hi"], {"A": "1"})
    assert target.read_text() == "untouched\n"
    assert not (ctl / "7.argv").is_symlink() and (ctl / "7.argv").read_bytes() == b"echo\0hi\0"
    assert (ctl / "7.env").read_bytes() == b"A=1\0"
    # a mailbox the guest replaced by a link is refused, not followed
    cmd2, ctl2 = mailbox(tmp_path / "b")
    (tmp_path / "b" / "elsewhere").mkdir()
    ctl2.rmdir()
    ctl2.symlink_to(tmp_path / "b" / "elsewhere")
    with pytest.raises(RigError, match="cannot post 0 to the guest's mailbox"):
        cmd2._post("0", ["true"])
    assert not list((tmp_path / "b" / "elsewhere").iterdir())
