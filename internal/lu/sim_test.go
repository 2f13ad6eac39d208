package lu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// lossyNet is an injected transport between one mobile node running the Engine and its
// correspondents, which apply every LU they receive and answer with the ACK (RFC 6743). Each
// packet is dropped by drop() and otherwise delivered after delay(), so packets reorder when
// delays vary. Time is a fake clock advanced from event to event.
type lossyNet struct {
	t      *testing.T
	e      *Engine
	now    time.Time
	drop   func(toCN bool) bool
	delay  func() time.Duration
	queue  []packet
	seq    int
	sends  []timedSend // scheduled Engine.Send calls
	cnSet  map[wire.NID][]wire.LocatorEntry
	cnRecv map[wire.NID]int

	actions []Action
	results []Result
	acksIn  map[uint64]int // ACKs delivered to the MN per exchange that was outstanding
}

type packet struct {
	at   time.Time
	seq  int
	toCN bool
	peer wire.NID
	lu   wire.LocatorUpdate
}

type timedSend struct {
	at  time.Time
	msg Message
}

func newLossyNet(t *testing.T, cfg Config) *lossyNet {
	return &lossyNet{
		t: t, e: newEngine(t, cfg), now: t0,
		drop:   func(bool) bool { return false },
		delay:  func() time.Duration { return 10 * time.Millisecond },
		cnSet:  map[wire.NID][]wire.LocatorEntry{},
		cnRecv: map[wire.NID]int{},
		acksIn: map[uint64]int{},
	}
}

func (n *lossyNet) sendAt(at time.Duration, m Message) {
	n.sends = append(n.sends, timedSend{t0.Add(at), m})
	sort.SliceStable(n.sends, func(i, j int) bool { return n.sends[i].at.Before(n.sends[j].at) })
}

func (n *lossyNet) transmit(toCN bool, peer wire.NID, lu wire.LocatorUpdate) {
	if n.drop(toCN) {
		return
	}
	n.seq++
	n.queue = append(n.queue, packet{n.now.Add(n.delay()), n.seq, toCN, peer, lu})
	sort.Slice(n.queue, func(i, j int) bool {
		if !n.queue[i].at.Equal(n.queue[j].at) {
			return n.queue[i].at.Before(n.queue[j].at)
		}
		return n.queue[i].seq < n.queue[j].seq
	})
}

func (n *lossyNet) handle(acts []Action) {
	for _, a := range acts {
		n.actions = append(n.actions, a)
		if a.Kind == Transmit {
			n.transmit(true, a.Message.Peer, a.Message.Update)
		}
	}
}

// run processes events in time order until nothing is scheduled or limit passes.
func (n *lossyNet) run(limit time.Duration) {
	end := t0.Add(limit)
	for {
		next, ok := n.e.NextDeadline()
		kind := "timer"
		if len(n.queue) > 0 && (!ok || n.queue[0].at.Before(next)) {
			next, ok, kind = n.queue[0].at, true, "packet"
		}
		if len(n.sends) > 0 && (!ok || !next.Before(n.sends[0].at)) {
			next, ok, kind = n.sends[0].at, true, "send"
		}
		if !ok || next.After(end) {
			return
		}
		n.now = next
		switch kind {
		case "send":
			s := n.sends[0]
			n.sends = n.sends[1:]
			acts, err := n.e.Send(s.msg, n.now)
			if err != nil {
				n.t.Fatalf("Send: %v", err)
			}
			n.handle(acts)
		case "timer":
			n.handle(n.e.Tick(n.now))
		case "packet":
			p := n.queue[0]
			n.queue = n.queue[1:]
			if p.toCN {
				n.cnSet[p.peer] = slices.Clone(p.lu.Locators)
				n.cnRecv[p.peer]++
				n.transmit(false, p.peer, p.lu.Ack())
				continue
			}
			if x, ok := n.e.Outstanding(p.peer); ok && slices.Equal(x.Message.Update.Locators, p.lu.Locators) {
				n.acksIn[x.Exchange]++
			}
			res, acts := n.e.Ack(p.peer, p.lu, n.now)
			n.results = append(n.results, res)
			n.handle(acts)
		}
	}
}

