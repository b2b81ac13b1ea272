"""The IPMI rig without a BMC or a guest: rig file validation, quoting, lock, secrets."""
import os
import pathlib
import re
import subprocess

import pytest

from krig.errors import RigError, UsageError
from rigs import load_rig
from rigs.ipmi.rig import IpmiRig
from rigs.ipmi.bmc import Bmc
from rigs.ipmi.kexec import kexec_args, relocatable, syscall_for
from rigs.ipmi.ssh import Ssh, remote_command

PW = "s3cret-Pw"


@pytest.fixture
def files(tmp_path, monkeypatch):
    (tmp_path / "key").write_text("not really a key\n")
    (tmp_path / "key").chmod(0o600)
    (tmp_path / "known_hosts").write_text("")
    pw = tmp_path / "pw"
    pw.write_text(PW + "\nbmc = 10.0.0.5\n")
    pw.chmod(0o600)
    monkeypatch.setenv("KRIG_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("KRIG_TEST_PW", PW)
    return tmp_path


def spec(files, **over):
    s = {"driver": "ipmi", "scratch_dev": "/dev/nvme0n1",
         "bmc": {"host": "10.0.0.5", "user": "krig", "password_env": "KRIG_TEST_PW"},
         "ssh": {"host": "10.0.0.6", "key": str(files / "key"), "known_hosts": str(files / "known_hosts")}}
    for k, v in over.items():
        if k in ("bmc", "ssh") and v is not None:
            s[k] = {**s[k], **v}
            s[k] = {kk: vv for kk, vv in s[k].items() if vv is not None}
        elif v is None:
            s.pop(k, None)
        else:
            s[k] = v
    return s


def test_minimal_rig_file_defaults(files):
    r = IpmiRig("lab", spec(files))
    assert r.spec.bmc.port == 623 and r.spec.bmc.cipher_suite == 17
    assert r.spec.ssh.port == 22 and r.spec.ssh.user == "root"
    assert r.spec.boot == "installed" and r.spec.remote_dir == "/var/lib/krig"
    assert r.scratch_env() == {"KRIG_SCRATCH_DEV": "/dev/nvme0n1"}
    assert PW not in repr(r.describe())


@pytest.mark.parametrize("over,message", [
    ({"bogus": 1}, r"rigs/lab\.toml: unknown field 'bogus'"),
    ({"bmc": None}, r"rigs/lab\.toml: missing required field 'bmc'"),
    ({"bmc": {"host": None}}, r"rigs/lab\.toml\.bmc: missing required field 'host'"),
    ({"bmc": {"host": "-oProxyCommand=x"}}, r"rigs/lab\.toml\.bmc\.host: .* is not a host name"),
    ({"bmc": {"port": 70000}}, r"rigs/lab\.toml\.bmc\.port: 70000 is not a port number"),
    ({"bmc": {"port": "623"}}, r"rigs/lab\.toml\.bmc\.port: expected integer"),
    ({"bmc": {"user": "a b"}}, r"rigs/lab\.toml\.bmc\.user: 'a b'"),
    ({"bmc": {"password_env": None}}, r"rigs/lab\.toml\.bmc: set exactly one of password_env"),
    ({"bmc": {"password_file": "/x"}}, r"rigs/lab\.toml\.bmc: set exactly one of password_env"),
    ({"bmc": {"password_env": "NOT_SET_ANYWHERE_X"}}, r"\.bmc\.password_env: environment variable NOT_SET_ANYWHERE_X is not set"),
    ({"bmc": {"password_env": "1BAD"}}, r"\.bmc\.password_env: '1BAD' is not an environment variable name"),
    ({"bmc": {"cipher_suite": 42}}, r"\.bmc\.cipher_suite: 42 is not an IPMI cipher suite"),
    ({"bmc": {"privilege": "root"}}, r"\.bmc\.privilege: 'ROOT' is not one of USER, OPERATOR, ADMINISTRATOR"),
    ({"bmc": {"boot_device": "usb"}}, r"\.bmc\.boot_device: 'usb' is not one of"),
    ({"bmc": {"retries": 0}}, r"\.bmc\.retries: must be 1-10, got 0"),
    ({"bmc": {"timeout": 61}}, r"\.bmc\.timeout: must be 1-60 s, got 61"),
    ({"ssh": {"key": "relative/key"}}, r"\.ssh\.key: 'relative/key': use an absolute path"),
    ({"ssh": {"key": "/nonexistent/key"}}, r"\.ssh\.key: /nonexistent/key does not exist"),
    ({"ssh": {"known_hosts": None}}, r"\.ssh: missing required field 'known_hosts'"),
    ({"ssh": {"options": ["StrictHostKeyChecking=no"]}}, r"\.ssh\.options: StrictHostKeyChecking is not allowed; allowed: "),
    ({"ssh": {"options": ["UserKnownHostsFile=/dev/null"]}}, r"\.ssh\.options: UserKnownHostsFile is not allowed"),
    ({"ssh": {"options": ["SendEnv=KRIG_*"]}}, r"\.ssh\.options: SendEnv is not allowed"),
    ({"ssh": {"options": ["ForwardAgent=yes"]}}, r"\.ssh\.options: ForwardAgent is not allowed"),
    ({"ssh": {"options": ["PKCS11Provider=/tmp/x.so"]}}, r"\.ssh\.options: PKCS11Provider is not allowed"),
    ({"ssh": {"options": ["LocalForward=8080 127.0.0.1:80"]}}, r"\.ssh\.options: LocalForward is not allowed"),
    ({"ssh": {"options": ["DynamicForward=1080"]}}, r"\.ssh\.options: DynamicForward is not allowed"),
    ({"ssh": {"options": ["nonsense"]}}, r"\.ssh\.options: 'nonsense': expected Name=value"),
    ({"ssh": {"connect_timeout": 0}}, r"\.ssh\.connect_timeout: must be at least 1"),
    ({"scratch_dev": "nvme0n1"}, r"\.scratch_dev: 'nvme0n1' is not a device path"),
    ({"remote_dir": "/tmp"}, r"\.remote_dir: '/tmp': use a dedicated absolute directory"),
    ({"remote_dir": "/var/tmp/../etc"}, r"\.remote_dir: .*use a dedicated absolute directory"),
    ({"boot": "pxe"}, r"\.boot: 'pxe' is not one of installed, kexec"),
    ({"boot_timeout": 0}, r"\.boot_timeout: must be at least 1"),
    ({"nmi_panic": "yes"}, r"\.nmi_panic: expected boolean"),
    ({"shutdown_command": "poweroff"}, r"\.shutdown_command: expected list"),
    ({"kexec": {"initrd": "relative.img"}}, r"\.kexec\.initrd: 'relative.img': use auto, none or an absolute path"),
    ({"kexec": {"bogus": 1}}, r"\.kexec: unknown field 'bogus'"),
    ({"emulator_pidfile": "qemu.pid"}, r"\.emulator_pidfile: 'qemu.pid': expected an absolute path"),
])
def test_bad_rig_file_one_line(files, over, message):
    with pytest.raises(UsageError, match=message) as e:
        IpmiRig("lab", spec(files, **over))
    assert "\n" not in str(e.value)
    assert PW not in str(e.value)


def test_a_simulated_servers_emulator_is_the_pid_its_file_names(files):
    """emulator_pidfile (what `krig lab sim` writes): the live process it names is the emulator a run
    samples the host beside; a missing file, one that is no pid, or a pid that is gone: none. A real
    server (no such field) has none."""
    assert IpmiRig("lab", spec(files)).emulator_pid() is None
    pidfile = files / "qemu.pid"
    rig = IpmiRig("lab", spec(files, emulator_pidfile=str(pidfile)))
    assert rig.emulator_pid() is None                              # not written yet
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        pidfile.write_text(f"{sleeper.pid}\n")
        assert rig.emulator_pid() == sleeper.pid
        elsewhere = files / "elsewhere.pid"                        # the emulator's file: no link followed
        pidfile.rename(elsewhere)
        pidfile.symlink_to(elsewhere)
        assert rig.emulator_pid() is None
        pidfile.unlink()
        elsewhere.rename(pidfile)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert rig.emulator_pid() is None                              # the process is gone
    pidfile.write_text("not a pid\n")
    assert rig.emulator_pid() is None


def test_password_file_mode_owner_and_length(files):
    pw = files / "pw"
    assert IpmiRig("lab", spec(files, bmc={"password_env": None, "password_file": str(pw)})).bmc._password == PW
    pw.chmod(0o640)
    with pytest.raises(UsageError, match=r"\.bmc\.password_file: .*pw has mode 0640, readable by others; "
                                         r"run `chmod 600 .*pw`$"):
        IpmiRig("lab", spec(files, bmc={"password_env": None, "password_file": str(pw)}))
    pw.chmod(0o600)
    pw.write_text("x" * 21 + "\nbmc = 10.0.0.5:623\n")
    with pytest.raises(UsageError, match=r"longer than 20 bytes") as e:
        IpmiRig("lab", spec(files, bmc={"password_env": None, "password_file": str(pw)}))
    assert "x" * 21 not in str(e.value)
    with pytest.raises(UsageError, match=r"password_file: cannot read .*missing"):
        IpmiRig("lab", spec(files, bmc={"password_env": None, "password_file": str(files / "missing")}))


def test_ssh_key_must_be_private(files):
    (files / "key").chmod(0o644)
    with pytest.raises(UsageError, match=r"\.ssh\.key: .*key has mode 0644; ssh refuses .* `chmod 600 "):
        IpmiRig("lab", spec(files))


def test_password_never_in_argv(files):
    r = IpmiRig("lab", spec(files))                   # from the environment: ipmitool -E
    argv = r.bmc.argv("chassis", "power", "status")
    assert PW not in " ".join(argv) and "-E" in argv
    assert r.bmc.env()["IPMI_PASSWORD"] == PW
    assert "-U" in argv and argv[argv.index("-U") + 1] == "krig"
    r = IpmiRig("lab", spec(files, bmc={"password_env": None, "password_file": str(files / "pw")}))
    argv = r.bmc.argv("chassis", "power", "status")   # from the 0600 file: ipmitool -f reads it
    assert PW not in " ".join(argv) and argv[argv.index("-f") + 1] == str(files / "pw") and "-E" not in argv
    assert "IPMI_PASSWORD" not in r.bmc.env()


def test_ssh_argv_strict(files):
    a = Ssh("lab", IpmiRig("lab", spec(files)).spec.ssh).argv("true")
    joined = " ".join(a)
    for opt in ("BatchMode=yes", "StrictHostKeyChecking=yes", f"UserKnownHostsFile={files}/known_hosts",
                "GlobalKnownHostsFile=/dev/null", "UpdateHostKeys=no"):
        assert opt in joined
    assert "StrictHostKeyChecking=no" not in joined
    assert a[-3:] == ["--", "10.0.0.6", "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH; true"]


@pytest.mark.parametrize("words", [["printf", "%s\\n", "plain"], ["printf", "%s|", "a b", "'q'", '"d"', "$(x)", "`y`",
                                                                   "; z", "*", "~", "\\", "", "\n"]])
def test_remote_command_quotes_every_word(words):
    env = {"KRIG_A": "x y $(z) 'w'", "EMPTY": ""}
    cmd = remote_command(words + [], env, cwd="/")
    out = subprocess.run(["sh", "-c", cmd + '; echo', ], capture_output=True, text=True)
    expect = subprocess.run(words, capture_output=True, text=True).stdout
    assert out.stdout.rstrip("\n") == expect.rstrip("\n")
    env_out = subprocess.run(["sh", "-c", remote_command(["sh", "-c", 'printf %s "$KRIG_A"'], env)],
                             capture_output=True, text=True).stdout
    assert env_out == env["KRIG_A"]


def test_remote_command_refuses_bad_env_names():
    with pytest.raises(RigError, match="cannot be passed over SSH"):
        remote_command(["true"], {"A;rm -rf /": "x"})


def test_lock_keeps_a_second_rig_off_the_server(files):
    a, b = IpmiRig("a", spec(files)), IpmiRig("b", spec(files))
    a.server.take_lock()
    try:
        with pytest.raises(RigError, match=r"server 10\.0\.0\.5:623 is in use by another krig process "
                                           rf"\(pid {os.getpid()}, rig a\)"):
            b.server.take_lock()
        b.close()                   # the refused rig touches nothing and releases nothing
        with pytest.raises(RigError):
            b.server.take_lock()
    finally:
        a.close()
    b.server.take_lock()                  # released by close()
    b.close()
    c = IpmiRig("c", spec(files, bmc={"port": 624}))
    c.server.take_lock()                  # another BMC, another server
    c.close()


def test_a_run_waiting_for_a_busy_server_says_so_once(files, monkeypatch, capsys):
    a, b = IpmiRig("a", spec(files)), IpmiRig("b", spec(files))
    a.server.take_lock()
    monkeypatch.setenv("KRIG_LOCK_WAIT", "2")
    try:
        with pytest.raises(RigError, match="in use by another krig process"):
            b.server.take_lock()
    finally:
        b.close()
        a.close()
    err = capsys.readouterr().err.splitlines()
    assert err == [f"krig: rig b: waiting up to 2s for server 10.0.0.5:623 (in use by pid {os.getpid()}, rig a)"]


def test_close_and_off_without_lock_touch_nothing(files, monkeypatch):
    r = IpmiRig("lab", spec(files))
    monkeypatch.setattr(Bmc, "run", lambda *a, **k: pytest.fail("BMC used without the lock"))
    r.power.off()
    r.close()
    r.close()


def test_kexec_command_line(files):
    class K:
        cmdline = ["mitigations=off"]
    r = IpmiRig("lab", spec(files, boot="kexec"))
    assert kexec_args(r, K, ["x=1"], "/r/boot/bzImage", None) == \
        ["kexec", "-l", "/r/boot/bzImage", "--reuse-cmdline", "--append=mitigations=off x=1"]
    r = IpmiRig("lab", spec(files, boot="kexec", kexec={"cmdline": "root=/dev/sda2 ro", "append": ["quiet"]}))
    assert kexec_args(r, K, [], "/r/boot/bzImage", "/r/boot/initrd.img") == \
        ["kexec", "-l", "/r/boot/bzImage", "--initrd=/r/boot/initrd.img",
         "--command-line=root=/dev/sda2 ro mitigations=off quiet"]
    assert kexec_args(r, K, [], "/r/boot/bzImage", None, "kexec_file_load")[:3] == ["kexec", "-s", "/r/boot/bzImage"]


def test_bmc_error_classification(files):
    b = IpmiRig("lab", spec(files)).bmc
    assert b.classify("> RAKP 2 HMAC is invalid\nError: Unable to establish IPMI v2 / RMCP+ session") == "wrong password"
    assert b.classify("RAKP 2 message indicates an error : unauthorized name") == "unknown user"
    assert b.classify("Error in open session response message : invalid authentication algorithm") == \
        "cipher suite not supported by the BMC"
    assert b.classify("Get Auth Capabilities error\nError issuing Get Channel Authentication Capabilities") is None


def test_rig_path_and_example(files, monkeypatch):
    d = files / "rigs"
    d.mkdir()
    (d / "mylab.toml").write_text('driver = "ipmi"\nbogus = 1\n')
    monkeypatch.setenv("KRIG_RIG_PATH", str(d))
    with pytest.raises(UsageError, match=rf"{d}/mylab\.toml: unknown field 'bogus'"):
        load_rig("mylab")
    with pytest.raises(UsageError, match=rf"{d}/mylab\.toml: unknown field 'bogus'"):
        load_rig(str(d / "mylab.toml"))


EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[3] / "rigs" / "examples").glob("*.toml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_shipped_example_loads(files, monkeypatch, example):
    """Each example loads once its files exist here, and every ssh option its comments
    suggest passes the allow-list (a user following the example is not stopped by it)."""
    d = files / "rigs"
    d.mkdir()
    text = example.read_text()
    paths = set(re.findall(r'"(~/[^"]+)"', text))
    for i, p in enumerate(sorted(paths)):
        f = files / f"file{i}"
        f.write_text(PW + "\n")
        f.chmod(0o600)
        text = text.replace(f'"{p}"', f'"{f}"')
    (d / "example.toml").write_text(text)
    monkeypatch.setenv("KRIG_RIG_PATH", str(d))
    for var in re.findall(r'password_env = "([A-Z_]+)"', text):
        monkeypatch.setenv(var, PW)
    r = load_rig("example")
    assert r.kind == ("redfish" if example.name == "redfish-server.toml" else "ipmi")
    assert r.spec.scratch_dev.startswith("/dev/")
    if example.name == "lab-server.toml":
        assert r.spec.lab == {"driver": "ipmi", "scratch": "yes", "model": "r760", "memory_gib": "256",
                                 "scratch_gib": "3276", "cpus": "32", "numa": "2", "rack": "b3"}
    suggested = re.findall(r'#.*?"([A-Za-z]+=[^"]+)"', text)
    assert suggested, "the example suggests no ssh option to check"
    for opt in suggested:
        (d / "opt.toml").write_text(text.replace("options = []", f"options = [{opt!r}]".replace("'", '"')))
        assert load_rig("opt").spec.ssh.options == (opt,)


def test_sudo_for_a_user_other_than_root(files):
    a = Ssh("lab", IpmiRig("lab", spec(files, ssh={"user": "krig"})).spec.ssh).argv("echo 'a b'")
    path = "PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH; "
    assert a[-1] == path + "sudo -n -- sh -c '" + path + "echo '\"'\"'a b'\"'\"''"
    assert subprocess.run(["sh", "-c", a[-1].replace("sudo -n -- ", "")], capture_output=True,
                          text=True).stdout == "a b\n"


def test_kexec_file_load_needs_a_relocatable_kernel(tmp_path):
    class K:
        config = tmp_path / "config"
    K.config.write_text("CONFIG_64BIT=y\n# CONFIG_RELOCATABLE is not set\n")
    assert not relocatable(K)
    K.config.write_text("CONFIG_64BIT=y\nCONFIG_RELOCATABLE=y\n")
    assert relocatable(K)
    K.config = None
    assert relocatable(K)          # a packaged kernel without a config: let the server decide


def test_kexec_syscall_follows_lockdown():
    assert syscall_for("auto", "") == "kexec_load"
    assert syscall_for("auto", "[none] integrity confidentiality") == "kexec_load"
    assert syscall_for("auto", "none [integrity] confidentiality") == "kexec_file_load"
    assert syscall_for("auto", "none integrity [confidentiality]") == "kexec_file_load"
    assert syscall_for("kexec_load", "none [integrity] confidentiality") == "kexec_load"


def test_command_output_is_read_capped(tmp_path, monkeypatch):
    """What a lab server wrote to a command's stdout is read back at most OUTPUT_CAP bytes: more is
    the rig's one-line error, and a hung command's partial output says so instead of reading it."""
    import types
    from krig.errors import RigError
    from rigs.ipmi import rig as ipmi
    monkeypatch.setattr(ipmi, "OUTPUT_CAP", 1000)
    server = types.SimpleNamespace(name="lab1", workdir=tmp_path)
    cmd = ipmi._Command(server)
    (tmp_path / "0.out").write_bytes(b"x" * 1000)
    assert cmd._read(tmp_path / "0.out") == b"x" * 1000
    (tmp_path / "0.err").write_bytes(b"y" * 1001)
    with pytest.raises(RigError, match=r"^rig lab1: the server's stderr of a command: .*1001 bytes, more than the 1000"):
        cmd._read(tmp_path / "0.err")
    (tmp_path / "0.out").unlink()
    (tmp_path / "0.out").symlink_to("/etc/passwd")      # never followed
    cmd.n = 1
    out, err = cmd.partial_output()
    assert out.startswith(b"krig: rig lab1: the server's stdout of a command:") and b"root:" not in out
    assert err.startswith(b"krig: rig lab1: the server's stderr of a command:")
