package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestLocatorUpdateRoundTripSmoke(t *testing.T) {
	src := netip.MustParseAddr("2001:db8:1::214:4fff:ff20:ee64")
	dst := netip.MustParseAddr("2001:db8:2::1")
	lu := LocatorUpdate{Op: OpAdvertisement, Locators: []LocatorEntry{{Locator: 0x20010db800010000, Preference: 10, Lifetime: 300}}}
	msg, err := lu.Marshal(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg) != 20 || PseudoHeaderChecksum(src, dst, ProtoICMPv6, msg) != 0 {
		t.Fatalf("msg % x", msg)
	}
	got, err := ParseLocatorUpdate(msg, src, dst, LUParseOptions{})
	if err != nil || got.Op != OpAdvertisement || len(got.Locators) != 1 || got.Locators[0] != lu.Locators[0] {
		t.Fatalf("got %+v, %v", got, err)
	}
	n, _ := NonceFromBytes([]byte{1, 2, 3, 4})
	h := AppendNonceHeader(nil, ProtoUDP, n)
	if !bytes.Equal(h, []byte{17, 0, 0x8b, 4, 1, 2, 3, 4}) {
		t.Fatalf("% x", h)
	}
	d, err := ParseDestOpts(h)
	if err != nil || !d.HasNonce || d.Nonce != n || d.Length != 8 {
		t.Fatalf("%+v %v", d, err)
	}
}
