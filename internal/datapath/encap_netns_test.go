package datapath

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// TestNetnsEncapNAT: A (dual stack) - R - B, where B has an IPv6 link (b1) and an IPv4-only
// link (b2) behind R's nftables masquerade. A TCP stream and a UDP echo exchange opened on the
// session view keep working while B moves IPv6 -> IPv4 behind the NAT -> IPv6, by map updates
// as the daemons make them; A learns B's endpoint as the NAT shows it from B's first
// nonce-verified packet (unknown-locator event, WireGuard-style roaming). A forged encapsulated
// packet with a wrong nonce changes nothing.
//
// Routes towards the peer carry encap.InnerMTU (1464 for 1500-byte links and a 4-byte nonce,
// MSS 1404), so packets fit after the nonce header and UDP/IPv4 are added.
//
// Without roaming A drops B's first packet from the NAT endpoint (unknown locator) and learns
// from the event; with EncapConfig.Roam it accepts that nonce-verified packet at once.
func TestNetnsEncapNAT(t *testing.T) {
	nstest.RequireTool(t, "nft", "ethtool")
	nstest.RequireRoot(t)
	t.Run("learn", func(t *testing.T) { testEncapNAT(t, false) })
	t.Run("roam", func(t *testing.T) { testEncapNAT(t, true) })
}

