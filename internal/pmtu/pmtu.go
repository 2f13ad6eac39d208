// Package pmtu gives a session view a path MTU below IPv6's 1280-byte minimum when a path
// needs it.
//
// The datapath inserts an 8-byte (or 16-byte) nonce header into every ILNP packet, so a
// session view's packets must stay that much below the wire path's MTU. The kernel learns
// the view's PMTU from the Packet Too Big the datapath translates (bpf/lib/icmperr.h), but it
// takes no PMTU below 1280 (RFC 8200 s.5; Linux ignores smaller ones for TCP and clamps its
// route exceptions to 1280): on a 1280-byte link the view's full-size packets grow to 1288,
// draw the same Packet Too Big again, and a TCP flow stalls for good.
//
// So for such a correspondent the daemon installs a host route to its session-view address
// with a locked MTU of 1280 minus the nonce header (RFC 8201 s.5.2 lets a node hold a PMTU
// per destination): TCP's MSS follows the route (tcp_current_mss re-reads the socket's route
// when it is replaced), and UDP and other datagrams bigger than the route's MTU are
// fragmented by the sending kernel at the session view (RFC 8200 s.4.5); the datapath then
// puts the nonce header into every fragment in front of the Fragment header, which receivers
// must accept in any order (RFC 8200 s.4.1). Only correspondents that met such a path pay
// for it. The route lasts 10 minutes after the last such error, RFC 8201 s.4's
// recommended interval before trying a larger PMTU again.
package pmtu

import (
	"fmt"
	"net/netip"
	"time"
)

// Lifetime is how long a clamp lasts after the last error that asked for it (RFC 8201 s.4).
const Lifetime = 10 * time.Minute

// MinMTU and MaxMTU bound the MTUs a clamp accepts: below IPv6's minimum (else the kernel's
// own PMTU discovery does it) and no smaller than IPv4's 576-byte datagram (RFC 791) less the
// UDP/IPv4 encapsulation and a 16-byte nonce header.
const (
	MinMTU = 576 - 28 - 16
	MaxMTU = 1279
)

type entry struct {
	mtu   int
	until time.Time
}

// Table is the clamps in force, by session-view destination. Pure logic: the caller installs
// and removes the routes it says to. Not safe for concurrent use.
type Table struct {
	m map[netip.Addr]entry
}

// NewTable returns an empty Table.
func NewTable() *Table { return &Table{m: map[netip.Addr]entry{}} }

// Want records that dst's view needs at most mtu bytes at now and reports whether the route
// must be (re)installed with that MTU: a new destination or a smaller MTU. A repeated error
// only extends the clamp's life. An MTU outside [MinMTU, MaxMTU] is an error.
func (t *Table) Want(dst netip.Addr, mtu int, now time.Time) (bool, error) {
	if mtu < MinMTU || mtu > MaxMTU {
		return false, fmt.Errorf("pmtu: %s: MTU %d outside %d-%d", dst, mtu, MinMTU, MaxMTU)
	}
	if !dst.Is6() || dst.Is4In6() {
		return false, fmt.Errorf("pmtu: %s is not an IPv6 address", dst)
	}
	e, ok := t.m[dst]
	install := !ok || mtu < e.mtu
	if ok && mtu > e.mtu {
		mtu = e.mtu
	}
	t.m[dst] = entry{mtu: mtu, until: now.Add(Lifetime)}
	return install, nil
}

// MTU is the clamp in force for dst, 0 when none.
func (t *Table) MTU(dst netip.Addr) int { return t.m[dst].mtu }

// Expire forgets and returns the destinations whose clamps ran out at now.
func (t *Table) Expire(now time.Time) []netip.Addr {
	var out []netip.Addr
	for dst, e := range t.m {
		if !now.Before(e.until) {
			out = append(out, dst)
			delete(t.m, dst)
		}
	}
	return out
}

// All forgets and returns every destination (shutdown).
func (t *Table) All() []netip.Addr {
	out := make([]netip.Addr, 0, len(t.m))
	for dst := range t.m {
		out = append(out, dst)
	}
	clear(t.m)
	return out
}
