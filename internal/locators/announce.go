package locators

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/ndp"
)

// A locator address that forms is announced with one unsolicited Neighbor Advertisement to
// all-nodes (RFC 4861 s.7.2.6). Why: a host that returns to a link it left seconds ago finds
// its router still resolving the address, because the correspondents kept sending there
// until they heard of the move. The router's entry is INCOMPLETE, its packets queue, and its
// next Neighbor Solicitation comes only when the retransmission timer fires (RetransTimer,
// 1 s by default, for MAX_MULTICAST_SOLICIT = 3 tries), so the packets sent on the Locator
// Update waited 0-1 s at the router, whatever the correspondents did (measured: issue 14,
// break-before-make IPv4 -> IPv6, 472 ms median). An INCOMPLETE (or FAILED) entry takes the
// link-layer address from any advertisement (RFC 4861 s.7.2.5) and sends its queue at once.
//
// Override is clear for an optimistic address (RFC 4429 s.3.3: the Optimistic Node MAY send
// an unsolicited NA, with O=0, so a valid entry of a rightful owner of a duplicate address is
// not overwritten); set for an address without DAD, as RFC 4861 s.7.2.6 suggests. One
// advertisement, not the up to three the RFC allows: if it is lost the router's own
// resolution still works, only later.

// allNodes is the unsolicited NA's destination (RFC 4861 s.7.2.6).
var allNodes = netip.MustParseAddr("ff02::1")

// unsolicitedNA is the advertisement for target with the interface's link-layer address.
func unsolicitedNA(target netip.Addr, mac net.HardwareAddr, optimistic bool) *ndp.NeighborAdvertisement {
	na := &ndp.NeighborAdvertisement{Override: !optimistic, TargetAddress: target}
	if len(mac) > 0 {
		na.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}}
	}
	return na
}

// announce sends the unsolicited NA for addr out of interface idx. Like sendRS it uses a
// short-lived socket of its own, scoped to the interface; the kernel picks the source (the
// link-local address, or the new address itself while the link-local is tentative).
func (d *discovery) announce(idx int, name string, addr netip.Addr, optimistic bool) error {
	link, err := d.nl.LinkByIndex(idx)
	if err != nil {
		return fmt.Errorf("interface %s: %w", name, err)
	}
	na := unsolicitedNA(addr, link.Attrs().HardwareAddr, optimistic)
	return d.inNS(func() error {
		c, _, err := ndp.Listen(&net.Interface{Index: idx, Name: name, MTU: 1280}, ndp.Unspecified)
		if err != nil {
			return fmt.Errorf("neighbour advertisement socket on %s: %w", name, err)
		}
		defer c.Close()
		if err := c.WriteTo(na, nil, allNodes); err != nil {
			return fmt.Errorf("neighbour advertisement for %s on %s: %w", addr, name, err)
		}
		return nil
	})
}
