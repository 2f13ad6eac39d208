package tcpaware

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// reduction is one fast recovery in a trace: the window before it, the ssthresh it set, the
// smallest window during it, the window when it ended and the largest one after that.
type reduction struct {
	before, ssthresh, min, after, grown uint32
	found                               bool
}

func firstReduction(samples []sample) reduction {
	var r reduction
	for i := 1; i < len(samples); i++ {
		s, prev := samples[i], samples[i-1]
		if !r.found {
			if s.caState == 3 && prev.caState <= 1 {
				r = reduction{before: prev.cwnd, ssthresh: s.ssthresh, min: s.cwnd, found: true}
			}
			continue
		}
		if s.caState <= 1 {
			r.after = s.cwnd
			for _, later := range samples[i:] {
				r.grown = max(r.grown, later.cwnd)
			}
			return r
		}
		if s.caState != 3 {
			return reduction{} // a timeout interrupted it
		}
		r.min = min(r.min, s.cwnd)
	}
	return reduction{}
}

// Outside a loss window the wrapper's cong_control must do what the kernel does for cubic
// (with cong_control set the kernel skips its own PRR, cubic's growth, the pacing update and
// cwnd = ssthresh at the end of a recovery). Two cubic flows through a 40 Mbit/s bottleneck,
// one on the wrapper with its window already over, lose three segments each: both recoveries
// must look the same, the kernel's: ssthresh = 0.7 x the window, the window = ssthresh when
// the recovery ends and cubic's growth after it (the smallest window in between, PRR's, is logged: it depends on how many
// more segments the bottleneck dropped).
func TestWrapperOutsideWindowIsCubic(t *testing.T) {
	const viewW, viewC = "fd00:aa::5", "fd00:bb::5"
	p := newPair(t, viewW, viewC)
	p.cc = "cubic"
	p.snd.Run("tc", "qdisc", "add", "dev", "v0", "root", "tbf", "rate", "40mbit", "burst", "16kb", "latency", "50ms")
	l := load(t)
	if l.CwndErr != nil {
		t.Fatalf("cubic wrapper: %v", l.CwndErr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, c := p.flow(ctx, viewW), p.flow(ctx, viewC)
	// A one-millisecond window: the socket moves to the wrapper and its window is over at once.
	if err := l.SetPeer(netip.MustParseAddr(viewW), Peer{Epoch: 1, LossWindowMs: 1}); err != nil {
		t.Fatal(err)
	}
	p.run(l)
	if cc := w.congestion(t); cc != l.WrapperName() {
		t.Fatalf("congestion control %q, want the wrapper", cc)
	}
	time.Sleep(1500 * time.Millisecond)
	start := time.Now()
	origin := func() time.Time { return start }
	tw, tc := record(t, w, origin), record(t, c, origin)
	time.Sleep(200 * time.Millisecond)
	// Each rule drops the first three segments it sees of its flow, once.
	for _, v := range []string{viewW, viewC} {
		p.rcv.Run("nft", "add rule inet ta in ip6 daddr "+v+" tcp dport 5001 numgen inc mod 1000000000 < 3 drop")
	}
	var rw, rc reduction
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !(rw.after > 0 && rc.after > 0); time.Sleep(100 * time.Millisecond) {
		rw, rc = firstReduction(tw.snapshot()), firstReduction(tc.snapshot())
	}
	time.Sleep(time.Second) // cubic's growth after the recovery
	rw, rc = firstReduction(tw.finish()), firstReduction(tc.finish())
	cnt, err := l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrapper %+v\ncubic   %+v\ncounters %v", rw, rc, cnt)
	if !rw.found || !rc.found || rw.after == 0 || rc.after == 0 {
		t.Fatalf("want a completed fast recovery in both flows:\nwrapper:\n%s\ncubic:\n%s", tw, tc)
	}
	if cnt["tcpaware_ssthresh_kept"] != 0 || cnt["tcpaware_holds"] != 0 {
		t.Errorf("the window reacted outside its time: %v", cnt)
	}
	for _, x := range []struct {
		name string
		r    reduction
	}{{"wrapper", rw}, {"cubic", rc}} {
		r := x.r
		if lo, hi := r.before*6/10, r.before*8/10+1; r.ssthresh < lo || r.ssthresh > hi {
			t.Errorf("%s: ssthresh %d after a window of %d, want cubic's 0.7x", x.name, r.ssthresh, r.before)
		}
		if r.after+2 < r.ssthresh || r.after > r.ssthresh+r.ssthresh/10+2 {
			t.Errorf("%s: window %d when the recovery ended, want ssthresh %d", x.name, r.after, r.ssthresh)
		}
		if r.grown <= r.after {
			t.Errorf("%s: window did not grow in the second after the recovery (%d, at its end %d)", x.name, r.grown, r.after)
		}
	}
}
