package datapath

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
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
	et := newEncapTopo(t, roam)
	a, r, b, da, db := et.a, et.r, et.b, et.da, et.db
	viewB, learned := et.viewB, et.learned
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

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

	// B moves to its IPv4 network behind the NAT.
	decap0 := encapCounter(t, db, "encap_ingress_decapsulated")
	t0 := time.Now()
	et.toIPv4(t)
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
	et.toIPv6(t)
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

// encapTopo is A (dual stack) - R - B: A on one link with IPv6 and public IPv4; B with an IPv6
// link (b1) and an IPv4-only link (b2) behind R's nftables masquerade; both datapaths loaded
// and attached, A learning B's IPv4 endpoint from unknown-locator events (roaming).
type encapTopo struct {
	a, r, b      *nstest.NS
	da, db       *Datapath
	la4, lb4     wire.L64 // A's and B's IPv4 locators
	b1If, b2If   int
	ll           netip.Addr
	viewA, viewB netip.Addr
	learned      *atomic.Uint64 // the L32 A last made B's active locator
}

func newEncapTopo(tb testing.TB, roam bool) *encapTopo {
	tb.Helper()
	mtu, err := encap.InnerMTU(1500, 4)
	must(tb, err)
	mss, err := encap.TCPMSS(1500, 4)
	must(tb, err)
	a, r, b := nstest.New(tb, "enA"), nstest.New(tb, "enR"), nstest.New(tb, "enB")
	nstest.Link(tb, a, "a0", r, "r0")
	nstest.Link(tb, b, "b1", r, "r1")
	nstest.Link(tb, b, "b2", r, "r2")
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

	da, db := newDatapath(tb, Options{}), newDatapath(tb, Options{})
	must(tb, da.SetLocalNID(nidA, lA1))
	must(tb, da.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: aIf, NextHop: ll}))
	must(tb, da.SetActiveLocator(lA1))
	la4, err := da.PutLocalIPv4Locator(netip.MustParseAddrPort("198.51.100.2:49191"), LocatorActive, aIf, netip.MustParseAddr("198.51.100.1"))
	must(tb, err)
	must(tb, da.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: la4, Roam: roam}))
	must(tb, da.PutPeer(Peer{Addr: viewB, Active: lB1, Locators: []RemoteLocator{{Locator: lB1, State: LocatorActive}}}))
	must(tb, db.SetLocalNID(nidB, lB1))
	must(tb, db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorActive, Ifindex: b1If, NextHop: ll}))
	must(tb, db.SetActiveLocator(lB1))
	lb4, err := db.PutLocalIPv4Locator(netip.MustParseAddrPort("10.0.0.2:49191"), LocatorValid, b2If, netip.MustParseAddr("10.0.0.1"))
	must(tb, err)
	must(tb, db.SetEncap(EncapConfig{Port: encap.DefaultPort, LocalL32: lb4}))
	must(tb, a.Do(func() error { return da.Attach(aIf) }))
	must(tb, b.Do(func() error {
		if err := db.Attach(b1If); err != nil {
			return err
		}
		return db.Attach(b2If)
	}))

	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	// A's roaming: an L32 locator of B seen on a nonce-verified packet becomes B's active
	// locator (the datapath reports it as unknown and drops the packet until then).
	learned := new(atomic.Uint64)
	evs, err := da.Events(ctx)
	must(tb, err)
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
	return &encapTopo{a: a, r: r, b: b, da: da, db: db, la4: la4, lb4: lb4, b1If: b1If, b2If: b2If, ll: ll,
		viewA: viewA, viewB: viewB, learned: learned}
}

