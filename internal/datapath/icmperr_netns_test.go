package datapath

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/pmtu"
	"ilnp/internal/wire"
)

// newPMTUTopo is newTopo (hosts' TSO off) with B's second locator behind a router M whose link
// to R carries mtu bytes: A - R - B's b1 as before, R - M - B's b2 with R's r2 and M's m0 at
// mtu, so R sends A Packet Too Big for A's packets to lB2 and M sends B one for B's packets
// from lB2, each naming the wire addresses and quoting the packet with its nonce.
func newPMTUTopo(t *testing.T, mtu int) *topo {
	t.Helper()
	nstest.RequireTool(t, "ethtool")
	tp := &topo{
		a: nstest.New(t, "pmA"), r: nstest.New(t, "pmR"), b: nstest.New(t, "pmB"),
		viewA: addr(lA1, nidA), viewB: addr(lB1, nidB),
		routerLL: netip.MustParseAddr("fe80::1"),
	}
	m := nstest.New(t, "pmM")
	nstest.Link(t, tp.a, "a0", tp.r, "r0")
	nstest.Link(t, tp.b, "b1", tp.r, "r1")
	nstest.Link(t, tp.r, "r2", m, "m0")
	nstest.Link(t, m, "m1", tp.b, "b2")
	for _, ns := range []*nstest.NS{tp.r, m} {
		ns.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	}
	tp.r.Run("ip", "addr", "add", "fe80::1/64", "dev", "r0", "nodad")
	tp.r.Run("ip", "addr", "add", addr(lA1, 1).String()+"/64", "dev", "r0", "nodad")
	tp.r.Run("ip", "addr", "add", "fe80::1/64", "dev", "r1", "nodad")
	tp.r.Run("ip", "addr", "add", addr(lB1, 1).String()+"/64", "dev", "r1", "nodad")
	tp.r.Run("ip", "addr", "add", "fe80::1/64", "dev", "r2", "nodad")
	m.Run("ip", "addr", "add", "fe80::2/64", "dev", "m0", "nodad")
	m.Run("ip", "addr", "add", "fe80::1/64", "dev", "m1", "nodad")
	m.Run("ip", "addr", "add", addr(lB2, 1).String()+"/64", "dev", "m1", "nodad")
	tp.r.Run("ip", "-6", "route", "add", addr(lB2, 0).String()+"/64", "via", "fe80::2", "dev", "r2")
	m.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "m0")
	for _, l := range []struct {
		ns  *nstest.NS
		dev string
	}{{tp.r, "r2"}, {m, "m0"}} {
		l.ns.Run("ip", "link", "set", l.dev, "mtu", strconv.Itoa(mtu))
	}
	tp.a.Run("ip", "addr", "add", tp.viewA.String()+"/64", "dev", "a0", "nodad")
	tp.b.Run("ip", "addr", "add", tp.viewB.String()+"/64", "dev", "b1", "nodad")
	tp.b.Run("ip", "addr", "add", addr(lB2, nidB).String()+"/64", "dev", "b2", "nodad")
	tp.b.Run("ip", "addr", "add", tp.viewB.String()+"/128", "dev", "lo")
	tp.a.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "a0", "mtu", "1492", "advmss", "1432")
	tp.b.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "b1", "mtu", "1492", "advmss", "1432")
	tp.b.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "b2", "metric", "2048", "mtu", "1492", "advmss", "1432")
	tp.a.Run("ethtool", "-K", "a0", "tx", "off", "tso", "off")
	tp.b.Run("ethtool", "-K", "b1", "tx", "off", "tso", "off")
	tp.b.Run("ethtool", "-K", "b2", "tx", "off", "tso", "off")
	tp.aIf, tp.b1If, tp.b2If = tp.a.Ifindex("a0"), tp.b.Ifindex("b1"), tp.b.Ifindex("b2")

	tp.da = newDatapath(t, Options{})
	tp.db = newDatapath(t, Options{})
	must(t, tp.da.SetLocalNID(nidA, lA1))
	must(t, tp.da.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: tp.aIf, NextHop: tp.routerLL}))
	must(t, tp.da.SetActiveLocator(lA1))
	must(t, tp.da.PutPeer(Peer{Addr: tp.viewB, Active: lB1,
		Locators: []RemoteLocator{{Locator: lB1, State: LocatorActive}, {Locator: lB2, State: LocatorValid}}}))
	must(t, tp.db.SetLocalNID(nidB, lB1))
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorActive, Ifindex: tp.b1If, NextHop: tp.routerLL}))
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB2, State: LocatorValid, Ifindex: tp.b2If, NextHop: tp.routerLL}))
	must(t, tp.db.SetActiveLocator(lB1))
	must(t, tp.a.Do(func() error { return tp.da.Attach(tp.aIf) }))
	must(t, tp.b.Do(func() error {
		if err := tp.db.Attach(tp.b1If); err != nil {
			return err
		}
		return tp.db.Attach(tp.b2If)
	}))
	return tp
}

