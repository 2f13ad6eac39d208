package tcpaware

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"ilnp/internal/nstest"
)

// softPair is the lab's wan-lan soft handoff in small: the wan pair's slow path (the delay
// line, RTT 200 ms) and a direct link (the new, faster path, RTT well under a millisecond).
// Both correspondents' flows start on the slow path; the switch moves the sender's packets to
// them onto the fast link (the sender's route) and the receiver's ACKs too (its route back),
// in the order the handoff does it: the MN first, the CN when its LU arrives. The old path
// keeps working (make-before-break), so nothing is lost: every retransmission is spurious.
type softPair struct {
	*wanPair
	views []string
}

const (
	softSender   = "fd00:7b::1" // the sender's address on the slow path, its sockets' source
	softFastSnd  = "fd00:7e::1"
	softFastRcvr = "fd00:7e::2"
)

func newSoftPair(t *testing.T, views ...string) *softPair {
	p := &softPair{wanPair: newWANPair(t, views...), views: views}
	nstest.Link(t, p.snd, "f0", p.rcv, "f1")
	p.snd.Run("ip", "addr", "add", softFastSnd+"/64", "dev", "f0", "nodad")
	p.rcv.Run("ip", "addr", "add", softFastRcvr+"/64", "dev", "f1", "nodad")
	return p
}

// route points dst (a /128) via gw on dev in ns, at once (netlink from this process: no
// command to start between the drain and the switch).
func route(ns *nstest.NS, dst, gw, dev string) error {
	return ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("link %s: %w", dev, err)
		}
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: netlink.NewIPNet(net.ParseIP(dst)), Gw: net.ParseIP(gw)}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, gw, err)
		}
		return nil
	})
}

// switchSender moves the sender's packets to every view onto the fast link.
func (p *softPair) switchSender() {
	for _, v := range p.views {
		if err := route(p.snd, v, softFastRcvr, "f0"); err != nil {
			p.t.Fatal(err)
		}
	}
}

// switchReceiver moves the receiver's ACKs onto the fast link.
func (p *softPair) switchReceiver() {
	if err := route(p.rcv, softSender, softFastSnd, "f1"); err != nil {
		p.t.Fatal(err)
	}
}

// A soft handoff to a faster path (the lab's wan-lan, ilnp-soft): segments sent on the new
// path overtake those still in flight on the old one, the receiver SACKs the newer ones first
// and the sender's RACK retransmits the older ones, which then arrive anyway. With the drain
// (Policy.Switching before the switch) the "on" flow's new data waits until the old path's
// is acknowledged or can no longer be overtaken: 0 retransmissions (TCP_INFO total_retrans),
// and no less delivered in the second after the switch than the "off" flow. Both orders of
// the handoff: the CN as sender (the MN's ACKs switch first, the drain starts when the CN
// applies the LU) and the MN as sender (the drain starts before its own switch, its peer's
// ACKs follow). Nothing is lost on either path, so every retransmission is spurious.
//
// The "off" flow is the control: it must show the spurious retransmissions (at least 10);
// an attempt where it did not, where the delay line was off the CPU for more than 100 ms, or
// where the sender's namespace sent a loss probe or timed out (an ACK delayed by a busy
// machine) while the on flow retransmitted, runs again, at most three times. The "on" flow
// must show none every time.
func TestSoftHandoffNoSpuriousRetransmissions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		peerFirst bool
	}{{"CN sends, MN switched first", true}, {"MN sends, switches first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			untilPreconditionHolds(t, func(t *testing.T) string {
				r, why := softAttempt(t, tc.peerFirst)
				if why == "" {
					r.check(t)
				}
				return why
			})
		})
	}
}

type softResult struct {
	retransOn, retransOff     uint32
	deliveredOn, deliveredOff int64 // bytes in the second after the switch
	applied                   uint8
	counters                  map[string]uint64
	traceOn                   string
}