func testEncapNAT(t *testing.T, roam bool) {
	mtu, err := encap.InnerMTU(1500, 4)
	must(t, err)
	mss, err := encap.TCPMSS(1500, 4)
	must(t, err)
	a, r, b := nstest.New(t, "enA"), nstest.New(t, "enR"), nstest.New(t, "enB")
	nstest.Link(t, a, "a0", r, "r0")
	nstest.Link(t, b, "b1", r, "r1")
	nstest.Link(t, b, "b2", r, "r2")
	r.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	r.Run("sysctl", "-qw", "net.ipv4.ip_forward=1")
	for i, l := range []wire.L64{lA1, lB1} {
		dev := []string{"r0", "r1"}[i]
		r.Run("ip", "addr", "add", "fe80::1/64", "dev", dev, "nodad")
		r.Run("ip", "addr", "add", addr(l, 1).String()+"/64", "dev", dev, "nodad")
	}
	r.Run("ip", "addr", "add", "198.51.100.1/24", "dev", "r0")
	r.Run("ip", "addr", "add", "10.0.0.1/24", "dev", "r2")
	// The NAT: masquerade from B's IPv4 network out of r0, UDP source ports moved into a
	// range of their own so the translation is visible.
	r.Run("nft", "add table ip nat")
	r.Run("nft", "add chain ip nat post { type nat hook postrouting priority 100 ; }")
	r.Run("nft", "add rule ip nat post oifname r0 ip saddr 10.0.0.0/24 meta l4proto udp masquerade to :61000-61100")
	r.Run("nft", "add rule ip nat post oifname r0 ip saddr 10.0.0.0/24 masquerade")
	viewA, viewB := addr(lA1, nidA), addr(lB1, nidB)
	a.Run("ip", "addr", "add", viewA.String()+"/64", "dev", "a0", "nodad")
	a.Run("ip", "addr", "add", "198.51.100.2/24", "dev", "a0")
	b.Run("ip", "addr", "add", viewB.String()+"/64", "dev", "b1", "nodad")
	b.Run("ip", "addr", "add", viewB.String()+"/128", "dev", "lo")
	b.Run("ip", "addr", "add", "10.0.0.2/24", "dev", "b2")
	b.Run("ip", "route", "add", "default", "via", "10.0.0.1", "dev", "b2")
	for _, h := range []struct {
		ns  *nstest.NS
		dev string
	}{{a, "a0"}, {b, "b1"}} {
		h.ns.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", h.dev, "mtu", strconv.Itoa(mtu), "advmss", strconv.Itoa(mss))
	}
	for _, d := range []struct {
		ns   *nstest.NS
		devs []string
	}{{a, []string{"a0"}}, {b, []string{"b1", "b2"}}} {
		for _, dev := range d.devs {
			d.ns.Run("ethtool", "-K", dev, "tx", "off", "tso", "off")
		}
	}
	aIf, b1If, b2If := a.Ifindex("a0"), b.Ifindex("b1"), b.Ifindex("b2")
	ll := netip.MustParseAddr("fe80::1")

	da, db := newDatapath(t, Options{}), newDatapath(t, Options{})
	must(t, da.SetLocalNID(nidA, lA1))
	must(t, da.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: aIf, NextHop: ll}))
	must(t, da.SetActiveLocator(lA1))
	la4, err := da.PutLocalIPv4Locator(netip.MustParseAddrPort("198.51.100.2:49191"), LocatorActive, aIf, netip.MustParseAddr("198.51.100.1"))
	must(t, err)
	must(t, da.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: la4, Roam: roam}))
	must(t, da.PutPeer(Peer{Addr: viewB, Active: lB1, Locators: []RemoteLocator{{Locator: lB1, State: LocatorActive}}}))
	must(t, db.SetLocalNID(nidB, lB1))
	must(t, db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorActive, Ifindex: b1If, NextHop: ll}))
	must(t, db.SetActiveLocator(lB1))
	lb4, err := db.PutLocalIPv4Locator(netip.MustParseAddrPort("10.0.0.2:49191"), LocatorValid, b2If, netip.MustParseAddr("10.0.0.1"))
	must(t, err)
	must(t, db.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: lb4}))
	must(t, a.Do(func() error { return da.Attach(aIf) }))
	must(t, b.Do(func() error {
		if err := db.Attach(b1If); err != nil {
			return err
		}
		return db.Attach(b2If)
	}))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A's roaming: an L32 locator of B seen on a nonce-verified packet becomes B's active
	// locator (the datapath reports it as unknown and drops the packet until then).
	var learned atomic.Uint64
	evs, err := da.Events(ctx)
	must(t, err)
	go func() {
		for ev := range evs {
			if ev.Type != EventUnknownLocator || ev.RemoteNID != nidB {
				continue
			}
			l := wire.L64(binary.BigEndian.Uint64(ev.Src.AsSlice()[:8]))
			if !encap.IsL32(l) {
				continue
			}
			set := []RemoteLocator{{Locator: lB1, State: LocatorValid}, {Locator: l, State: LocatorActive}}
			if _, err := da.SetRemoteLocators(nidB, set, l); err == nil {
				learned.Store(uint64(l))
			}
		}
	}()

	ln := b.Listen("tcp6", "[::]:5001")
	defer ln.Close()
	var tcpBytes atomic.Int64
	tcpErr := make(chan error, 2)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			tcpErr <- err
			return
		}
		defer c.Close()
		if err := nstest.ReadPattern(ctx, c, &tcpBytes); err != nil && ctx.Err() == nil {
			tcpErr <- err
		}
	}()
	client := a.Dial("tcp6", netip.AddrPortFrom(viewB, 5001).String())
	defer client.Close()
	go func() {
		if err := nstest.WritePattern(ctx, client, 16<<10, 8*time.Millisecond); err != nil && ctx.Err() == nil {
			tcpErr <- err
		}
	}()
	srv := b.ListenPacket("udp6", netip.AddrPortFrom(viewB, 5002).String())
	defer srv.Close()
	go nstest.EchoUDP(srv)
	uc := a.Dial("udp6", netip.AddrPortFrom(viewB, 5002).String())
	defer uc.Close()
	var udpSent, udpEchoed atomic.Int64
	go func() {
		msg := make([]byte, 200)
		for ctx.Err() == nil {
			binary.BigEndian.PutUint64(msg, uint64(udpSent.Add(1)))
			_, _ = uc.Write(msg)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := uc.Read(buf); err != nil {
				return
			}
			udpEchoed.Add(1)
		}
	}()
	progress := func(phase string) {
		t.Helper()
		tcp0, udp0 := tcpBytes.Load(), udpEchoed.Load()
		waitFor(t, 10*time.Second, func() bool {
			select {
			case err := <-tcpErr:
				t.Fatalf("%s: %v", phase, err)
			default:
			}
			return tcpBytes.Load() > tcp0+1<<20 && udpEchoed.Load() > udp0+100
		}, phase+": TCP and UDP progress")
		t.Logf("%s: TCP %d bytes, UDP %d sent / %d echoed", phase, tcpBytes.Load(), udpSent.Load(), udpEchoed.Load())
	}
	progress("ipv6")

	// B moves to its IPv4 network behind the NAT: its IPv4 locator becomes active and A's
	// IPv4 locator its active remote one (what an LU or DNS L32 record tells B's daemon).
	must(t, db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorValid, Ifindex: b1If, NextHop: ll}))
	_, err = db.PutLocalIPv4Locator(netip.MustParseAddrPort("10.0.0.2:49191"), LocatorActive, b2If, netip.MustParseAddr("10.0.0.1"))
	must(t, err)
	decap0 := encapCounter(t, db, "encap_ingress_decapsulated")
	t0 := time.Now()
	if _, err := db.SetRemoteLocators(nidA, []RemoteLocator{{Locator: lA1, State: LocatorValid}, {Locator: la4, State: LocatorActive}}, la4); err != nil {
		t.Fatal(err)
	}
	// The HIP seed's handover duration, datapath part only (no LU processing): from B's
	// switch to the first packet from A received on B's new locator (polled every 0.2 ms).
	for encapCounter(t, db, "encap_ingress_decapsulated") == decap0 {
		if time.Since(t0) > 5*time.Second {
			t.Fatal("no packet from A on B's IPv4 locator")
		}
		time.Sleep(200 * time.Microsecond)
	}
	t.Logf("handover to IPv4 behind the NAT: %.2f ms from B's switch to A's first packet on the new locator", float64(time.Since(t0).Microseconds())/1000)
	progress("ipv4 behind nat")
	seen, ok := encap.Endpoint(wire.L64(learned.Load()))
	if !ok || seen.Addr() != netip.MustParseAddr("198.51.100.1") {
		t.Fatalf("A learned B's endpoint %v (ok %v), want the NAT's address 198.51.100.1", seen, ok)
	}
	t.Logf("A sees B at %v (B is 10.0.0.2:%d behind the NAT)", seen, encap.DefaultPort)

	// A forged encapsulated packet from B's NID with a wrong nonce, sent from R to A's port.
	forge(t, r, da, seen)

	// Back to IPv6 (B's LU tells A; here A's daemon's update is made directly).
	must(t, db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorActive, Ifindex: b1If, NextHop: ll}))
	if _, err := db.SetRemoteLocators(nidA, []RemoteLocator{{Locator: lA1, State: LocatorActive}, {Locator: la4, State: LocatorValid}}, lA1); err != nil {
		t.Fatal(err)
	}
	if _, err := da.SetRemoteLocators(nidB, []RemoteLocator{{Locator: lB1, State: LocatorActive}, {Locator: wire.L64(learned.Load()), State: LocatorValid}}, lB1); err != nil {
		t.Fatal(err)
	}
	progress("ipv6 again")
	cancel()
	time.Sleep(100 * time.Millisecond) // the last echoes come back
	client.Close()
	uc.Close()
	// Until A has learned B's NAT endpoint it drops B's packets from it (unknown locator):
	// an echo lost here is one of those (a daemon's LU, accepted from any locator, comes first).
	t.Logf("UDP lost %d of %d; A dropped %d packets from B's endpoint before learning it",
		udpSent.Load()-udpEchoed.Load(), udpSent.Load(), counter(t, da, "ingress_unknown_locator"))
	if dropped := counter(t, da, "ingress_unknown_locator"); roam && dropped != 0 {
		t.Errorf("roaming: A dropped %d packets from B's NAT endpoint", dropped)
	}
	if roamed := encapCounter(t, da, "encap_ingress_roamed"); roam != (roamed > 0) {
		t.Errorf("roam %v: encap_ingress_roamed = %d", roam, roamed)
	}
	for name, d := range map[string]*Datapath{"A": da, "B": db} {
		ec, err := d.EncapCounters()
		must(t, err)
		for _, bad := range []string{"encap_egress_too_big", "encap_egress_errors", "encap_ingress_errors", "encap_ingress_truncated", "encap_ingress_bad_checksum"} {
			if ec[bad] != 0 {
				t.Errorf("host %s: %s = %d", name, bad, ec[bad])
			}
		}
		if ec["encap_egress_packets"] < 100 || ec["encap_ingress_decapsulated"] < 100 {
			t.Errorf("host %s: encapsulated %d, decapsulated %d", name, ec["encap_egress_packets"], ec["encap_ingress_decapsulated"])
		}
		t.Logf("host %s: encapsulated %d, decapsulated %d", name, ec["encap_egress_packets"], ec["encap_ingress_decapsulated"])
	}
}

