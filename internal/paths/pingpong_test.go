package paths

import (
	"testing"
	"time"
)

// end is one node's view of a pair in a two-ended simulation: its tracker, the datapath's
// counters of the pair, and when its daemon steps.
type end struct {
	tr     *Tracker
	l      link
	offset int // ms within each 20-ms poll period
	next   time.Time
	probes []int // ms of every probe sent
	states []timedChange
}

// pairSim runs both ends of one pair with a fake clock, 1 ms at a time: data each end sends
// arrives at the other one way later; a probe arrives at the peer (a receipt there) and the
// peer's kernel echoes it at once (sent there as a probe, not as data: bpf/lib/paths.h), which
// arrives back one way later (a receipt, and the probe's answer).
type pairSim struct {
	ends   [2]*end
	oneWay int // ms
	queue  map[int][]func(now time.Time)
}

func newPairSim(t *testing.T, oneWay int) *pairSim {
	s := &pairSim{oneWay: oneWay, queue: map[int][]func(time.Time){}}
	for i := range s.ends {
		s.ends[i] = &end{tr: newTracker(t), offset: 10 * i}
	}
	return s
}

func (s *pairSim) later(ms int, f func(now time.Time)) { s.queue[ms] = append(s.queue[ms], f) }

// run advances from..end; sends(i, ms) says whether end i sends data at ms.
func (s *pairSim) run(from, to int, sends func(i, ms int) bool) {
	for ms := from; ms <= to; ms++ {
		now := at(ms)
		for _, f := range s.queue[ms] {
			f(now)
		}
		delete(s.queue, ms)
		for i, e := range s.ends {
			peer := s.ends[1-i]
			if sends(i, ms) {
				e.l.send(now)
				s.later(ms+s.oneWay, func(now time.Time) { peer.l.recv(now) })
			}
			if (ms-e.offset)%20 != 0 && (e.next.IsZero() || now.Before(e.next)) {
				continue
			}
			for range step(e.tr, &e.l, ms, &e.states) {
				e.probes = append(e.probes, ms)
				sent := now
				s.later(ms+s.oneWay, func(now time.Time) {
					peer.l.recv(now)  // the probe is a receipt at the peer
					peer.l.probe(now) // whose kernel echoes it
					s.later(ms+2*s.oneWay, func(now time.Time) {
						e.l.recv(now)
						e.tr.Answered(kA, sent, now)
					})
				})
			}
			e.next = e.tr.Next(now)
		}
	}
}

// TestStreamLeavesPair: a two-way stream stops using a pair (it moved to another, as after a
// failover back) while the pair stays healthy. Each end probes the stopped stream's pair once
// (the stream may have failed) and then only periodically: the idle probing, at most
// one a second per pair. The probes must not feed themselves: each end's suspect probes and
// their echoes are receipts at the other, and counted as a stream they made the other end's
// quiet look like a stream that stopped again. With a one-way delay of 5 ms both ends then
// sent 67 probes in 4 s, for good (a loaded test run's ilnpctl show paths found such a pair
// "suspect", its events alternating for seconds).
func TestStreamLeavesPair(t *testing.T) {
	for _, oneWay := range []int{1, 5, 20} {
		for _, period := range []int{2, 5, 10} {
			s := newPairSim(t, oneWay)
			const stop = 3000
			s.run(0, 8000, func(i, ms int) bool { return ms < stop && ms%period == i })
			for i, e := range s.ends {
				after := len(probesAround(e.probes, stop))
				settled := len(probesAround(e.probes, stop+1000))
				t.Logf("one way %d ms, stream every %d ms: end %d sent %d probes in the 5 s after the stream stopped, %d from 1 s after",
					oneWay, period, i, after, settled)
				if settled > 5 {
					t.Errorf("one way %d ms, stream every %d ms: end %d sent %d probes in the 4 s from 1 s after the stream left the pair, want at most 5 (one a second)",
						oneWay, period, i, settled)
				}
				for _, c := range e.states {
					if c.ms > stop && c.c.To == Dead {
						t.Errorf("end %d: the healthy pair declared dead at %d ms", i, c.ms)
					}
				}
			}
		}
	}
}