// bulk is one TCP stream of full-size segments from one namespace's dialer or acceptor to the
// other, counting the bytes the receiver checked.
type bulk struct{ got atomic.Int64 }

func startBulk(ctx context.Context, t *testing.T, from, to *nstest.NS, dst netip.AddrPort) *bulk {
	t.Helper()
	ln := to.Listen("tcp6", dst.String())
	t.Cleanup(func() { ln.Close() })
	b := &bulk{}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = nstest.ReadPattern(ctx, c, &b.got)
	}()
	c := from.Dial("tcp6", dst.String())
	t.Cleanup(func() { c.Close() })
	go func() { _ = nstest.WritePattern(ctx, c, 32<<10, 4*time.Millisecond) }()
	return b
}

// reverseBulk is a stream from the listener's side: to accepts and writes, from reads.
func reverseBulk(ctx context.Context, t *testing.T, from, to *nstest.NS, dst netip.AddrPort) *bulk {
	t.Helper()
	ln := to.Listen("tcp6", dst.String())
	t.Cleanup(func() { ln.Close() })
	b := &bulk{}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = nstest.WritePattern(ctx, c, 32<<10, 4*time.Millisecond)
	}()
	c := from.Dial("tcp6", dst.String())
	t.Cleanup(func() { c.Close() })
	go func() { _ = nstest.ReadPattern(ctx, c, &b.got) }()
	return b
}

// longestStall samples the streams every 5 ms until ctx ends and keeps, per stream, the longest
// time it carried nothing.
func longestStall(ctx context.Context, streams map[string]*bulk) func() map[string]time.Duration {
	done := make(chan map[string]time.Duration, 1)
	go func() {
		last, at, worst := map[string]int64{}, map[string]time.Time{}, map[string]time.Duration{}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- worst
				return
			case now := <-tick.C:
				for k, s := range streams {
					if n := s.got.Load(); n != last[k] || at[k].IsZero() {
						last[k], at[k] = n, now
					} else if d := now.Sub(at[k]); d > worst[k] {
						worst[k] = d
					}
				}
			}
		}
	}()
	return func() map[string]time.Duration { return <-done }
}

// waitAdvance waits until every stream has carried at least n more bytes than when called.
func waitAdvance(t *testing.T, limit time.Duration, n int64, what string, streams map[string]*bulk) {
	t.Helper()
	start := map[string]int64{}
	for k, s := range streams {
		start[k] = s.got.Load()
	}
	waitFor(t, limit, func() bool {
		for k, s := range streams {
			if s.got.Load()-start[k] < n {
				return false
			}
		}
		return true
	}, what)
}

// icmpError builds an ICMPv6 error (type, code, 32-bit field) quoting an ILNP packet from src to
// dst with nonce and a TCP header; the raw socket that sends it fills the checksum.
func icmpError(typ, code uint8, field uint32, src, dst netip.Addr, nonce []byte) []byte {
	opt := []byte{6, 0, 0x8B, 4}
	opt = append(opt, nonce...)
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], 5001)
	binary.BigEndian.PutUint16(tcp[2:], 40000)
	tcp[12] = 5 << 4
	quote := ipv6Packet(src, dst, 60, opt, tcp, make([]byte, 1200))
	msg := make([]byte, 8, 8+len(quote))
	msg[0], msg[1] = typ, code
	binary.BigEndian.PutUint32(msg[4:], field)
	return append(msg, quote...)
}

