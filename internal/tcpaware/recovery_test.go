package tcpaware

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
)

// wanDelay is the wan path's one-way delay.
const wanDelay = 100 * time.Millisecond

// wanPair is the lab's wan-wan path in small: a sender and a receiver namespace joined through
// a wire namespace whose delay line adds 100 ms each way (RTT 200 ms, no rate limit), and
// flows as the lab's iperf3 makes them (cubic, 320 KB socket buffers, sending as fast as the
// window allows). A hard handoff is emulated by the wire dropping everything it would deliver
// to the correspondents' view addresses (the ~window of segments in flight to the old locator
// are lost) and delivering it again.
type wanPair struct {
	pair
	wire  *delayLine
	every time.Duration // > 0: bulk flows write a chunk (pair.chunk, else 64 KB) per this, not back to back
}

func newWANPair(t *testing.T, views ...string) *wanPair {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "ethtool")
	p := &wanPair{pair: pair{t: t, snd: nstest.New(t, "ta-wsnd"), rcv: nstest.New(t, "ta-wrcv"), cc: "cubic"}}
	w := nstest.New(t, "ta-wire")
	nstest.Link(t, p.snd, "v0", w, "wa")
	nstest.Link(t, p.rcv, "v1", w, "wb")
	// The wire reads frames as they are: offloads off, or checksums are never finished.
	for _, x := range []struct {
		ns  *nstest.NS
		ifs []string
	}{{p.snd, []string{"v0"}}, {w, []string{"wa", "wb"}}, {p.rcv, []string{"v1"}}} {
		for _, ifname := range x.ifs {
			x.ns.Run("ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off", "tx", "off")
		}
	}
	if err := w.Do(func() (err error) {
		p.wire, err = openDelayLine("wa", "wb", wanDelay, views...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.wire.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("delay line: %v", err)
		}
	})
	p.snd.Run("ip", "addr", "add", "fd00:7b::1/64", "dev", "v0", "nodad")
	p.rcv.Run("ip", "addr", "add", "fd00:7b::2/64", "dev", "v1", "nodad")
	p.rcv.Run("ip", "link", "set", "lo", "up")
	for _, v := range views {
		p.rcv.Run("ip", "addr", "add", v+"/128", "dev", "lo")
		p.snd.Run("ip", "route", "add", v+"/128", "via", "fd00:7b::2")
	}
	return p
}

// stalled says how the delay line failed to be the path ("" when it was): off the CPU for
// more than 100 ms since its lateness was reset.
func (p *wanPair) stalled() string {
	if late := time.Duration(p.wire.worstLate.Load()); late > 100*time.Millisecond {
		return fmt.Sprintf("the wire delivered up to %v late (its RTT is 200 ms)", late)
	}
	return ""
}

// probes is how many loss probes and retransmission timeouts the sender's namespace has
// sent (TcpExt TCPLossProbes + TCPTimeouts).
func (p *wanPair) probes() uint64 {
	p.t.Helper()
	var text []byte
	if err := p.snd.Do(func() (err error) { text, err = os.ReadFile("/proc/thread-self/net/netstat"); return err }); err != nil {
		p.t.Fatal(err)
	}
	n, err := tcpExt(string(text), "TCPLossProbes", "TCPTimeouts")
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// tcpExt sums the named TcpExt counters of a /proc/net/netstat text.
func tcpExt(text string, names ...string) (uint64, error) {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		keys, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(keys) == 0 || keys[0] != "TcpExt:" || len(vals) != len(keys) || vals[0] != "TcpExt:" {
			continue
		}
		var sum uint64
		found := 0
		for j, k := range keys {
			if slices.Contains(names, k) {
				v, err := strconv.ParseUint(vals[j], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("netstat %s: %w", k, err)
				}
				sum += v
				found++
			}
		}
		if found != len(names) {
			return 0, fmt.Errorf("netstat: %d of %v in TcpExt", found, names)
		}
		return sum, nil
	}
	return 0, fmt.Errorf("netstat: no TcpExt lines")
}

