"""Kernel-log XID parsing and PCI bus id mapping (the fallback when event sets fail)."""

from __future__ import annotations

import pytest

from watchdog.sources.nvml.xid import KmsgReader, bus_key, parse_xid_line

LINES = [
    # /dev/kmsg record: priority,seq,usec,flags;message
    ("4,1520,81234567890,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, "
     "GPU has fallen off the bus.", ((0, 0x3B, 0), 79, "pid=2231, name=python, GPU has fallen "
                                     "off the bus.")),
    # dmesg -T style with timestamp prefix
    ("[Tue Mar  5 10:12:01 2024] NVRM: Xid (PCI:0000:b1:00): 48, pid=91210, name=pt_main_thread,"
     " An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
     "partition 5, subpartition 0.", ((0, 0xB1, 0), 48, None)),
    # older driver without pid, with function number
    ("[ 3212.778899] NVRM: Xid (PCI:0000:01:00.0): 13, Graphics SM Warp Exception on "
     "(GPC 0, TPC 0, SM 0): Out Of Range Address", ((0, 1, 0), 13, None)),
    # journalctl -k line, pid unknown
    ("Mar 05 10:12:01 node17 kernel: NVRM: Xid (PCI:0000:18:00): 94, pid='<unknown>', "
     "name=<unknown>, Contained: CE User Channel (0x9). RST: No, D-RST: No",
     ((0, 0x18, 0), 94, None)),
]


@pytest.mark.parametrize(("line", "expected"), LINES)
def test_parse_real_looking_lines(line, expected):
    key, code, message = parse_xid_line(line)
    assert (key, code) == expected[:2]
    if expected[2] is not None:
        assert message == expected[2]
    else:
        assert message


@pytest.mark.parametrize("line", [
    "NVRM: GPU at PCI:0000:3b:00: GPU-4f1c0000-8a0e-5d2b-9c33-1a2b3c4d5e00",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
    "usb 1-1: new high-speed USB device number 2",
    "NVRM: Xid (PCI:0000:zz:00): 79, nope",
    "",
])
def test_non_xid_lines_are_ignored(line):
    assert parse_xid_line(line) is None


def test_bus_ids_from_kernel_and_nvml_agree():
    assert bus_key("0000:3b:00") == bus_key("00000000:3B:00.0") == (0, 0x3B, 0)
    assert bus_key("0001:3b:00") != bus_key("00000000:3B:00.0")
    assert bus_key("3b:00.0") == (0, 0x3B, 0)
    assert bus_key("garbage") is None and bus_key(None) is None


def test_kmsg_reader_only_returns_new_complete_lines(tmp_path):
    p = tmp_path / "kmsg"
    p.write_text("old line\n")
    r = KmsgReader(str(p))
    assert r.available and r.lines() == []
    with p.open("a") as f:
        f.write("first\nsecond part")
    assert r.lines() == ["first"]
    with p.open("a") as f:
        f.write(" done\n")
    assert r.lines() == ["second part done"]
    r.close()


def test_kmsg_reader_unreadable_is_unavailable(tmp_path):
    r = KmsgReader(str(tmp_path / "missing"))
    assert not r.available and r.lines() == []
