package mh

import (
	"encoding/binary"
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

// udpPacket is a UDP datagram in env with its checksum over the MIPv6 pseudo-header.
func udpPacket(t *testing.T, env Envelope, data string) []byte {
	t.Helper()
	u := binary.BigEndian.AppendUint16(nil, 40000)
	u = binary.BigEndian.AppendUint16(u, 5001)
	u = binary.BigEndian.AppendUint16(u, uint16(8+len(data)))
	u = append(append(u, 0, 0), data...)
	c := wire.PseudoHeaderChecksum(env.PseudoSrc(), env.PseudoDst(), wire.ProtoUDP, u)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	p, err := AppendPacket(nil, env, wire.ProtoUDP, u)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTsharkDecodesOurPackets has Wireshark's mip6 and ipv6 dissectors, an implementation
// independent of ours, decode every message type and both MIPv6 extension headers as our
// encoders build them.
func TestTsharkDecodesOurPackets(t *testing.T) {
	nstest.RequireTool(t, "tshark")
	var auth [12]byte
	copy(auth[:], "0123456789ab")
	type pkt struct {
		env Envelope
		m   Message
	}
	msgs := []pkt{
		{Envelope{Src: coa, Dst: ha, HomeAddress: hoa}, &BindingUpdate{Seq: 4660, Ack: true, Home: true, Lifetime: 105}},
		{Envelope{Src: ha, Dst: coa, RoutingHome: hoa}, &BindingAck{Status: StatusAccepted, Seq: 4660, Lifetime: 100, Options: []Option{RefreshAdvice{Interval: 75}}}},
		{Envelope{Src: hoa, Dst: cn}, &HomeTestInit{Cookie: cookie(0x0102030405060708)}},
		{Envelope{Src: cn, Dst: hoa}, &HomeTest{NonceIndex: 513, Cookie: cookie(0x0102030405060708), Token: token(0xf1f2f3f4f5f6f7f8)}},
		{Envelope{Src: coa, Dst: cn}, &CareOfTestInit{Cookie: cookie(0x1112131415161718)}},
		{Envelope{Src: cn, Dst: coa}, &CareOfTest{NonceIndex: 514, Cookie: cookie(0x1112131415161718), Token: token(0xe1e2e3e4e5e6e7e8)}},
		{Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, &BindingUpdate{Seq: 7, Ack: true, Lifetime: 105, Options: []Option{NonceIndices{Home: 513, CareOf: 514}, AuthData{auth}}}},
		{Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, &BindingAck{Status: StatusExpiredNonces, Seq: 7, Options: []Option{AuthData{auth}}}},
		{Envelope{Src: cn, Dst: coa}, &BindingError{Status: ErrorStatusUnknownHAO, HomeAddress: hoa}},
		{Envelope{Src: cn, Dst: hoa}, &BindingRefreshRequest{}},
	}
	var pkts [][]byte
	for _, p := range msgs {
		b, err := AppendMessage(nil, p.env, p.m)
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, b)
	}
	// Route-optimised data: MN -> CN with the Home Address option, CN -> MN with the type 2
	// routing header. The UDP checksums use the home address (s.11.3.1, RFC 8200 s.8.1).
	pkts = append(pkts, udpPacket(t, Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, "mn to cn"),
		udpPacket(t, Envelope{Src: cn, Dst: coa, RoutingHome: hoa}, "cn to mn"))
	// The same datagram with its checksum over the care-of address: tshark must call it bad,
	// which shows its check applies the home-address rule and can fail.
	wrong := udpPacket(t, Envelope{Src: coa, Dst: cn}, "mn to cn")
	right := udpPacket(t, Envelope{Src: coa, Dst: cn, HomeAddress: hoa}, "mn to cn")
	wrong = append(right[:len(right)-len(wrong)+40:len(right)-len(wrong)+40], wrong[40:]...)
	pkts = append(pkts, wrong)

	file := filepath.Join(t.TempDir(), "mipv6.pcap")
	if err := os.WriteFile(file, pcapfile.Bytes(pcapfile.LinkRaw, time.Second, pkts...), 0o644); err != nil {
		t.Fatal(err)
	}
	fields := []string{
		"ipv6.src", "ipv6.dst", "ipv6.opt.mipv6.home_address", "ipv6.routing.type", "ipv6.routing.segleft",
		"ipv6.routing.mipv6.home_address", "mip6.proto", "mip6.hlen", "mip6.mhtype", "mip6.csum",
		"mip6.bu.seqnr", "mip6.bu.a_flag", "mip6.bu.h_flag", "mip6.bu.l_flag", "mip6.bu.lifetime",
		"mip6.ba.status", "mip6.ba.seqnr", "mip6.ba.lifetime", "mip6.bra.interval",
		"mip6.hoti.cookie", "mip6.coti.cookie", "mip6.hot.nindex", "mip6.hot.cookie", "mip6.hot.token",
		"mip6.cot.nindex", "mip6.cot.cookie", "mip6.ni.hni", "mip6.ni.cni", "mip6.bad.auth",
		"mip6.be.status", "mip6.be.haddr", "udp.checksum.status", "_ws.malformed", "_ws.expert.severity",
	}
	args := []string{"-r", file, "-o", "udp.check_checksum:TRUE", "-T", "fields", "-E", "separator=|",
		"-E", "occurrence=a", "-E", "aggregator=;"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	t.Logf("tshark fields:\n%s", out)
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(pkts) {
		t.Fatalf("tshark printed %d lines for %d packets", len(lines), len(pkts))
	}
	rows := make([]map[string]string, len(lines))
	for i, l := range lines {
		vals := strings.Split(l, "|")
		if len(vals) != len(fields) {
			t.Fatalf("line %d has %d fields: %q", i+1, len(vals), l)
		}
		rows[i] = map[string]string{}
		for j, f := range fields {
			rows[i][f] = vals[j]
		}
		if rows[i]["_ws.malformed"] != "" {
			t.Errorf("packet %d malformed for tshark: %q", i+1, l)
		}
	}
	// The checksum tshark reads is the one an independent computation over the right
	// pseudo-header gives (tshark 4.0 does not verify MH checksums itself).
	for i, p := range msgs {
		body := pkts[i][len(pkts[i])-mhLen(t, pkts[i]):]
		want := refChecksum(p.env.PseudoSrc(), p.env.PseudoDst(), body)
		if got := rows[i]["mip6.csum"]; got != hex16(want) {
			t.Errorf("packet %d: tshark checksum %s, independent %s", i+1, got, hex16(want))
		}
	}
	expect := []map[string]string{
		{"mip6.mhtype": "5", "mip6.proto": "59", "mip6.hlen": "1", "ipv6.opt.mipv6.home_address": hoa.String(),
			"mip6.bu.seqnr": "4660", "mip6.bu.a_flag": "1", "mip6.bu.h_flag": "1", "mip6.bu.l_flag": "0", "mip6.bu.lifetime": "105"},
		{"mip6.mhtype": "6", "ipv6.routing.type": "2", "ipv6.routing.segleft": "1", "ipv6.routing.mipv6.home_address": hoa.String(),
			"mip6.ba.status": "0", "mip6.ba.seqnr": "4660", "mip6.ba.lifetime": "100", "mip6.bra.interval": "75"},
		{"mip6.mhtype": "1", "mip6.hoti.cookie": "0x0102030405060708", "ipv6.src": hoa.String()},
		{"mip6.mhtype": "3", "mip6.hot.nindex": "513", "mip6.hot.cookie": "0x0102030405060708", "mip6.hot.token": "0xf1f2f3f4f5f6f7f8"},
		{"mip6.mhtype": "2", "mip6.coti.cookie": "0x1112131415161718", "ipv6.src": coa.String()},
		// Wireshark 4.0 files the care-of keygen token under mip6.hot.token.
		{"mip6.mhtype": "4", "mip6.cot.nindex": "514", "mip6.cot.cookie": "0x1112131415161718", "mip6.hot.token": "0xe1e2e3e4e5e6e7e8"},
		{"mip6.mhtype": "5", "mip6.hlen": "3", "mip6.bu.seqnr": "7", "mip6.bu.h_flag": "0", "mip6.ni.hni": "513", "mip6.ni.cni": "514",
			"mip6.bad.auth": "303132333435363738396162", "ipv6.opt.mipv6.home_address": hoa.String()},
		{"mip6.mhtype": "6", "mip6.ba.status": "138", "mip6.ba.seqnr": "7", "mip6.bad.auth": "303132333435363738396162",
			"ipv6.routing.mipv6.home_address": hoa.String()},
		{"mip6.mhtype": "7", "mip6.be.status": "1", "mip6.be.haddr": hoa.String()},
		{"mip6.mhtype": "0", "mip6.hlen": "0"},
		{"ipv6.opt.mipv6.home_address": hoa.String(), "udp.checksum.status": "1", "mip6.mhtype": ""},
		{"ipv6.routing.mipv6.home_address": hoa.String(), "ipv6.routing.segleft": "1", "udp.checksum.status": "1"},
		{"ipv6.opt.mipv6.home_address": hoa.String(), "udp.checksum.status": "0"},
	}
	for i, want := range expect {
		for f, v := range want {
			if got := rows[i][f]; got != v {
				t.Errorf("packet %d: %s = %q, want %q", i+1, f, got, v)
			}
		}
	}
}

// mhLen returns the Mobility Header's length from its Header Len, found from the end-free
// parse of the packet.
func mhLen(t *testing.T, pkt []byte) int {
	t.Helper()
	p, err := ParsePacket(pkt)
	if err != nil {
		t.Fatal(err)
	}
	return len(p.Payload)
}

func hex16(v uint16) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[v>>12], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}