func (n *lossyNet) transmissions(peer wire.NID) []Action {
	var out []Action
	for _, a := range n.actions {
		if a.Kind == Transmit && a.Message.Peer == peer {
			out = append(out, a)
		}
	}
	return out
}

func TestSimAckLossRetransmitsAndCorrespondentStaysIdempotent(t *testing.T) {
	n := newLossyNet(t, Config{})
	acksDropped := 0
	n.drop = func(toCN bool) bool {
		if !toCN && acksDropped < 2 {
			acksDropped++
			return true
		}
		return false
	}
	m := msgTo(peerA, 0x20010db8_00020000, 0x20010db8_00010000)
	n.sendAt(0, m)
	n.run(time.Minute)
	tx := n.transmissions(peerA)
	if len(tx) != 3 || tx[2].Attempt != 3 || tx[2].Elapsed != 3*time.Second {
		t.Fatalf("transmissions = %+v, want 3 (t=0,1s,3s)", tx)
	}
	if n.cnRecv[peerA] != 3 || !slices.Equal(n.cnSet[peerA], m.Update.Locators) {
		t.Fatalf("correspondent got %d LUs, set %v", n.cnRecv[peerA], n.cnSet[peerA])
	}
	last := n.results[len(n.results)-1]
	if len(n.results) != 1 || last.Outcome != Acked || last.Attempts != 3 || last.RTTSampled ||
		last.Elapsed != 3*time.Second+20*time.Millisecond {
		t.Fatalf("results = %+v", n.results)
	}
}

func TestSimLULossThenDuplicateAcksFromDelayedCopies(t *testing.T) {
	n := newLossyNet(t, Config{})
	// Every packet takes 1.2 s: the first ACK arrives after the retransmission went out, and
	// the retransmission's ACK arrives as a duplicate.
	n.delay = func() time.Duration { return 1200 * time.Millisecond }
	n.sendAt(0, msgTo(peerA, 0x20010db8_00020000))
	n.run(time.Minute)
	var outcomes []Outcome
	for _, r := range n.results {
		outcomes = append(outcomes, r.Outcome)
	}
	if !slices.Equal(outcomes, []Outcome{Acked, Duplicate}) {
		t.Fatalf("outcomes = %v, want [acked duplicate]", outcomes)
	}
	if n.results[0].RTTSampled {
		t.Fatal("RTT sampled from a retransmitted exchange")
	}
	if tx := n.transmissions(peerA); len(tx) != 2 {
		t.Fatalf("%d transmissions, want 2", len(tx))
	}
}

func TestSimSilentCorrespondentIsGivenUp(t *testing.T) {
	n := newLossyNet(t, Config{MaxAttempts: 4, InitialTimeout: 200 * time.Millisecond})
	n.drop = func(bool) bool { return true }
	n.sendAt(0, msgTo(peerA, 1))
	n.run(time.Hour)
	tx := n.transmissions(peerA)
	var gaveUp []Action
	for _, a := range n.actions {
		if a.Kind == GiveUp {
			gaveUp = append(gaveUp, a)
		}
	}
	want := []time.Duration{0, 200 * time.Millisecond, 600 * time.Millisecond, 1400 * time.Millisecond}
	if len(tx) != len(want) {
		t.Fatalf("%d transmissions, want %d", len(tx), len(want))
	}
	for i, a := range tx {
		if a.Elapsed != want[i] || a.Attempt != i+1 {
			t.Errorf("transmission %d: attempt %d at %v, want %v", i, a.Attempt, a.Elapsed, want[i])
		}
	}
	if len(gaveUp) != 1 || gaveUp[0].Elapsed != 3*time.Second || gaveUp[0].Attempt != 4 {
		t.Fatalf("give-ups = %+v, want one at 3s after 4 attempts", gaveUp)
	}
}

