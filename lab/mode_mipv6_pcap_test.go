package lab

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/pcap"
)

func testPcapHeader(bo binary.ByteOrder, link uint32) []byte {
	h := make([]byte, 24)
	bo.PutUint32(h, 0xa1b2c3d4)
	bo.PutUint16(h[4:], 2)
	bo.PutUint16(h[6:], 4)
	bo.PutUint32(h[16:], 200)
	bo.PutUint32(h[20:], link)
	return h
}

func testPcapRecord(bo binary.ByteOrder, sec uint32, data []byte, orig int) []byte {
	h := make([]byte, 16)
	bo.PutUint32(h, sec)
	bo.PutUint32(h[8:], uint32(len(data)))
	bo.PutUint32(h[12:], uint32(orig))
	return append(h, data...)
}

// ip6 is a fixed IPv6 header followed by payload.
func ip6(src, dst netip.Addr, next uint8, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6], b[7] = next, 64
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, payload...)
}

func sll2(ip []byte, dir byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h, 0x86dd)
	binary.BigEndian.PutUint32(h[4:], 3)
	h[10] = dir
	return append(h, ip...)
}

// A tunnelled datagram at the MN becomes the inner CN -> HoA packet (same stamp, direction
// and link header, lengths 40 bytes shorter); everything else stays byte for byte.
func TestDecapsulatePcap(t *testing.T) {
	ha, cn := netip.MustParseAddr(HomeAgentAddr), Addr(L1, CNNID)
	hoa, coa := HomeAddress(), Addr(L3, MNNID)
	udp := make([]byte, 8+12)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	binary.BigEndian.PutUint32(udp[8+8:], 77) // iperf3 datagram counter
	inner := ip6(cn, hoa, 17, udp)
	for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		plain := sll2(ip6(cn, coa, 17, udp), 0)
		tunnelled := sll2(ip6(ha, coa, 41, inner), 0)
		in := testPcapHeader(bo, 276)
		in = append(in, testPcapRecord(bo, 1, plain, len(plain))...)
		in = append(in, testPcapRecord(bo, 2, tunnelled, len(tunnelled))...)
		in = append(in, testPcapRecord(bo, 3, tunnelled[:70], len(tunnelled))...) // snapped: inner header cut
		out, n, err := DecapsulatePcap(in)
		if err != nil || n != 1 {
			t.Fatalf("%v: %d decapsulated, %v", bo, n, err)
		}
		pkts, err := pcap.ReadAll(bytes.NewReader(out))
		if err != nil || len(pkts) != 3 {
			t.Fatalf("%v: read back %d packets: %v", bo, len(pkts), err)
		}
		if p := pkts[1]; netip.AddrFrom16(p.Src) != cn || netip.AddrFrom16(p.Dst) != hoa || p.Proto != 17 || p.UDPSeq != 77 || p.Time.Unix() != 2 {
			t.Errorf("%v: decapsulated packet %+v", bo, p)
		}
		if netip.AddrFrom16(pkts[0].Dst) != coa || pkts[2].Proto != 41 {
			t.Errorf("%v: untouched packets changed: %+v %+v", bo, pkts[0], pkts[2])
		}
		if want := 24 + 3*16 + len(plain) + len(tunnelled) - 40 + 70; len(out) != want {
			t.Errorf("%v: %d bytes out, want %d", bo, len(out), want)
		}
	}
}

func TestDecapsulatePcapRejects(t *testing.T) {
	good := testPcapHeader(binary.LittleEndian, 276)
	for name, in := range map[string][]byte{
		"empty":      nil,
		"magic":      make([]byte, 24),
		"link type":  testPcapHeader(binary.LittleEndian, 105),
		"record hdr": append(append([]byte(nil), good...), 1, 2, 3),
		"record len": append(append([]byte(nil), good...), testPcapRecord(binary.LittleEndian, 1, make([]byte, 10), 10)[:20]...),
	} {
		if _, _, err := DecapsulatePcap(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecapsulatePcap(f *testing.F) {
	ha, cn, hoa, coa := netip.MustParseAddr(HomeAgentAddr), Addr(L1, CNNID), HomeAddress(), Addr(L3, MNNID)
	tun := sll2(ip6(ha, coa, 41, ip6(cn, hoa, 17, make([]byte, 20))), 0)
	seed := append(testPcapHeader(binary.LittleEndian, 276), testPcapRecord(binary.LittleEndian, 1, tun, len(tun))...)
	f.Add(seed)
	f.Add(append(testPcapHeader(binary.BigEndian, 1), testPcapRecord(binary.BigEndian, 1, make([]byte, 60), 60)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, n, err := DecapsulatePcap(b)
		if err != nil {
			return
		}
		if len(out) != len(b)-40*n {
			t.Fatalf("%d bytes in, %d out, %d decapsulated", len(b), len(out), n)
		}
		if _, m, err := DecapsulatePcap(out); err != nil || m > n {
			t.Fatalf("output not a capture again: %v (%d > %d)", err, m, n)
		}
	})
}

// mipv6-ro's handoff ends with the CN's BAck: the HA's BAck is renamed in the measured copy.
func TestHandoffToCorrespondent(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	var buf bytes.Buffer
	w := timeline.NewWriter(&buf)
	cn := Addr(L1, CNNID).String()
	for i, e := range []timeline.Event{
		{Kind: timeline.BUSent, Peer: HomeAgentAddr},
		{Kind: timeline.BAckReceived, Peer: HomeAgentAddr},
		{Kind: timeline.BUSent, Peer: cn},
		{Kind: timeline.BAckReceived, Peer: cn},
	} {
		e.MonoNS = int64(i+1) * int64(time.Millisecond)
		w.Emit(e)
	}
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := handoffToCorrespondent(in, out, netip.MustParseAddr(HomeAgentAddr)); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(out)
	defer f.Close()
	evs, err := timeline.Read(f)
	if err != nil || len(evs) != 4 {
		t.Fatalf("%d events: %v", len(evs), err)
	}
	if evs[1].Kind != "home_back_received" || evs[3].Kind != timeline.BAckReceived || evs[0].MonoNS != int64(time.Millisecond) {
		t.Errorf("events %+v", evs)
	}
}
