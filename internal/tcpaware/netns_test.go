package tcpaware

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
)

// pair is a sender namespace and a receiver namespace whose correspondents' session views are
// /128s on the receiver's lo, reached over one veth link. A correspondent's "move" is emulated
// by dropping everything sent to its view address at the receiver (the old locator is dead)
// and then accepting it again (the new locator works).
type pair struct {
	t        *testing.T
	snd, rcv *nstest.NS
}

func newPair(t *testing.T, views ...string) *pair {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "nft")
	p := &pair{t: t, snd: nstest.New(t, "ta-snd"), rcv: nstest.New(t, "ta-rcv")}
	nstest.Link(t, p.snd, "v0", p.rcv, "v1")
	p.snd.Run("ip", "addr", "add", "fd00:7a::1/64", "dev", "v0", "nodad")
	p.rcv.Run("ip", "addr", "add", "fd00:7a::2/64", "dev", "v1", "nodad")
	p.rcv.Run("ip", "link", "set", "lo", "up")
	for _, v := range views {
		p.rcv.Run("ip", "addr", "add", v+"/128", "dev", "lo")
		p.snd.Run("ip", "route", "add", v+"/128", "via", "fd00:7a::2")
	}
	p.rcv.Run("nft", "add table inet ta; add chain inet ta in { type filter hook prerouting priority 0; }")
	return p
}

func (p *pair) cut(view string) {
	p.rcv.Run("nft", "add rule inet ta in ip6 daddr "+view+" drop")
}

func (p *pair) heal() {
	p.rcv.Run("nft", "flush chain inet ta in")
}

// flow is a paced stream from the sender to one view, its received-byte count, and the
// sender's socket for TCP_INFO.
type flow struct {
	conn     *net.TCPConn
	received atomic.Int64
}

func (p *pair) flow(ctx context.Context, view string) *flow {
	t := p.t
	ln := p.rcv.Listen("tcp6", "["+view+"]:5001")
	t.Cleanup(func() { ln.Close() })
	f := &flow{}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = nstest.ReadPattern(ctx, c, &f.received)
	}()
	f.conn = p.snd.Dial("tcp6", "["+view+"]:5001").(*net.TCPConn)
	t.Cleanup(func() { f.conn.Close() })
	go func() { _ = nstest.WritePattern(ctx, f.conn, 16<<10, time.Millisecond) }()
	return f
}

func (f *flow) info(t *testing.T) *unix.TCPInfo {
	t.Helper()
	rc, err := f.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ti *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatalf("TCP_INFO: %v", gerr)
	}
	return ti
}

func (f *flow) rtoMax(t *testing.T) int {
	t.Helper()
	rc, err := f.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, 44) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatalf("TCP_RTO_MAX_MS: %v", gerr)
	}
	return v
}

func (p *pair) run(l *Loaded) []Socket {
	p.t.Helper()
	var socks []Socket
	if err := p.snd.Do(func() (err error) { socks, err = l.Run(); return err }); err != nil {
		p.t.Fatal(err)
	}
	return socks
}

func (p *pair) revert(socks []Socket) int {
	p.t.Helper()
	var n int
	if err := p.snd.Do(func() (err error) { n, err = Revert(socks); return err }); err != nil {
		p.t.Fatal(err)
	}
	return n
}