// Handoff then hand back while the first LU is in flight: the latest set must win at the CN.
func TestSimSupersedeLatestStateWins(t *testing.T) {
	n := newLossyNet(t, Config{})
	n.delay = func() time.Duration { return 300 * time.Millisecond }
	first := msgTo(peerA, 0x20010db8_00020000, 0x20010db8_00010000)
	second := msgTo(peerA, 0x20010db8_00030000)
	n.sendAt(0, first)
	n.sendAt(100*time.Millisecond, second)
	n.run(time.Minute)
	if !slices.Equal(n.cnSet[peerA], second.Update.Locators) {
		t.Fatalf("correspondent holds %v, want the second set", n.cnSet[peerA])
	}
	var outcomes []Outcome
	for _, r := range n.results {
		outcomes = append(outcomes, r.Outcome)
	}
	if !slices.Equal(outcomes, []Outcome{Superseded, Acked}) {
		t.Fatalf("outcomes = %v", outcomes)
	}
	if _, ok := n.e.NextDeadline(); ok {
		t.Fatal("timer still armed")
	}
}

// The old LU overtakes... rather, arrives after the new one (longer path). The CN ends up with
// the old set; its ACK arrives after the new one's and the engine re-sends the newest set.
func TestSimReorderedStaleLURepaired(t *testing.T) {
	n := newLossyNet(t, Config{})
	delays := []time.Duration{500 * time.Millisecond, 10 * time.Millisecond}
	n.delay = func() time.Duration {
		if len(delays) > 0 {
			d := delays[0]
			delays = delays[1:]
			return d
		}
		return 10 * time.Millisecond
	}
	old := msgTo(peerA, 0x20010db8_00020000)
	newer := msgTo(peerA, 0x20010db8_00030000)
	n.sendAt(0, old)
	n.sendAt(5*time.Millisecond, newer)
	n.run(time.Minute)
	if !slices.Equal(n.cnSet[peerA], newer.Update.Locators) {
		t.Fatalf("correspondent holds %v, want newest set after repair", n.cnSet[peerA])
	}
	if s := n.e.Stats(); s.Repairs != 1 {
		t.Fatalf("repairs = %d, want 1", s.Repairs)
	}
}

func TestSimManyCorrespondentsInParallel(t *testing.T) {
	n := newLossyNet(t, Config{})
	rng := rand.New(rand.NewPCG(7, 7))
	n.drop = func(bool) bool { return rng.Float64() < 0.3 }
	n.delay = func() time.Duration { return time.Duration(1+rng.IntN(80)) * time.Millisecond }
	const peers = 300
	for i := range peers {
		n.sendAt(0, msgTo(wire.NID(1000+i), 0x20010db8_00020000, wire.L64(i)))
	}
	n.run(10 * time.Minute)
	acked := map[wire.NID]bool{}
	for _, r := range n.results {
		if r.Outcome == Acked {
			if acked[r.Peer] {
				t.Fatalf("peer %v acked twice", r.Peer)
			}
			acked[r.Peer] = true
		}
	}
	gaveUp := 0
	for _, a := range n.actions {
		if a.Kind == GiveUp {
			gaveUp++
		}
	}
	// With 30% loss each way a round trip fails with p=0.51; all 7 fail with p~0.009.
	if len(acked)+gaveUp != peers || len(acked) < peers*95/100 {
		t.Fatalf("acked %d, gave up %d of %d", len(acked), gaveUp, peers)
	}
	// All first transmissions went out at t=0 (parallel, not serialized behind each other).
	firsts := 0
	for _, a := range n.actions {
		if a.Kind == Transmit && a.Attempt == 1 && a.Elapsed == 0 {
			firsts++
		}
	}
	if firsts != peers {
		t.Fatalf("%d first transmissions, want %d", firsts, peers)
	}
}