// bulk is a flow that writes as fast as its 320 KB send buffer allows, as iperf3 -w 320K does.
func (p *wanPair) bulk(ctx context.Context, view string) *flow {
	t := p.t
	bufs := func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			for _, o := range []int{unix.SO_SNDBUF, unix.SO_RCVBUF} {
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o, 320<<10)
				}
			}
			if serr == nil {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, p.cc)
			}
		}); err != nil {
			return err
		}
		return serr
	}
	var ln net.Listener
	lc := net.ListenConfig{Control: bufs}
	if err := p.rcv.Do(func() (err error) { ln, err = lc.Listen(ctx, "tcp6", "["+view+"]:5001"); return err }); err != nil {
		t.Fatal(err)
	}
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
	d := net.Dialer{Timeout: 5 * time.Second, Control: bufs}
	var c net.Conn
	if err := p.snd.Do(func() (err error) { c, err = d.DialContext(ctx, "tcp6", "["+view+"]:5001"); return err }); err != nil {
		t.Fatal(err)
	}
	f.conn = c.(*net.TCPConn)
	t.Cleanup(func() { f.conn.Close() })
	chunk, every := 64<<10, time.Microsecond
	if p.every > 0 {
		every = p.every
	}
	if p.chunk > 0 {
		chunk = p.chunk
	}
	go func() { _ = nstest.WritePattern(ctx, f.conn, chunk, every) }()
	return f
}

// sample is one TCP_INFO reading of a sender, relative to the move's end.
type sample struct {
	at                          time.Duration
	state, caState              uint8
	cwnd, ssthresh, unacked     uint32
	lost, retrans, totalRetrans uint32
	rto                         uint32
	received                    int64
	notsent                     uint32 // bytes the application has queued and TCP not sent
	rwndLimited, busy           uint64 // µs limited by the receive window, µs with data in flight
}

type trace struct {
	mu      sync.Mutex
	samples []sample
	stop    atomic.Bool
	done    chan struct{}
}

// minRTT is the smallest RTT f's sender has measured.
func (f *flow) minRTT(t *testing.T) time.Duration {
	return time.Duration(f.info(t).Min_rtt) * time.Microsecond
}

// tcpInfo is TCP_INFO of f's socket (an error once the socket is closed).
func (f *flow) tcpInfo() (*unix.TCPInfo, error) {
	rc, err := f.conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var ti *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return nil, err
	}
	return ti, gerr
}

// record samples f every 10 ms from now until stop (finished by the test's cleanup at the
// latest) or until its socket is gone.
func record(t *testing.T, f *flow, origin func() time.Time) *trace {
	tr := &trace{done: make(chan struct{})}
	t.Cleanup(func() { tr.finish() })
	go func() {
		defer close(tr.done)
		for !tr.stop.Load() {
			ti, err := f.tcpInfo()
			if err != nil {
				return
			}
			tr.mu.Lock()
			tr.samples = append(tr.samples, sample{at: time.Since(origin()), state: ti.State, caState: ti.Ca_state,
				cwnd: ti.Snd_cwnd, ssthresh: ti.Snd_ssthresh, unacked: ti.Unacked, lost: ti.Lost, retrans: ti.Retrans,
				totalRetrans: ti.Total_retrans, rto: ti.Rto, received: f.received.Load(),
				notsent: ti.Notsent_bytes, rwndLimited: ti.Rwnd_limited, busy: ti.Busy_time})
			tr.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return tr
}

func (tr *trace) finish() []sample {
	tr.stop.Store(true)
	<-tr.done
	return tr.snapshot()
}

// snapshot copies the samples so far.
func (tr *trace) snapshot() []sample {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]sample(nil), tr.samples...)
}

func (tr *trace) String() string {
	var b strings.Builder
	for _, s := range tr.snapshot() {
		fmt.Fprintf(&b, "%6dms ca=%d cwnd=%d ssth=%d unacked=%d lost=%d retrans=%d total=%d rcvd=%d notsent=%d rwndlim=%dus\n",
			s.at.Milliseconds(), s.caState, s.cwnd, s.ssthresh, s.unacked, s.lost, s.retrans, s.totalRetrans, s.received, s.notsent, s.rwndLimited)
	}
	return b.String()
}