func load(t *testing.T) *Loaded {
	t.Helper()
	l, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

func waitGrowth(f *flow, from int64, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit {
		if f.received.Load() > from {
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return limit
}

const (
	viewA = "fd00:aa::1"
	viewB = "fd00:bb::1"
)

// Two correspondents lose their path at once; only A is signalled. While A moves its sockets'
// RTO is capped at 1 s (TCP_INFO rto, TCP_RTO_MAX_MS) and B's keeps backing off; at the end of
// A's move A's timer is reverted and it delivers again at once, B's sockets are untouched.
func TestReactionOnPeerSocketsOnly(t *testing.T) {
	p := newPair(t, viewA, viewB)
	l := load(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := p.flow(ctx, viewA), p.flow(ctx, viewB)
	time.Sleep(300 * time.Millisecond)
	if a.received.Load() == 0 || b.received.Load() == 0 {
		t.Fatal("flows did not start")
	}
	p.cut(viewA)
	p.cut(viewB)
	if err := l.SetPeer(netip.MustParseAddr(viewA), Peer{Epoch: 1, Moving: 1, RtoMaxMs: 1000}); err != nil {
		t.Fatal(err)
	}
	socks := p.run(l)
	if len(socks) != 1 || socks[0].Remote.Addr().String() != viewA || socks[0].Applied != AppliedRTOMax {
		t.Fatalf("moving run matched %+v, want A's one socket with TCP_RTO_MAX_MS set", socks)
	}
	if got := a.rtoMax(t); got != 1000 {
		t.Errorf("A's TCP_RTO_MAX_MS = %d, want 1000", got)
	}
	if got := b.rtoMax(t); got != 120000 {
		t.Errorf("B's TCP_RTO_MAX_MS = %d, want 120000 (untouched)", got)
	}
	time.Sleep(3500 * time.Millisecond)
	ia, ib := a.info(t), b.info(t)
	t.Logf("after 3.5 s cut: A rto=%dus backoff=%d cwnd=%d rtt=%dus; B rto=%dus backoff=%d cwnd=%d rtt=%dus",
		ia.Rto, ia.Backoff, ia.Snd_cwnd, ia.Rtt, ib.Rto, ib.Backoff, ib.Snd_cwnd, ib.Rtt)
	if ia.Rto > 1000000 {
		t.Errorf("A's RTO %d us while moving, want <= 1 s", ia.Rto)
	}
	if ib.Rto <= 1000000 {
		t.Errorf("B's RTO %d us, want its ordinary backoff beyond 1 s", ib.Rto)
	}
	p.heal()
	if err := l.SetPeer(netip.MustParseAddr(viewA), Peer{Epoch: 1, RtoMaxMs: 120000}); err != nil {
		t.Fatal(err)
	}
	ra, rb := a.received.Load(), b.received.Load()
	socks = p.run(l)
	if len(socks) != 1 {
		t.Fatalf("settled run matched %d sockets, want 1", len(socks))
	}
	t.Logf("settled: %+v", socks[0])
	n := p.revert(socks)
	da := waitGrowth(a, ra, 2*time.Second)
	ia, ib = a.info(t), b.info(t)
	t.Logf("%d revert messages; A delivered again after %s; A rto=%dus backoff=%d; B rto=%dus backoff=%d",
		n, da, ia.Rto, ia.Backoff, ib.Rto, ib.Backoff)
	if n == 0 || da > 300*time.Millisecond {
		t.Errorf("A delivered again %s after the move's end (%d revert messages), want < 300 ms", da, n)
	}
	if b.received.Load() != rb || ib.Backoff == 0 {
		t.Errorf("B was touched: received %d -> %d, backoff %d", rb, b.received.Load(), ib.Backoff)
	}
	if got := a.rtoMax(t); got != 120000 {
		t.Errorf("A's TCP_RTO_MAX_MS = %d after the move, want 120000 restored", got)
	}
}

// A/B: two identical flows lose their path for 3.2 s (a hard handoff whose LU-ACK comes late);
// the "on" flow's correspondent is signalled at the move's start and end, the "off" flow is
// left to TCP. Recovery (the move's end to the first new byte delivered) and the bytes
// delivered in the 2 s after it must both be better with the reactions.
func TestHardHandoffRecoveryAB(t *testing.T) {
	const on, off = "fd00:aa::2", "fd00:bb::2"
	p := newPair(t, on, off)
	l := load(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fon, foff := p.flow(ctx, on), p.flow(ctx, off)
	time.Sleep(300 * time.Millisecond)
	pol := NewPolicy(true)
	p.cut(on)
	p.cut(off)
	u, ok := pol.MoveStarted(netip.MustParseAddr(on))
	if !ok {
		t.Fatal("policy did not start the move")
	}
	if err := l.SetPeer(u.Peer, u.Entry); err != nil {
		t.Fatal(err)
	}
	p.run(l)
	time.Sleep(3200 * time.Millisecond)

	p.heal()
	healed := time.Now()
	u, ok = pol.MoveEnded(netip.MustParseAddr(on), 0, healed)
	if !ok || !u.Revert {
		t.Fatalf("policy at the move's end: %+v %v", u, ok)
	}
	if err := l.SetPeer(u.Peer, u.Entry); err != nil {
		t.Fatal(err)
	}
	ron, roff := fon.received.Load(), foff.received.Load()
	p.revert(p.run(l))
	var recOn, recOff time.Duration
	won, woff := int64(-1), int64(-1)
	for recOn == 0 || recOff == 0 || won < 0 {
		el := time.Since(healed)
		if el > 8*time.Second {
			t.Fatalf("no recovery within 8 s: on %v off %v", recOn, recOff)
		}
		if recOn == 0 && fon.received.Load() > ron {
			recOn = el
		}
		if recOff == 0 && foff.received.Load() > roff {
			recOff = el
		}
		// Bytes in the 2 s window after the move's end (the flows are paced at ~128 Mbit/s).
		if won < 0 && el >= 2*time.Second {
			won, woff = fon.received.Load()-ron, foff.received.Load()-roff
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("recovery: on %v, off %v; bytes in the 2 s after the move: on %d, off %d", recOn, recOff, won, woff)
	if recOn > 300*time.Millisecond || 2*recOn > recOff {
		t.Errorf("recovery on %v, off %v: want on < 300 ms and under half of off", recOn, recOff)
	}
	if won <= woff {
		t.Errorf("bytes after the move: on %d <= off %d", won, woff)
	}
}
