package wire

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

func TestIPv6Header(t *testing.T) {
	h := IPv6Header{
		TrafficClass: 0xb8, FlowLabel: 0xabcde, PayloadLen: 0x0123, NextHeader: ProtoDestOpts, HopLimit: 64,
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
	}
	want := []byte{
		0x6b, 0x8a, 0xbc, 0xde, 0x01, 0x23, 60, 64,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
	}
	got := h.Append(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("Append = % x\nwant     % x", got, want)
	}
	back, err := ParseIPv6Header(append(got, 0xff))
	if err != nil || back != h {
		t.Fatalf("ParseIPv6Header = %+v, %v; want %+v", back, err, h)
	}
	// Out-of-range flow label bits and invalid addresses are not written.
	odd := IPv6Header{FlowLabel: 0xfff00001}
	if got := odd.Append(nil); !bytes.Equal(got[:4], []byte{0x60, 0, 0, 1}) || !bytes.Equal(got[8:], make([]byte, 32)) {
		t.Errorf("odd header = % x", got)
	}
	for _, tc := range []struct {
		in      []byte
		wantErr string
	}{
		{nil, "0 bytes, want 40"},
		{want[:39], "39 bytes, want 40"},
		{append([]byte{0x45}, want[1:]...), "version 4, want 6"},
		{append([]byte{0x00}, want[1:]...), "version 0, want 6"},
	} {
		if h, err := ParseIPv6Header(tc.in); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseIPv6Header(% x) = %+v, %v; want %q", tc.in, h, err, tc.wantErr)
		}
	}
}

func FuzzParseIPv6Header(f *testing.F) {
	f.Add(IPv6Header{NextHeader: 17, HopLimit: 1, Src: netip.IPv6Loopback(), Dst: netip.IPv6Loopback()}.Append(nil))
	f.Add(make([]byte, 40))
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseIPv6Header(b)
		if err != nil {
			return
		}
		if out := h.Append(nil); !bytes.Equal(out, b[:IPv6HeaderLen]) {
			t.Fatalf("% x -> %+v -> % x", b[:IPv6HeaderLen], h, out)
		}
	})
}