// forge sends, from the router, an ILNP packet from B's NID with a wrong nonce inside UDP/IPv4
// to A's encapsulation port, and checks that A dropped it as a bad nonce and that B's session
// at A is unchanged.
func forge(t *testing.T, r *nstest.NS, da *Datapath, seen netip.AddrPort) {
	t.Helper()
	before, err := da.GetSession(nidA, nidB)
	must(t, err)
	bad0 := counter(t, da, "ingress_bad_nonce")
	from := wire.ILV{Locator: l32(t, seen), NID: nidB}
	to := wire.ILV{Locator: l32(t, netip.MustParseAddrPort("198.51.100.2:49191")), NID: nidA}
	l4 := wire.AppendUDP(nil, zeroLocator(from.Addr()), zeroLocator(to.Addr()), 40000, 5002, []byte("forged"))
	pkt := wire.AppendILNPPacket(nil, from, to, mustNonce(t, 0xde, 0xad, 0xbe, 0xef), wire.ProtoUDP, l4)
	var c net.PacketConn
	must(t, r.Do(func() error {
		var err error
		c, err = net.ListenPacket("udp4", "198.51.100.1:0")
		return err
	}))
	defer c.Close()
	for i := 0; i < 3; i++ {
		if _, err := c.WriteTo(pkt, &net.UDPAddr{IP: net.IPv4(198, 51, 100, 2), Port: encap.DefaultPort}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Second, func() bool { return counter(t, da, "ingress_bad_nonce") >= bad0+3 }, "A dropping the forged packets as bad nonces")
	after, err := da.GetSession(nidA, nidB)
	must(t, err)
	if after.RemoteActive != before.RemoteActive || len(after.RemoteLocators) != len(before.RemoteLocators) {
		t.Fatalf("forged packets changed B's session at A: %+v -> %+v", before.RemoteLocators, after.RemoteLocators)
	}
}
