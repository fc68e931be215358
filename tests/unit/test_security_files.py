"""Issue 28, files and parsers: each finding an ordinary user could exploit, held by a test that fails
on the code before its fix (see docs/SECURITY.md, "Threat model: files and parsers")."""

from __future__ import annotations

from gpuperf.checks import xid

T0 = 1000.0


# --- #1: XIDs only from the driver's own kernel records -----------------------------------------------

def test_a_segfaulting_program_named_like_an_xid_is_not_an_xid():
    # the kernel's segfault line quotes the program's comm (cut at 15 chars) and its file's name
    name = "NVRM: Xid (PCI:0000:9a:00): 79, pid=1, GPU has fallen off the bus."
    seg = (f"6,812,5000000,-;NVRM: Xid (PCI[4242]: segfault at 0 ip 0000 sp 0000 error 4 in {name}"
           "[55d0+1000] likely on CPU 3 (core 3, socket 0)")
    assert xid.parse_kmsg_record(seg, T0) is None
    # the same text quoted anywhere but at the message's start
    assert xid.parse_kmsg_record(f"4,813,5000000,-;python[77]: {name}", T0) is None
    # facility user (a syslog daemon or root's logger writing user text into the kernel log)
    assert xid.parse_kmsg_record(f"11,814,5000000,-;{name}", T0) is None   # 11 = user.err
    assert xid.parse_kmsg_record(f"14,815,5000000,-;{name}", T0) is None   # 14 = user.info
    # the driver's own record still counts
    assert xid.parse_kmsg_record(f"4,816,5000000,-;{name}", T0) == xid.XidEvent("0000:9a:00", 79, 1005.0)


def test_a_user_record_in_the_kernel_log_file_drains_nothing(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("12,1,10,-;NVRM: Xid (PCI:0000:9a:00): 79, pid=1, x\n"
                   "6,2,11,-;bash[9]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:9a:00): 79, x[1+2]\n"
                   "3,3,12,-;NVRM: Xid (PCI:0000:1b:00): 48, pid=7, DBE\n")
    assert [(e.bus, e.xid) for e in xid.read_kmsg(str(log))] == [("0000:1b:00", 48)]