// episode is a sender's recovery from the move as its trace shows it.
type episode struct {
	lostMax   uint32        // segments marked lost (those in flight to the dead path)
	minCwnd   uint32        // the smallest window during the recovery
	start     time.Duration // recovery entered, after the move's end
	repair    time.Duration // from entering recovery to the state Open again
	timeout   bool          // a retransmission timeout (state Loss) happened instead
	recovered bool
}

func recoveryOf(samples []sample) episode {
	var e episode
	in := false
	for _, s := range samples {
		if s.at < 0 {
			continue
		}
		switch {
		case s.caState == 4:
			e.timeout = true
		case !in && s.caState == 3:
			in, e.start, e.minCwnd = true, s.at, s.cwnd
		}
		if !in {
			continue
		}
		e.lostMax = max(e.lostMax, s.lost)
		if s.caState == 0 || s.caState == 1 {
			e.repair, e.recovered = s.at-e.start, true
			return e
		}
		e.minCwnd = min(e.minCwnd, s.cwnd)
	}
	return e
}

// The lab's wan-wan hard handoff, CN side: two cubic flows at their 320 KB window lose every
// segment in flight for 300 ms (the dead path); the loss-probe after the path works again is
// SACKed, so the CN repairs the hole in SACK fast recovery, no timeout. Only the "on" flow's
// correspondent gets the move's end (the LU applied on the CN, no RTT). With the kernel's PRR
// the "off" flow's window falls to a few segments and doubles per RTT; the wrapper's
// cong_control holds the "on" flow's window at what was in flight, so its lost segments go
// out within about an RTT and the repair takes under half as long.
//
// The path after the move is 2 ms longer each way (RTT 204 ms): Linux's RACK dismisses the SACK
// of a retransmitted segment that came back sooner than the flow's min RTT (tcp_rack_advance:
// the original might have been SACKed), so a loss probe that retransmitted over a path as fast
// as the old one, and a fraction of a millisecond quicker than the flow's best sample (the
// delay line is late by a varying ~0.1-0.7 ms), marks nothing lost: the sender stays in
// Disorder until its RTO, with or without the wrapper. CI saw that once (min RTT 200.69 ms);
// a move to a path known not to be faster is the scenario here. An attempt whose flows' min RTT
// before the cut was already above the new path's runs again.
//
// The scenario needs the cut to end before either sender's loss probe (about 2 RTT after its
// last transmission): a probe sent into the dead path is lost and the kernel then times out
// whatever the congestion control does. When a busy machine delays the heal that far (the
// sender namespace's TCPLossProbes/TCPTimeouts moved during the cut), or the delay line was
// off the CPU for more than 100 ms from the cut to the end of the repairs (its forwarder is
// this process's), or the "off" flow, the kernel alone and the control, did not show the SACK
// recovery with PRR's collapse, the attempt says so and the scenario runs again, at most three
// times. The "on" flow must show the held repair every time.
func TestFastRecoveryHoldAB(t *testing.T) {
	untilPreconditionHolds(t, func(t *testing.T) string {
		r, why := holdAttempt(t)
		if why == "" {
			r.check(t)
		}
		return why
	})
}

// untilPreconditionHolds runs attempt up to three times, until its scenario's precondition
// held (it returned ""; it checked its result then): an attempt whose precondition failed (the
// machine's timing, not the code under test) is logged and redone.
func untilPreconditionHolds(t *testing.T, attempt func(*testing.T) (why string)) {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		why := attempt(t)
		if why == "" {
			return
		}
		t.Logf("attempt %d: %s", i, why)
		if i == attempts {
			t.Fatalf("the scenario's precondition never held in %d attempts: %s", attempts, why)
		}
	}
}

type holdResult struct {
	eon, eoff episode
	counters  map[string]uint64
	ton, toff string
}