func sendICMP(t *testing.T, ns *nstest.NS, from, to netip.Addr, msg []byte) {
	t.Helper()
	must(t, ns.Do(func() error {
		c, err := net.ListenPacket("ip6:ipv6-icmp", from.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(msg, &net.IPAddr{IP: to.AsSlice()})
		return err
	}))
}

func routeMTU(t *testing.T, ns *nstest.NS, dst netip.Addr) string {
	t.Helper()
	out := ns.Run("ip", "-6", "route", "get", dst.String())
	f := strings.Fields(out)
	for i := range f[:len(f)-1] {
		if f[i] == "mtu" {
			if f[i+1] == "lock" && i+2 < len(f) {
				return f[i+2]
			}
			return f[i+1]
		}
	}
	return ""
}

// clampRoutes does what ilnpd does with the datapath's pmtu-below-min events (internal/node):
// the correspondent's view gets a host route with the locked MTU the event names. It returns
// when the first event came (zero until then).
func clampRoutes(ctx context.Context, t *testing.T, ns *nstest.NS, d *Datapath) *atomic.Int64 {
	t.Helper()
	ch, err := d.Events(ctx)
	must(t, err)
	first := &atomic.Int64{}
	tab := pmtu.NewTable()
	go func() {
		for ev := range ch {
			if ev.Type != EventPathMTUBelowMin {
				continue
			}
			first.CompareAndSwap(0, time.Now().UnixNano())
			s, err := d.GetSession(ev.LocalNID, ev.RemoteNID)
			if err != nil {
				continue
			}
			if ok, err := tab.Want(s.RemoteAddr(), ev.MTU, time.Now()); err != nil || !ok {
				continue
			}
			if err := ns.Do(func() error { return pmtu.Install(s.RemoteAddr(), ev.MTU) }); err != nil {
				t.Errorf("clamp: %v", err)
			}
		}
	}()
	return first
}

// TestNetnsPathMTU: TCP bulk both ways on the session view, then a move onto B's locator
// behind a 1400-byte link. R and M answer full-size packets with Packet Too Big naming the wire
// addresses; each end's ingress matches the quoted packet to its session by its own nonce,
// translates it to the view with room for the nonce header, and both streams carry on at the
// smaller size (before this, both stalled: the kernel found no socket for the wire addresses).
// Forged errors quoting the session with a wrong nonce change nothing.
func TestNetnsPathMTU(t *testing.T) {
	t.Run("move-1400-forged", func(t *testing.T) { testPathMTU(t, 1400, false, true) })
	t.Run("move-1492", func(t *testing.T) { testPathMTU(t, 1492, false, false) })
	// The flow starts on the small path: wire and view addresses differ from the first packet.
	t.Run("start-1400", func(t *testing.T) { testPathMTU(t, 1400, true, false) })
	// A 1280-byte link leaves the view less than IPv6's minimum once the nonce header is in:
	// the datapath reports it and a locked host route (internal/pmtu) clamps the view.
	t.Run("start-1280", func(t *testing.T) { testPathMTU(t, 1280, true, false) })
	t.Run("move-1280", func(t *testing.T) { testPathMTU(t, 1280, false, false) })
}

func testPathMTU(t *testing.T, mtu int, startSmall, forge bool) {
	tp := newPMTUTopo(t, mtu)
	if startSmall {
		// No session yet: A's peer entry and B's locators say lB2.
		must(t, tp.da.PutPeer(Peer{Addr: tp.viewB, Active: lB2,
			Locators: []RemoteLocator{{Locator: lB2, State: LocatorActive}, {Locator: lB1, State: LocatorValid}}}))
		must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB2, State: LocatorActive, Ifindex: tp.b2If, NextHop: tp.routerLL}))
		must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorValid, Ifindex: tp.b1If, NextHop: tp.routerLL}))
		must(t, tp.db.SetActiveLocator(lB2))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	below := mtu < 1280+8
	var firstA, firstB *atomic.Int64
	if below {
		firstA, firstB = clampRoutes(ctx, t, tp.a, tp.da), clampRoutes(ctx, t, tp.b, tp.db)
	}
	streams := map[string]*bulk{
		"A->B": startBulk(ctx, t, tp.a, tp.b, netip.AddrPortFrom(tp.viewB, 5001)),
		"B->A": reverseBulk(ctx, t, tp.a, tp.b, netip.AddrPortFrom(tp.viewB, 5002)),
	}
	mctx, mcancel := context.WithCancel(ctx)
	stalls := longestStall(mctx, streams)
	waitAdvance(t, 6*time.Second, 1<<20, "both streams on the first path", streams)
	if forge {
		testForgedErrors(t, tp)
	}
	if !startSmall {
		tp.flip(t, lB2)
		waitAdvance(t, 6*time.Second, 2<<20, "both streams after the move onto the small path", streams)
	}
	mcancel()
	t.Logf("longest stall per stream (5 ms samples): %v", stalls())
	if below {
		for name, first := range map[string]*atomic.Int64{"A->B": firstA, "B->A": firstB} {
			if first.Load() == 0 {
				t.Errorf("%s: no pmtu-below-min event", name)
			}
		}
		for name, d := range map[string]*Datapath{"A": tp.da, "B": tp.db} {
			if n := counter(t, d, "ingress_ptb_below_min"); n == 0 {
				t.Errorf("%s counted no Packet Too Big below the minimum", name)
			}
		}
		bigDatagrams(t, tp)
	}
	for name, d := range map[string]*Datapath{"A": tp.da, "B": tp.db} {
		if n := counter(t, d, "ingress_ptb_translated"); n == 0 {
			t.Errorf("%s translated no Packet Too Big", name)
		}
	}
	// The view's PMTU leaves room for the 8-byte nonce header.
	want := strconv.Itoa(mtu - 8)
	if got := routeMTU(t, tp.a, tp.viewB); got != want {
		t.Errorf("A's PMTU to B's view: %q, want %s", got, want)
	}
	if got := routeMTU(t, tp.b, tp.viewA); got != want {
		t.Errorf("B's PMTU to A's view: %q, want %s", got, want)
	}
}

