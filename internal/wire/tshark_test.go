package wire_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/pcapfile"
	"ilnp/internal/wire"
)

// TestTsharkDecodesOurPackets has Wireshark's dissectors, an implementation
// independent of ours, decode packets built by this package's encoders.
func TestTsharkDecodesOurPackets(t *testing.T) {
	nstest.RequireTool(t, "tshark")
	mn := wire.ILV{Locator: 0x2001_0db8_0002_0000, NID: 0x021b_21ff_fe67_97a8}
	cn := wire.ILV{Locator: 0x2001_0db8_0001_0000, NID: 0x0014_4fff_ff20_ee64}
	n4, err := wire.NonceFromBytes([]byte{0xde, 0xad, 0xbe, 0xef})
	if err != nil {
		t.Fatal(err)
	}
	n12, err := wire.NonceFromBytes([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	if err != nil {
		t.Fatal(err)
	}
	lu := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{
		{Locator: 0x2001_0db8_0003_0000, Preference: 10, Lifetime: 300},
		{Locator: 0x2001_0db8_0002_0000, Preference: 20, Lifetime: 60},
	}}
	adv, err := lu.Marshal(mn.Addr(), cn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ack, err := lu.Ack().Marshal(cn.Addr(), mn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	// A deliberately broken checksum proves tshark really checks it.
	bad := append([]byte(nil), adv...)
	bad[2] ^= 0x55

	pkts := [][]byte{
		wire.AppendILNPPacket(nil, mn, cn, n4, wire.ProtoUDP, wire.AppendUDP(nil, mn.Addr(), cn.Addr(), 40000, 33333, []byte("ilnp over udp"))),
		wire.AppendILNPPacket(nil, mn, cn, n12, wire.ProtoICMPv6, adv),
		wire.AppendILNPPacket(nil, cn, mn, n12, wire.ProtoICMPv6, ack),
		wire.AppendILNPPacket(nil, mn, cn, n12, wire.ProtoUDP, wire.AppendUDP(nil, mn.Addr(), cn.Addr(), 40001, 33333, []byte("odd"))),
		wire.AppendILNPPacket(nil, mn, cn, n12, wire.ProtoICMPv6, bad),
	}
	file := filepath.Join(t.TempDir(), "ilnp.pcap")
	if err := os.WriteFile(file, pcapfile.Bytes(pcapfile.LinkIPv6, time.Second, pkts...), 0o644); err != nil {
		t.Fatal(err)
	}

	fields := []string{
		"frame.number", "ipv6.src", "ipv6.dst", "ipv6.opt.ilnp_nonce",
		"udp.checksum.status", "icmpv6.type", "icmpv6.code", "icmpv6.checksum.status",
		"icmpv6.ilnp.nb_locs", "icmpv6.ilnp.nb_locator", "icmpv6.ilnp.nb_preference",
		"icmpv6.ilnp.nb_lifetime", "_ws.malformed", "_ws.expert.severity",
	}
	args := []string{"-r", file, "-o", "udp.check_checksum:TRUE", "-T", "fields",
		"-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=;"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", args, err, out)
	}
	t.Logf("tshark fields:\n%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark decoded %d packets, want %d", len(lines), len(pkts))
	}
	const good, wrong = "1", "0" // Wireshark proto_checksum_enum_e: 0 bad, 1 good, 2 unverified
	mnA, cnA := mn.Addr().String(), cn.Addr().String()
	want := []map[string]string{
		{"ipv6.src": mnA, "ipv6.dst": cnA, "ipv6.opt.ilnp_nonce": "deadbeef", "udp.checksum.status": good,
			"icmpv6.type": "", "_ws.malformed": "", "_ws.expert.severity": ""},
		{"ipv6.src": mnA, "ipv6.dst": cnA, "ipv6.opt.ilnp_nonce": "0102030405060708090a0b0c",
			"icmpv6.type": "156", "icmpv6.code": "0", "icmpv6.checksum.status": good,
			"icmpv6.ilnp.nb_locs": "2", "icmpv6.ilnp.nb_locator": "0x20010db800030000;0x20010db800020000",
			"icmpv6.ilnp.nb_preference": "10;20", "icmpv6.ilnp.nb_lifetime": "300;60",
			"_ws.malformed": "", "_ws.expert.severity": ""},
		{"ipv6.src": cnA, "ipv6.dst": mnA, "ipv6.opt.ilnp_nonce": "0102030405060708090a0b0c",
			"icmpv6.type": "156", "icmpv6.code": "0", "icmpv6.checksum.status": good,
			"icmpv6.ilnp.nb_locs": "2", "icmpv6.ilnp.nb_locator": "0x20010db800030000;0x20010db800020000",
			"icmpv6.ilnp.nb_preference": "10;20", "icmpv6.ilnp.nb_lifetime": "300;60",
			"_ws.malformed": "", "_ws.expert.severity": ""},
		{"ipv6.opt.ilnp_nonce": "0102030405060708090a0b0c", "udp.checksum.status": good, "_ws.malformed": ""},
		{"icmpv6.type": "156", "icmpv6.checksum.status": wrong},
	}
	for i, line := range lines {
		got := strings.Split(line, "|")
		if len(got) != len(fields) {
			t.Fatalf("packet %d: %d fields, want %d: %q", i+1, len(got), len(fields), line)
		}
		for j, f := range fields {
			if w, ok := want[i][f]; ok && got[j] != w {
				t.Errorf("packet %d: %s = %q, want %q", i+1, f, got[j], w)
			}
		}
	}

	// The verbose decode must not flag anything in the good packets, and shows
	// where Wireshark 4.0 looks for the Operation: it labels byte 5 "Reserved"
	// (the layout Erratum 5911 proposes), so it must read 01 and 02.
	verbose, err := exec.Command("tshark", "-r", file, "-o", "udp.check_checksum:TRUE", "-V").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	frames := strings.Split(string(verbose), "\nFrame ")
	if len(frames) != len(pkts) {
		t.Fatalf("tshark -V shows %d frames, want %d", len(frames), len(pkts))
	}
	for i, f := range frames[:4] {
		for _, bad := range []string{"Malformed", "incorrect", "Bad"} {
			if strings.Contains(f, bad) {
				t.Errorf("tshark -V frame %d contains %q:\n%s", i+1, bad, f)
			}
		}
	}
	for i, s := range map[int]string{0: "ILNP Nonce: deadbeef", 1: "Reserved: 01", 2: "Reserved: 02", 3: "Checksum Status: Good"} {
		if !strings.Contains(frames[i], s) {
			t.Errorf("tshark -V frame %d lacks %q:\n%s", i+1, s, frames[i])
		}
	}
	if !strings.Contains(frames[4], "incorrect") {
		t.Errorf("tshark -V frame 5 (broken checksum) is not flagged incorrect:\n%s", frames[4])
	}
}
