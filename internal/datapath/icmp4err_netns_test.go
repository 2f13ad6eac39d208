package datapath

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// TestNetnsPathMTUIPv4: B on its IPv4 locator behind R's NAT, A's session to it encapsulated
// (ILNPv6 in UDP/IPv4, DF set). R's link to B carries 1400 bytes, so R answers A's full-size
// packets with ICMPv4 Fragmentation Needed (next-hop MTU 1400, RFC 1191) quoting the outer
// IPv4 and UDP headers and A's ILNPv6 packet with its nonce. A's ingress turns it into the
// Packet Too Big the session view would have drawn, 1400 - 28 - 8 = 1364, and a TCP stream
// A -> B carries on at that size; at 1300 the view would need 1264 and gets 1280 and the
// below-minimum count. A forged one quoting the session with a wrong nonce changes nothing.
func TestNetnsPathMTUIPv4(t *testing.T) {
	nstest.RequireTool(t, "nft", "ethtool")
	nstest.RequireRoot(t)
	et := newEncapTopo(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startBulk(ctx, t, et.a, et.b, netip.AddrPortFrom(et.viewB, 5001))
	waitAdvance(t, 6*time.Second, 1<<20, "the stream on IPv6", map[string]*bulk{"A->B": s})
	et.toIPv4(t)
	waitFor(t, 5*time.Second, func() bool { return et.learned.Load() != 0 }, "A learning B's NAT endpoint")
	waitAdvance(t, 6*time.Second, 1<<20, "the stream to B's IPv4 locator", map[string]*bulk{"A->B": s})
	seen, ok := encap.Endpoint(wire.L64(et.learned.Load()))
	if !ok {
		t.Fatalf("A's learned locator %x is not an IPv4 endpoint", et.learned.Load())
	}

	forgeFragNeeded(t, et, seen)

	et.r.Run("ip", "link", "set", "r2", "mtu", "1400")
	waitAdvance(t, 6*time.Second, 2<<20, "the stream after R's link to B became 1400 bytes", map[string]*bulk{"A->B": s})
	if n := counter(t, et.da, "ingress_frag_needed_translated"); n == 0 {
		t.Error("A translated no Fragmentation Needed")
	}
	if got := routeMTU(t, et.a, et.viewB); got != "1364" {
		t.Errorf("A's PMTU to B's view: %q, want 1364 (1400 - UDP/IPv4 28 - nonce header 8)", got)
	}
	if n := encapCounter(t, et.da, "encap_egress_too_big"); n != 0 {
		t.Errorf("A dropped %d packets as too big for its own link", n)
	}

	// 1300 bytes leave the view 1264: the error says 1280 to the kernel and the event names
	// 1264 for ilnpd's route (not made here: the topology's event reader is A's roaming).
	et.r.Run("ip", "link", "set", "r2", "mtu", "1300")
	waitFor(t, 5*time.Second, func() bool { return counter(t, et.da, "ingress_ptb_below_min") > 0 },
		"A counting a Fragmentation Needed that leaves the view less than 1280")
	if got := routeMTU(t, et.a, et.viewB); got != "1280" {
		t.Errorf("A's PMTU to B's view after a 1300-byte Fragmentation Needed: %q, want 1280", got)
	}
}

// forgeFragNeeded sends A, from R, an ICMPv4 Fragmentation Needed (MTU 576) quoting an
// encapsulated packet of A's session with B whose nonce is not A's, and the same with a broken
// checksum: A drops and counts both, and its PMTU to B's view stays.
func forgeFragNeeded(t *testing.T, et *encapTopo, seen netip.AddrPort) {
	t.Helper()
	bad0 := counter(t, et.da, "ingress_icmp_error_bad_nonce")
	mtu0 := routeMTU(t, et.a, et.viewB)
	aEP := netip.MustParseAddrPort("198.51.100.2:49191")
	from := wire.ILV{Locator: l32(t, aEP), NID: nidA}
	to := wire.ILV{Locator: l32(t, seen), NID: nidB}
	l4 := wire.AppendUDP(nil, zeroLocator(from.Addr()), zeroLocator(to.Addr()), 40000, 5001, make([]byte, 1300))
	inner := wire.AppendILNPPacket(nil, from, to, mustNonce(t, 0xde, 0xad, 0xbe, 0xef), wire.ProtoUDP, l4)
	quote := make([]byte, 28, 28+len(inner))
	quote[0], quote[8], quote[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(quote[2:], uint16(28+len(inner)))
	binary.BigEndian.PutUint16(quote[6:], 0x4000) // DF
	copy(quote[12:], aEP.Addr().AsSlice())
	copy(quote[16:], seen.Addr().AsSlice())
	binary.BigEndian.PutUint16(quote[20:], aEP.Port())
	binary.BigEndian.PutUint16(quote[22:], seen.Port())
	binary.BigEndian.PutUint16(quote[24:], uint16(8+len(inner)))
	quote = append(quote, inner...)[:576-20-8] // as much as a router quotes (RFC 1812 s.4.3.2.3)
	msg := append([]byte{3, 4, 0, 0, 0, 0, 0x02, 0x40}, quote...)
	binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
	corrupt := append([]byte(nil), msg...)
	corrupt[len(corrupt)-1] ^= 0x40
	malformed0 := counter(t, et.da, "ingress_malformed")
	must(t, et.r.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", "198.51.100.1")
		if err != nil {
			return err
		}
		defer c.Close()
		for _, m := range [][]byte{msg, corrupt} {
			if _, err := c.WriteTo(m, &net.IPAddr{IP: aEP.Addr().AsSlice()}); err != nil {
				return err
			}
		}
		return nil
	}))
	waitFor(t, 2*time.Second, func() bool { return counter(t, et.da, "ingress_icmp_error_bad_nonce") > bad0 },
		"A dropping the forged Fragmentation Needed")
	// The same with its last byte changed: the ICMPv4 checksum (RFC 792) no longer holds.
	waitFor(t, 2*time.Second, func() bool { return counter(t, et.da, "ingress_malformed") > malformed0 },
		"A dropping a Fragmentation Needed with a wrong checksum as malformed")
	if got := routeMTU(t, et.a, et.viewB); got != mtu0 {
		t.Errorf("A's PMTU to B's view after the forged error: %q, was %q", got, mtu0)
	}
}

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
