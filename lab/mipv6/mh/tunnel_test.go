package mh

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestTunnel(t *testing.T) {
	inner, err := AppendMessage(nil, Envelope{Src: hoa, Dst: cn}, &HomeTestInit{Cookie: cookie(5)})
	if err != nil {
		t.Fatal(err)
	}
	inner[1] = 0xb8 // traffic class 0x0b, flow label 0x80000 high bits: copied to the outer header
	pkt, err := AppendTunnel(nil, coa, ha, inner)
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, "60b80000 0038 29 40 20010db800030000001b21fffe6797a8 20010db8000200000000000000000001")
	if !bytes.Equal(pkt[:40], want) {
		t.Fatalf("outer header\n got %x\nwant %x", pkt[:40], want)
	}
	outer, in, err := ParseTunnel(pkt)
	if err != nil || outer.Src != coa || outer.Dst != ha || !bytes.Equal(in, inner) {
		t.Fatalf("ParseTunnel: %+v %v", outer, err)
	}
	if _, m, err := ParseMessage(in); err != nil || m.Type() != TypeHomeTestInit {
		t.Fatalf("inner: %v", err)
	}
	bad := []struct {
		name string
		in   []byte
		want error
	}{
		{"short", pkt[:39], ErrTruncated},
		{"not 41", inner, ErrHeader},
		{"outer length beyond bytes", pkt[:len(pkt)-1], ErrTruncated},
		{"trailing", append(append([]byte(nil), pkt...), 0), ErrLength},
		{"inner header cut", func() []byte { p, _ := AppendTunnel(nil, coa, ha, inner); p[5] = 30; return p[:70] }(), ErrTruncated},
		{"inner length wrong", func() []byte { p, _ := AppendTunnel(nil, coa, ha, inner); p[45]--; return p }(), ErrLength},
	}
	for _, tc := range bad {
		if _, _, err := ParseTunnel(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := AppendTunnel(nil, coa, ha, []byte{1, 2}); !errors.Is(err, ErrInvalid) {
		t.Errorf("junk inner: %v", err)
	}
	if _, err := AppendTunnel(nil, coa, ff02(), inner); !errors.Is(err, ErrBadAddress) {
		t.Errorf("multicast tunnel end: %v", err)
	}
}

func FuzzParseTunnel(f *testing.F) {
	inner, _ := AppendMessage(nil, Envelope{Src: hoa, Dst: cn}, &HomeTestInit{})
	p, _ := AppendTunnel(nil, coa, ha, inner)
	f.Add(p)
	f.Fuzz(func(t *testing.T, b []byte) {
		outer, in, err := ParseTunnel(b)
		if err != nil {
			return
		}
		again, err := AppendTunnel(nil, outer.Src, outer.Dst, in)
		if err != nil {
			return // e.g. a multicast outer address: parsed, but we never build one
		}
		if _, in2, err := ParseTunnel(again); err != nil || !bytes.Equal(in2, in) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func ff02() netip.Addr { return netip.MustParseAddr("ff02::1") }