func softAttempt(t *testing.T, peerFirst bool) (r softResult, why string) {
	const on, off = "fd00:aa::6", "fd00:bb::6"
	p := newSoftPair(t, on, off)
	// 8 Mbit/s, below what the window carries over 200 ms: segments leave evenly as they are
	// written, so about half an RTT's worth is always on its way (a flow limited by its
	// window sends it in bursts, and a switch between them has nothing to overtake).
	p.chunk, p.every = 2<<10, 2*time.Millisecond
	l := loadNow(t, true)
	defer unload(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fon, foff := p.bulk(ctx, on), p.bulk(ctx, off)
	defer fon.conn.Close() // before the wrapper is unregistered
	defer foff.conn.Close()
	time.Sleep(3 * time.Second)
	ion, ioff := fon.info(t), foff.info(t)
	if ion.Unacked < 60 || ioff.Unacked < 60 {
		return r, fmt.Sprintf("the flows had %d and %d segments in flight before the switch, want 200 ms of an 8 Mbit/s flow", ion.Unacked, ioff.Unacked)
	}
	switched := time.Now()
	tr := record(t, fon, func() time.Time { return switched })
	p.wire.worstLate.Store(0)
	u, ok := NewPolicy(true).Switching(netip.MustParseAddr(on), peerFirst)
	if !ok {
		t.Fatal("policy gave no drain")
	}
	if err := l.SetPeer(u.Peer, u.Entry); err != nil {
		t.Fatal(err)
	}
	rcvOn, rcvOff := fon.received.Load(), foff.received.Load()
	probesBefore := p.probes()
	if peerFirst {
		p.switchReceiver()
		time.Sleep(3 * time.Millisecond) // the LU's way and the daemon's
	}
	switched = time.Now()
	for _, s := range p.run(l) {
		if s.Remote.Addr().String() == on {
			r.applied |= s.Applied
		}
	}
	p.switchSender()
	if !peerFirst {
		time.Sleep(3 * time.Millisecond)
		p.switchReceiver()
	}
	// The reordering's retransmissions come within the old path's RTT of the switch (and
	// the drain lasts at most 1.5 of it): counted to 600 ms after it.
	time.Sleep(600 * time.Millisecond)
	jon, joff := fon.info(t), foff.info(t)
	r.retransOn, r.retransOff = jon.Total_retrans-ion.Total_retrans, joff.Total_retrans-ioff.Total_retrans
	probes := p.probes() - probesBefore
	time.Sleep(400 * time.Millisecond)
	r.deliveredOn, r.deliveredOff = fon.received.Load()-rcvOn, foff.received.Load()-rcvOff
	tr.finish()
	r.traceOn = tr.String()
	var err error
	if r.counters, err = l.Counters(); err != nil {
		t.Fatal(err)
	}
	t.Logf("retransmissions in 600 ms on %d, off %d (loss probes and timeouts %d); delivered in the second after the switch on %d, off %d bytes; wire: %v",
		r.retransOn, r.retransOff, probes, r.deliveredOn, r.deliveredOff, p.wire)
	if why := p.stalled(); why != "" {
		return r, why
	}
	// A loss probe on a fast path means an ACK came late: the machine, not the handoff.
	if probes > 0 && r.retransOn > 0 {
		return r, fmt.Sprintf("the sender sent %d loss probes or timeouts in the 600 ms after the switch (on retransmitted %d)", probes, r.retransOn)
	}
	if r.retransOff < 10 {
		return r, fmt.Sprintf("the kernel's own flow retransmitted %d segments: not the reordering this test is about", r.retransOff)
	}
	return r, ""
}

func (r softResult) check(t *testing.T) {
	c := r.counters
	t.Logf("counters %v", c)
	defer func() {
		if t.Failed() {
			t.Logf("on trace:\n%s", r.traceOn)
		}
	}()
	if r.applied&AppliedDrain == 0 {
		t.Fatalf("the iterator did not start a drain on the on flow's socket (applied %#x)", r.applied)
	}
	if c["tcpaware_drains"] != 1 || c["tcpaware_drain_expired"] != 0 || c["tcpaware_drain_not_faster"] != 0 {
		t.Errorf("drains %d, expired %d, ended as not faster %d: want one drain, ended when the old path's data was acknowledged",
			c["tcpaware_drains"], c["tcpaware_drain_expired"], c["tcpaware_drain_not_faster"])
	}
	if r.retransOn != 0 {
		t.Errorf("on: %d segments retransmitted across the soft switch (off: %d), want 0", r.retransOn, r.retransOff)
	}
	if 10*r.deliveredOn < 8*r.deliveredOff {
		t.Errorf("on delivered %d bytes in the second after the switch, off %d: want at least 80%%", r.deliveredOn, r.deliveredOff)
	}
}