// Property: for random loss, delay (reordering) and supersede patterns,
//   - no exchange transmits more than MaxAttempts times, attempts count 1, 2, 3, ...;
//   - every timeout is within [MinTimeout, MaxTimeout];
//   - every exchange ends at most once (one Acked result or one GiveUp, never both);
//   - the last exchange of each peer ends: Acked iff an ACK of it reached the MN while it was
//     outstanding, otherwise GiveUp;
//   - nothing is left armed once the network is quiet.
func TestSimPropertyRandomLoss(t *testing.T) {
	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			cfg := Config{
				InitialTimeout: time.Duration(50+rng.IntN(1000)) * time.Millisecond,
				MaxAttempts:    1 + rng.IntN(8),
				Backoff:        1 + rng.Float64()*2,
			}
			n := newLossyNet(t, cfg)
			loss := rng.Float64() * 0.9
			n.drop = func(bool) bool { return rng.Float64() < loss }
			maxDelay := 1 + rng.IntN(1500)
			n.delay = func() time.Duration { return time.Duration(1+rng.IntN(maxDelay)) * time.Millisecond }
			peers := 1 + rng.IntN(5)
			lastBody := map[wire.NID][]wire.LocatorEntry{}
			for p := range peers {
				nid := wire.NID(p + 1)
				for k := range 1 + rng.IntN(4) {
					m := msgTo(nid, wire.L64(rng.IntN(3)+1), wire.L64(k+10))
					n.sendAt(time.Duration(rng.IntN(5000))*time.Millisecond, m)
				}
			}
			for _, s := range n.sends {
				lastBody[s.msg.Peer] = s.msg.Update.Locators
			}
			n.run(24 * time.Hour)
			if _, ok := n.e.NextDeadline(); ok || len(n.queue) != 0 {
				t.Fatal("not quiet at the end")
			}
			checkProperties(t, n, lastBody)
		})
	}
}

func checkProperties(t *testing.T, n *lossyNet, lastBody map[wire.NID][]wire.LocatorEntry) {
	t.Helper()
	cfg := n.e.Config()
	attempts := map[uint64]int{}
	ended := map[uint64]string{}
	lastExchange := map[wire.NID]uint64{}
	for _, a := range n.actions {
		switch a.Kind {
		case Transmit:
			if a.Attempt == 1 {
				attempts[a.Exchange] = 0
			}
			if a.Attempt != attempts[a.Exchange]+1 {
				t.Fatalf("exchange %d: attempt %d after %d", a.Exchange, a.Attempt, attempts[a.Exchange])
			}
			attempts[a.Exchange] = a.Attempt
			if a.Attempt > cfg.MaxAttempts {
				t.Fatalf("exchange %d: attempt %d > max %d", a.Exchange, a.Attempt, cfg.MaxAttempts)
			}
			if a.Timeout < cfg.MinTimeout || a.Timeout > cfg.MaxTimeout {
				t.Fatalf("timeout %v outside bounds", a.Timeout)
			}
			lastExchange[a.Message.Peer] = a.Exchange
		case GiveUp:
			if ended[a.Exchange] != "" {
				t.Fatalf("exchange %d ended twice (%s, give-up)", a.Exchange, ended[a.Exchange])
			}
			if a.Attempt != cfg.MaxAttempts || attempts[a.Exchange] != cfg.MaxAttempts {
				t.Fatalf("exchange %d gave up after %d attempts", a.Exchange, a.Attempt)
			}
			ended[a.Exchange] = "give-up"
		}
	}
	for _, r := range n.results {
		if r.Outcome == Acked {
			if ended[r.Exchange] != "" {
				t.Fatalf("exchange %d ended twice (%s, acked)", r.Exchange, ended[r.Exchange])
			}
			ended[r.Exchange] = "acked"
		}
	}
	for peer, x := range lastExchange {
		got := ended[x]
		want := "give-up"
		if n.acksIn[x] > 0 {
			want = "acked"
		}
		if got != want {
			t.Fatalf("peer %v last exchange %d ended %q, want %q (%d ACKs in)", peer, x, got, want, n.acksIn[x])
		}
		if got == "acked" && !slices.Equal(lastSent(n, peer), lastBody[peer]) {
			t.Fatalf("peer %v: last exchange carried %v, want latest %v", peer, lastSent(n, peer), lastBody[peer])
		}
	}
}

func lastSent(n *lossyNet, peer wire.NID) []wire.LocatorEntry {
	var body []wire.LocatorEntry
	for _, a := range n.actions {
		if a.Kind == Transmit && a.Message.Peer == peer {
			body = a.Message.Update.Locators
		}
	}
	return body
}
