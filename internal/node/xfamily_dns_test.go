package node

import (
	"net/netip"
	"testing"

	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// Which IPv4 locators the DNS rendezvous publishes as L32 records.
func TestL32InDNS(t *testing.T) {
	for _, c := range []struct {
		ep   string
		want bool
	}{
		{"198.51.100.2:49191", true},
		{"192.0.2.2:49191", true},
		{"203.0.113.9:49191", true},
		{"198.51.100.2:4500", false}, // not the default port: an L32 record has no port
		{"10.0.0.2:49191", false},    // RFC 1918, behind a NAT
		{"172.16.5.1:49191", false},
		{"192.168.1.20:49191", false},
		{"100.64.0.1:49191", false}, // RFC 6598, behind a carrier-grade NAT
		{"100.127.255.254:49191", false},
		{"100.128.0.1:49191", true},  // just outside 100.64.0.0/10
		{"169.254.3.4:49191", false}, // link-local
		{"127.0.0.1:49191", false},
	} {
		l, err := encap.L32(netip.MustParseAddrPort(c.ep))
		if err != nil {
			t.Fatal(err)
		}
		if got := l32InDNS(l); got != c.want {
			t.Errorf("l32InDNS(%s) = %v, want %v", c.ep, got, c.want)
		}
	}
	if l32InDNS(wire.L64(0x2001_0db8_0002_0000)) {
		t.Error("an IPv6 locator is no L32 record")
	}
}