// toIPv4 moves B to its IPv4 network behind the NAT: its IPv4 locator becomes active and A's
// IPv4 locator its active remote one (what an LU or DNS L32 record tells B's daemon).
func (et *encapTopo) toIPv4(tb testing.TB) {
	tb.Helper()
	must(tb, et.db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorValid, Ifindex: et.b1If, NextHop: et.ll}))
	_, err := et.db.PutLocalIPv4Locator(netip.MustParseAddrPort("10.0.0.2:49191"), LocatorActive, et.b2If, netip.MustParseAddr("10.0.0.1"))
	must(tb, err)
	if _, err := et.db.SetRemoteLocators(nidA, []RemoteLocator{{Locator: lA1, State: LocatorValid}, {Locator: et.la4, State: LocatorActive}}, et.la4); err != nil {
		tb.Fatal(err)
	}
}

// toIPv6 moves B back to its IPv6 link on both ends (what B's LU tells A's daemon), the IPv4
// locators staying valid.
func (et *encapTopo) toIPv6(tb testing.TB) {
	tb.Helper()
	must(tb, et.db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorActive, Ifindex: et.b1If, NextHop: et.ll}))
	if _, err := et.db.SetRemoteLocators(nidA, []RemoteLocator{{Locator: lA1, State: LocatorActive}, {Locator: et.la4, State: LocatorValid}}, lA1); err != nil {
		tb.Fatal(err)
	}
	set := []RemoteLocator{{Locator: lB1, State: LocatorActive}}
	if l := wire.L64(et.learned.Load()); l != 0 {
		set = append(set, RemoteLocator{Locator: l, State: LocatorValid})
	}
	if _, err := et.da.SetRemoteLocators(nidB, set, lB1); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkEncapThroughput: iperf3 TCP from A to B's session view, ILNPv6 in UDP/IPv4 through
// the NAT against native ILNPv6 over the same topology and offloads (TSO off on the hosts),
// in alternating 3-second pairs; each figure is the median over the pairs, the ratio the
// median of the per-pair ratios (the target: encapsulated >= 0.9x native).
func BenchmarkEncapThroughput(b *testing.B) {
	nstest.RequireTool(b, "iperf3", "nft", "ethtool")
	et := newEncapTopo(b, true)
	et.b.Start(nil, "iperf3", "-s", "-p", "5201")
	time.Sleep(300 * time.Millisecond)
	run := func(ipv4 bool) float64 {
		if ipv4 {
			et.toIPv4(b)
		} else {
			et.toIPv6(b)
		}
		out, err := et.a.Try("iperf3", "-c", et.viewB.String(), "-p", "5201", "-t", "3", "-J")
		if err != nil {
			b.Fatalf("iperf3: %v", err)
		}
		var r struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &r); err != nil {
			b.Fatalf("iperf3 JSON: %v", err)
		}
		return r.End.SumReceived.BitsPerSecond
	}
	// The session first (the moves update it), over IPv6.
	if _, err := et.a.Try("iperf3", "-c", et.viewB.String(), "-p", "5201", "-t", "1"); err != nil {
		b.Fatalf("iperf3: %v", err)
	}
	const pairs = 5
	var enc, nat, ratios []float64
	for i := 0; i < pairs; i++ {
		var x, y float64
		if i%2 == 0 {
			x, y = run(true), run(false)
		} else {
			y = run(false)
			x = run(true)
		}
		enc, nat, ratios = append(enc, x), append(nat, y), append(ratios, x/y)
	}
	ec, err := et.da.EncapCounters()
	must(b, err)
	if ec["encap_egress_packets"] == 0 {
		b.Fatal("the encapsulated runs did not go through encap")
	}
	b.Logf("encapsulated %v\nnative %v\nratios %v", enc, nat, ratios)
	b.ReportMetric(median(enc)/1e9, "encap-Gbit/s")
	b.ReportMetric(median(nat)/1e9, "native-Gbit/s")
	b.ReportMetric(median(ratios), "ratio")
	fmt.Printf("encap: TCP ILNPv6 in UDP/IPv4 through NAT %.2f Gbit/s vs native ILNPv6 %.2f Gbit/s, ratio %.3f (median of %d pairs)\n",
		median(enc)/1e9, median(nat)/1e9, median(ratios), pairs)
}