// bigDatagrams: with the view clamped below 1280, a UDP datagram bigger than the path is
// fragmented by the sending kernel at the view, each fragment gets the nonce header in front of
// its Fragment header, and the receiver's ingress takes the nonce off every fragment before
// the kernel reassembles (RFC 8200 s.4.5, s.4.1). Both ways, on the path the session is on;
// the socket is bound to the view, so only translated fragments can make the datagram.
func bigDatagrams(t *testing.T, tp *topo) {
	t.Helper()
	for _, c := range []struct {
		name     string
		from, to *nstest.NS
		src, dst netip.Addr
	}{{"A->B", tp.a, tp.b, tp.viewA, tp.viewB}, {"B->A", tp.b, tp.a, tp.viewB, tp.viewA}} {
		rx := c.to.ListenPacket("udp6", netip.AddrPortFrom(c.dst, 5003).String())
		tx := c.from.ListenPacket("udp6", netip.AddrPortFrom(c.src, 5003).String())
		msg := make([]byte, 3000)
		for i := range msg {
			msg[i] = byte(i % 251)
		}
		if _, err := tx.WriteTo(msg, &net.UDPAddr{IP: c.dst.AsSlice(), Port: 5003}); err != nil {
			t.Errorf("%s: send 3000-byte datagram: %v", c.name, err)
		}
		buf := make([]byte, 4000)
		must(t, rx.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, _, err := rx.ReadFrom(buf)
		if err != nil || n != len(msg) || string(buf[:n]) != string(msg) {
			t.Errorf("%s: 3000-byte datagram: %d bytes, %v", c.name, n, err)
		}
		rx.Close()
		tx.Close()
	}
}

// testForgedErrors sends A errors about its session with B while the session runs on the
// 1500-byte path, where wire and view addresses are the same.
func testForgedErrors(t *testing.T, tp *topo) {
	t.Helper()

	// Forged: a Packet Too Big and a Parameter Problem from R quoting the session's own wire
	// (= view) addresses with a nonce that is not A's. Passed on, the first would give A's
	// kernel a 1280-byte PMTU for B (the addresses match the sockets) and the second would
	// end ILNP for the session.
	bad := []byte{0xde, 0xad, 0xbe, 0xef}
	s, err := tp.da.GetSession(nidA, nidB)
	must(t, err)
	if string(s.LocalNonce.Bytes()) == string(bad) {
		t.Fatal("the forged nonce is the session's")
	}
	rA := addr(lA1, 1)
	sendICMP(t, tp.r, rA, tp.viewA, icmpError(2, 0, 1280, tp.viewA, tp.viewB, bad))
	sendICMP(t, tp.r, rA, tp.viewA, icmpError(4, 2, 42, tp.viewA, tp.viewB, bad))
	waitFor(t, 2*time.Second, func() bool { return counter(t, tp.da, "ingress_icmp_error_bad_nonce") >= 2 },
		"A drops both forged errors")
	if mtu := routeMTU(t, tp.a, tp.viewB); mtu != "1492" {
		t.Errorf("A's route to B after the forged Packet Too Big: mtu %q, want 1492", mtu)
	}
	if s, err := tp.da.GetSession(nidA, nidB); err != nil || s.Flags&SessionIPv6Fallback != 0 {
		t.Errorf("session after the forged Parameter Problem: %+v, %v", s.Flags, err)
	}

}

// TestNetnsPeerNotILNP: A believes P is an ILNP node (a registered peer), but P is a plain Linux
// host without the ILNP programs. Its kernel answers the nonce option (type 0x8B: discard and
// send Parameter Problem, RFC 6744 s.2) with Parameter Problem code 2 pointing at it; A's
// ingress finds its own nonce in the quoted SYN, flags the session for plain IPv6 and keeps
// the error from the socket, so the retransmitted SYN connects and the stream runs.
func TestNetnsPeerNotILNP(t *testing.T) {
	a, r, p := nstest.New(t, "npA"), nstest.New(t, "npR"), nstest.New(t, "npP")
	nstest.Link(t, a, "a0", r, "r0")
	nstest.Link(t, p, "p0", r, "r1")
	r.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	viewA, viewP := addr(lA1, nidA), addr(lB1, nidB)
	for i, l := range []wire.L64{lA1, lB1} {
		dev := "r" + strconv.Itoa(i)
		r.Run("ip", "addr", "add", "fe80::1/64", "dev", dev, "nodad")
		r.Run("ip", "addr", "add", addr(l, 1).String()+"/64", "dev", dev, "nodad")
	}
	a.Run("ip", "addr", "add", viewA.String()+"/64", "dev", "a0", "nodad")
	p.Run("ip", "addr", "add", viewP.String()+"/64", "dev", "p0", "nodad")
	a.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "a0", "mtu", "1492", "advmss", "1432")
	p.Run("ip", "-6", "route", "add", "default", "via", "fe80::1", "dev", "p0")
	aIf := a.Ifindex("a0")
	da := newDatapath(t, Options{})
	ev := events(t, da)
	must(t, da.SetLocalNID(nidA, lA1))
	must(t, da.PutLocalLocator(LocalLocator{Locator: lA1, State: LocatorActive, Ifindex: aIf, NextHop: netip.MustParseAddr("fe80::1")}))
	must(t, da.SetActiveLocator(lA1))
	must(t, da.PutPeer(Peer{Addr: viewP, Active: lB1, Locators: []RemoteLocator{{Locator: lB1, State: LocatorActive}}}))
	must(t, a.Do(func() error { return da.Attach(aIf) }))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	s := startBulk(ctx, t, a, p, netip.AddrPortFrom(viewP, 5001))
	connected := time.Since(start)
	nextEvent(t, ev, EventParamProblem)
	// One SYN lost to the error, the next one (the kernel's retransmission after its 1 s
	// initial RTO) plain: the connection does not fail.
	if connected > 4*time.Second {
		t.Errorf("connected after %v", connected)
	}
	waitAdvance(t, 5*time.Second, 1<<20, "the stream to the plain peer", map[string]*bulk{"A->P": s})
	sess, err := da.GetSession(nidA, nidB)
	must(t, err)
	if sess.Flags&SessionIPv6Fallback == 0 {
		t.Errorf("session flags %v: no ipv6-fallback", sess.Flags)
	}
	if n := counter(t, da, "ingress_param_problems"); n == 0 {
		t.Error("no Parameter Problem counted")
	}
	if n := counter(t, da, "egress_fallback_ipv6"); n == 0 {
		t.Error("nothing sent as plain IPv6")
	}

	// The session gone (idle), a new connection to the same address starts as plain IPv6:
	// no SYN lost to a second Parameter Problem.
	must(t, da.DeleteSession(nidA, nidB))
	problems := counter(t, da, "ingress_param_problems")
	s2 := startBulk(ctx, t, a, p, netip.AddrPortFrom(viewP, 5002))
	waitAdvance(t, 5*time.Second, 1<<20, "the second stream", map[string]*bulk{"A->P": s2})
	if sess, err := da.GetSession(nidA, nidB); err != nil || sess.Flags&SessionIPv6Fallback == 0 {
		t.Errorf("second session: flags %v, %v: want ipv6-fallback from the start", sess.Flags, err)
	}
	if n := counter(t, da, "ingress_param_problems"); n != problems {
		t.Errorf("second connection drew %d more parameter problems", n-problems)
	}
}