// holdAttempt runs the scenario once; why is the precondition it lacked ("" when it held).
func holdAttempt(t *testing.T) (r holdResult, why string) {
	const on, off = "fd00:aa::4", "fd00:bb::4"
	const newPathDelay = wanDelay + 2*time.Millisecond
	p := newWANPair(t, on, off)
	l := loadNow(t, true)
	defer unload(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fon, foff := p.bulk(ctx, on), p.bulk(ctx, off)
	defer fon.conn.Close() // before the wrapper is unregistered
	defer foff.conn.Close()
	time.Sleep(3 * time.Second)
	var healed atomic.Pointer[time.Time]
	future := time.Now().Add(time.Hour) // samples before the move's end count as negative
	healed.Store(&future)
	origin := func() time.Time { return *healed.Load() }
	ton, toff := record(t, fon, origin), record(t, foff, origin)
	defer ton.finish()
	defer toff.finish()
	minOn, minOff := fon.minRTT(t), foff.minRTT(t)
	before := p.probes()
	p.wire.worstLate.Store(0) // the wire's stalls count from the cut on
	if m := max(minOn, minOff); m >= 2*newPathDelay {
		return r, fmt.Sprintf("min RTT before the cut on %v, off %v: not below the new path's %v, whose loss probe RACK could dismiss", minOn, minOff, 2*newPathDelay)
	}
	p.wire.setDelay(newPathDelay)
	p.wire.cut(true)
	cutAt := time.Now()
	time.Sleep(300 * time.Millisecond)
	p.wire.cut(false)
	now := time.Now()
	healed.Store(&now)
	if n := p.probes() - before; n > 0 {
		return r, fmt.Sprintf("the cut lasted %v and the senders sent %d loss probes or timeouts into it (wire: %v)", now.Sub(cutAt), n, p.wire)
	}
	if why := p.stalled(); why != "" {
		return r, fmt.Sprintf("during the cut of %v %s", now.Sub(cutAt), why)
	}
	u, ok := NewPolicy(true).MoveEnded(netip.MustParseAddr(on), 0)
	if !ok {
		t.Fatal("policy did not end the move")
	}
	if err := l.SetPeer(u.Peer, u.Entry); err != nil {
		t.Fatal(err)
	}
	p.revert(p.run(l))
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r.eon, r.eoff = recoveryOf(ton.snapshot()), recoveryOf(toff.snapshot())
		if r.eon.recovered && r.eoff.recovered {
			break
		}
	}
	ton.finish()
	toff.finish()
	var err error
	if r.counters, err = l.Counters(); err != nil {
		t.Fatal(err)
	}
	t.Logf("cut %v; wire: %v; min RTT before the cut: on %v, off %v", now.Sub(cutAt), p.wire, minOn, minOff)
	if why := p.stalled(); why != "" {
		return r, why
	}
	r.ton, r.toff = ton.String(), toff.String()
	// The "off" flow is the control, the kernel alone: an attempt in which it did not show
	// the SACK recovery with PRR's collapse cannot show what the hold changes.
	switch e := r.eoff; {
	case !e.recovered || e.timeout:
		return r, fmt.Sprintf("the kernel's own flow did not repair the move in fast recovery: %+v", e)
	case e.lostMax < 16 || 2*e.minCwnd >= e.lostMax:
		return r, fmt.Sprintf("the kernel's own flow kept a window of %d for %d lost segments: not the PRR collapse this test is about", e.minCwnd, e.lostMax)
	}
	return r, ""
}

func (r holdResult) check(t *testing.T) {
	eon, eoff, c := r.eon, r.eoff, r.counters
	t.Logf("on: %+v\noff: %+v\ncounters %v", eon, eoff, c)
	defer func() {
		if t.Failed() {
			t.Logf("on trace:\n%s\noff trace:\n%s", r.ton, r.toff)
		}
	}()
	if !eon.recovered || eon.timeout {
		t.Fatalf("want the on flow to repair the move in fast recovery without a timeout, as the off flow did: on %+v, off %+v", eon, eoff)
	}
	if eon.lostMax < 16 {
		t.Fatalf("too few segments lost at the move (on %d, off %d): the on flow did not fill its window", eon.lostMax, eoff.lostMax)
	}
	if c["tcpaware_holds"] != 1 || c["tcpaware_hold_aborted"] != 0 {
		t.Errorf("holds %d, aborted %d: want the one recovery held to its end", c["tcpaware_holds"], c["tcpaware_hold_aborted"])
	}
	if 2*eon.minCwnd < eon.lostMax {
		t.Errorf("on: window fell to %d during the recovery of %d lost segments, want it held", eon.minCwnd, eon.lostMax)
	}
	if 2*eon.repair >= eoff.repair {
		t.Errorf("repair on %v, off %v: want on under half of off", eon.repair, eoff.repair)
	}
}
