package analysis_test

import (
	"net/netip"
	"testing"

	"ilnp/internal/wire"
	"ilnp/lab/analysis"
)

// TestLUWireMatchesEncoder builds LUs and LU-ACKs with the product's own
// encoders and checks that the size the overhead model assumes for "our"
// LU is what actually goes on the wire at the IP layer.
func TestLUWireMatchesEncoder(t *testing.T) {
	src := netip.MustParseAddr("2001:db8:1::1")
	dst := netip.MustParseAddr("2001:db8:2::2")
	for _, nonceLen := range []int{4, 12} {
		for locs := 1; locs <= 3; locs++ {
			nonce, err := wire.RandomNonce(nonceLen)
			if err != nil {
				t.Fatal(err)
			}
			lu := wire.LocatorUpdate{Op: wire.OpAdvertisement}
			for i := range locs {
				lu.Locators = append(lu.Locators, wire.LocatorEntry{Locator: wire.L64(0x20010db800010000 + uint64(i)), Preference: 10, Lifetime: 600})
			}
			for _, m := range []wire.LocatorUpdate{lu, lu.Ack()} {
				icmp, err := m.Marshal(src, dst)
				if err != nil {
					t.Fatal(err)
				}
				onWire := wire.IPv6HeaderLen + len(wire.AppendNonceHeader(nil, wire.ProtoICMPv6, nonce)) + len(icmp)
				w := analysis.DefaultLUWire()
				w.NonceLen, w.Locators = nonceLen, locs
				if w.Size() != onWire {
					t.Errorf("nonce %d, %d locator(s), %v: model %d bytes, encoder %d", nonceLen, locs, m.Op, w.Size(), onWire)
				}
			}
		}
	}
}
