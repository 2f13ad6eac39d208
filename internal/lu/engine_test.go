package lu

import (
	"errors"
	"math"
	"testing"
	"time"

	"ilnp/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	peerA wire.NID = 0x021b21fffe6797a8
	peerB wire.NID = 0x021b21fffe6797b9
)

func entries(locs ...wire.L64) []wire.LocatorEntry {
	out := make([]wire.LocatorEntry, len(locs))
	for i, l := range locs {
		out[i] = wire.LocatorEntry{Locator: l, Preference: uint16(i), Lifetime: 600}
	}
	return out
}

func msgTo(peer wire.NID, locs ...wire.L64) Message {
	return Message{
		Peer:    peer,
		Source:  wire.ILV{Locator: locs[0], NID: 0x1111},
		IfIndex: 2,
		Dest:    wire.ILV{Locator: 0x20010db8_00010000, NID: peer},
		Update:  wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: entries(locs...)},
	}
}

func ackOf(m Message) wire.LocatorUpdate { return m.Update.Ack() }

func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func mustSend(t *testing.T, e *Engine, m Message, now time.Time) []Action {
	t.Helper()
	acts, err := e.Send(m, now)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return acts
}

func TestSendTransmitsFirstAttemptAndArmsInitialTimeout(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	acts := mustSend(t, e, m, t0)
	if len(acts) != 1 || acts[0].Kind != Transmit || acts[0].Attempt != 1 || acts[0].Timeout != time.Second {
		t.Fatalf("actions = %+v, want one transmit attempt 1 timeout 1s", acts)
	}
	if acts[0].Message.Dest != m.Dest || acts[0].Message.Update.Locators[0] != m.Update.Locators[0] {
		t.Fatalf("transmitted message %+v differs from sent %+v", acts[0].Message, m)
	}
	d, ok := e.NextDeadline()
	if !ok || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextDeadline = %v %v, want t0+1s", d, ok)
	}
	if got := e.Tick(t0.Add(999 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("Tick before the deadline acted: %+v", got)
	}
}

// With no ACK ever, transmissions follow 1 s doubling capped at 8 s, 7 of them, then give-up.
func TestRetransmissionBackoffAndGiveUp(t *testing.T) {
	e := newEngine(t, Config{})
	mustSend(t, e, msgTo(peerA, 0x20010db8_00020000), t0)
	wantTx := []time.Duration{1, 3, 7, 15, 23, 31} // seconds of attempts 2..7
	var txAt []time.Duration
	var gaveUp []Action
	now := t0
	for range 20 {
		d, ok := e.NextDeadline()
		if !ok {
			break
		}
		now = d
		for _, a := range e.Tick(now) {
			switch a.Kind {
			case Transmit:
				if a.Attempt != len(txAt)+2 {
					t.Fatalf("attempt %d at %v, want %d", a.Attempt, now.Sub(t0), len(txAt)+2)
				}
				txAt = append(txAt, now.Sub(t0))
			case GiveUp:
				gaveUp = append(gaveUp, a)
			}
		}
	}
	if len(txAt) != len(wantTx) {
		t.Fatalf("retransmissions at %v, want %d of them", txAt, len(wantTx))
	}
	for i, w := range wantTx {
		if txAt[i] != w*time.Second {
			t.Errorf("attempt %d at %v, want %v", i+2, txAt[i], w*time.Second)
		}
	}
	if len(gaveUp) != 1 || gaveUp[0].Attempt != 7 || now.Sub(t0) != 39*time.Second || gaveUp[0].Elapsed != 39*time.Second {
		t.Fatalf("give-up = %+v at %v, want one after 7 attempts at 39s", gaveUp, now.Sub(t0))
	}
	if _, ok := e.NextDeadline(); ok {
		t.Fatal("deadline still armed after give-up")
	}
	if s := e.Stats(); s.Sent != 1 || s.Retransmitted != 6 || s.GaveUp != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestAckCompletesAndMeasuresRTT(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	res, acts := e.Ack(peerA, ackOf(m), t0.Add(30*time.Millisecond))
	if res.Outcome != Acked || !res.RTTSampled || res.RTT != 30*time.Millisecond || res.Attempts != 1 || len(acts) != 0 {
		t.Fatalf("result = %+v actions %+v", res, acts)
	}
	// RFC 6298 first sample: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4*RTTVAR = 90 ms.
	if res.SRTT != 30*time.Millisecond || res.RTO != 90*time.Millisecond {
		t.Fatalf("SRTT %v RTO %v, want 30ms 90ms", res.SRTT, res.RTO)
	}
	if _, ok := e.NextDeadline(); ok {
		t.Fatal("deadline armed after ACK")
	}
	if got := e.Tick(t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("Tick after ACK acted: %+v", got)
	}
	// The next LU to that correspondent starts from the measured RTO, backed off from there.
	acts = mustSend(t, e, msgTo(peerA, 0x20010db8_00030000), t0.Add(time.Second))
	if acts[0].Timeout != 90*time.Millisecond {
		t.Fatalf("adaptive first timeout = %v, want 90ms", acts[0].Timeout)
	}
	acts = e.Tick(t0.Add(time.Second + 90*time.Millisecond))
	if len(acts) != 1 || acts[0].Attempt != 2 || acts[0].Timeout != 180*time.Millisecond {
		t.Fatalf("retransmission = %+v, want attempt 2 with 180ms", acts)
	}
}

func TestRTTEstimatorConvergesAndClamps(t *testing.T) {
	e := newEngine(t, Config{MinTimeout: 20 * time.Millisecond})
	var res Result
	now := t0
	for i := range 50 {
		m := msgTo(peerA, wire.L64(0x20010db8_00000000+uint64(i)))
		mustSend(t, e, m, now)
		res, _ = e.Ack(peerA, ackOf(m), now.Add(2*time.Millisecond))
		now = now.Add(time.Second)
	}
	if res.SRTT != 2*time.Millisecond {
		t.Fatalf("SRTT = %v after constant 2ms samples", res.SRTT)
	}
	// RTTVAR decays towards 0, so RTO falls to SRTT+G = 3 ms, and MinTimeout clamps it to 20 ms.
	if res.RTO != 20*time.Millisecond {
		t.Fatalf("RTO = %v, want clamp at MinTimeout 20ms", res.RTO)
	}
	e2 := newEngine(t, Config{MaxTimeout: 2 * time.Second})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e2, m, t0)
	res, _ = e2.Ack(peerA, ackOf(m), t0.Add(900*time.Millisecond))
	if res.RTO != 2*time.Second {
		t.Fatalf("RTO = %v, want clamp at MaxTimeout 2s (900ms + 4*450ms)", res.RTO)
	}
}

// Karn's rule: an ACK after a retransmission cannot tell which copy it answers.
func TestKarnNoSampleFromRetransmittedExchange(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	e.Tick(t0.Add(time.Second))
	res, _ := e.Ack(peerA, ackOf(m), t0.Add(1010*time.Millisecond))
	if res.Outcome != Acked || res.RTTSampled || res.Attempts != 2 || res.Elapsed != 1010*time.Millisecond {
		t.Fatalf("result = %+v, want acked, 2 attempts, no RTT sample", res)
	}
	if res.SRTT != 0 || res.RTO != time.Second {
		t.Fatalf("estimator moved: SRTT %v RTO %v", res.SRTT, res.RTO)
	}
	// The same body in a fresh exchange is ambiguous too: an old copy's ACK could match it.
	mustSend(t, e, msgTo(peerA, 0x20010db8_00030000), t0.Add(2*time.Second))
	mustSend(t, e, m, t0.Add(3*time.Second))
	res, _ = e.Ack(peerA, ackOf(m), t0.Add(3*time.Second+5*time.Millisecond))
	if res.Outcome != Acked || res.RTTSampled {
		t.Fatalf("result = %+v, want acked without sample (body sent before)", res)
	}
}

func TestDuplicateAckIsHarmless(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	first, _ := e.Ack(peerA, ackOf(m), t0.Add(10*time.Millisecond))
	for i := range 3 {
		res, acts := e.Ack(peerA, ackOf(m), t0.Add(time.Duration(20+i)*time.Millisecond))
		if res.Outcome != Duplicate || res.Exchange != first.Exchange || len(acts) != 0 || res.RTTSampled {
			t.Fatalf("duplicate #%d = %+v %+v", i, res, acts)
		}
		if res.SRTT != first.SRTT {
			t.Fatalf("duplicate ACK moved SRTT %v -> %v", first.SRTT, res.SRTT)
		}
	}
	if s := e.Stats(); s.Acked != 1 || s.DuplicateAcks != 3 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestAckClassification(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	other := msgTo(peerA, 0x20010db8_00090000)
	cases := []struct {
		name string
		peer wire.NID
		ack  wire.LocatorUpdate
	}{
		{"unknown peer", peerB, ackOf(m)},
		{"unknown body", peerA, ackOf(other)},
		{"advertisement, not ack", peerA, m.Update},
		{"reordered entries", peerA, wire.LocatorUpdate{Op: wire.OpAcknowledgement, Locators: entries(0x20010db8_00020000, 1)}},
		{"empty ack", peerA, wire.LocatorUpdate{Op: wire.OpAcknowledgement}},
	}
	for _, c := range cases {
		res, acts := e.Ack(c.peer, c.ack, t0.Add(time.Millisecond))
		if res.Outcome != Unknown || len(acts) != 0 {
			t.Errorf("%s: %+v %+v, want unknown", c.name, res, acts)
		}
	}
	if _, ok := e.Outstanding(peerA); !ok {
		t.Fatal("stray ACKs completed the outstanding LU")
	}
}

func TestNewerLUSupersedesOutstanding(t *testing.T) {
	e := newEngine(t, Config{})
	a := msgTo(peerA, 0x20010db8_00020000)
	b := msgTo(peerA, 0x20010db8_00030000, 0x20010db8_00020000)
	mustSend(t, e, a, t0)
	e.Tick(t0.Add(time.Second)) // a: attempt 2
	acts := mustSend(t, e, b, t0.Add(1500*time.Millisecond))
	if len(acts) != 1 || acts[0].Attempt != 1 || acts[0].Timeout != time.Second {
		t.Fatalf("supersede = %+v, want fresh attempt 1", acts)
	}
	res, acts := e.Ack(peerA, ackOf(a), t0.Add(1600*time.Millisecond))
	if res.Outcome != Superseded || len(acts) != 0 {
		t.Fatalf("ACK for superseded = %+v %+v", res, acts)
	}
	p, ok := e.Outstanding(peerA)
	if !ok || p.Attempts != 1 || len(p.Message.Update.Locators) != 2 {
		t.Fatalf("outstanding after stale ACK = %+v %v", p, ok)
	}
	// Only b's deadline is armed.
	if d, _ := e.NextDeadline(); !d.Equal(t0.Add(2500 * time.Millisecond)) {
		t.Fatalf("deadline %v, want b's at 2.5s", d.Sub(t0))
	}
	res, _ = e.Ack(peerA, ackOf(b), t0.Add(1520*time.Millisecond))
	if res.Outcome != Acked || !res.RTTSampled || res.RTT != 20*time.Millisecond {
		t.Fatalf("ACK for b = %+v", res)
	}
}

// An ACK for an old set arriving after the newest was acknowledged may mean the correspondent
// applied the old LU last; the engine re-sends the newest set once.
func TestStaleAckAfterCompletionRepairsOnce(t *testing.T) {
	e := newEngine(t, Config{})
	a := msgTo(peerA, 0x20010db8_00020000)
	b := msgTo(peerA, 0x20010db8_00030000)
	mustSend(t, e, a, t0)
	mustSend(t, e, b, t0.Add(10*time.Millisecond))
	if res, _ := e.Ack(peerA, ackOf(b), t0.Add(20*time.Millisecond)); res.Outcome != Acked {
		t.Fatalf("ACK b = %+v", res)
	}
	res, acts := e.Ack(peerA, ackOf(a), t0.Add(30*time.Millisecond))
	if res.Outcome != Superseded || len(acts) != 1 || acts[0].Kind != Transmit ||
		acts[0].Message.Update.Locators[0].Locator != 0x20010db8_00030000 {
		t.Fatalf("stale ACK = %+v, actions %+v; want re-send of b", res, acts)
	}
	res, acts = e.Ack(peerA, ackOf(a), t0.Add(40*time.Millisecond))
	if res.Outcome != Superseded || len(acts) != 0 {
		t.Fatalf("stale ACK during repair = %+v %+v, want nothing", res, acts)
	}
	if res, _ := e.Ack(peerA, ackOf(b), t0.Add(50*time.Millisecond)); res.Outcome != Acked || res.RTTSampled {
		t.Fatalf("ACK of repair = %+v, want acked without RTT sample (ambiguous)", res)
	}
	// More copies of the stale ACK after the repair completed: one repair per stale LU only.
	res, acts = e.Ack(peerA, ackOf(a), t0.Add(60*time.Millisecond))
	if res.Outcome != Superseded || len(acts) != 0 {
		t.Fatalf("stale ACK after repair = %+v %+v, want no second repair", res, acts)
	}
}

func TestSendingTheOutstandingMessageAgainIsANoOp(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	e.Tick(t0.Add(time.Second))
	if acts := mustSend(t, e, m, t0.Add(1100*time.Millisecond)); len(acts) != 0 {
		t.Fatalf("repeat Send = %+v, want nothing", acts)
	}
	if p, _ := e.Outstanding(peerA); p.Attempts != 2 {
		t.Fatalf("attempts reset to %d", p.Attempts)
	}
	// Same body towards a new destination is a new exchange.
	m2 := m
	m2.Dest.Locator = 0x20010db8_00770000
	if acts := mustSend(t, e, m2, t0.Add(1200*time.Millisecond)); len(acts) != 1 || acts[0].Message.Dest != m2.Dest {
		t.Fatalf("Send to new destination = %+v", acts)
	}
}

func TestLateAckAfterGiveUp(t *testing.T) {
	e := newEngine(t, Config{MaxAttempts: 2})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	e.Tick(t0.Add(time.Second))
	acts := e.Tick(t0.Add(3 * time.Second))
	if len(acts) != 1 || acts[0].Kind != GiveUp || acts[0].Attempt != 2 {
		t.Fatalf("give-up = %+v", acts)
	}
	res, _ := e.Ack(peerA, ackOf(m), t0.Add(4*time.Second))
	if res.Outcome != Late || res.Attempts != 2 {
		t.Fatalf("late ACK = %+v", res)
	}
	if res, _ := e.Ack(peerA, ackOf(m), t0.Add(5*time.Second)); res.Outcome != Duplicate {
		t.Fatalf("ACK after late ACK = %+v, want duplicate", res)
	}
}

// TestUnanswered: what a restarted daemon is told about each correspondent (node/adopt.go)
// must not count a given-up LU as acknowledged.
func TestUnanswered(t *testing.T) {
	e := newEngine(t, Config{MaxAttempts: 2})
	m := msgTo(peerA, 0x20010db8_00020000)
	steps := []struct {
		what string
		do   func()
		want bool
	}{
		{"never sent", func() {}, false},
		{"outstanding", func() { mustSend(t, e, m, t0) }, true},
		{"given up", func() { e.Tick(t0.Add(time.Second)); e.Tick(t0.Add(3 * time.Second)) }, true},
		{"late ACK", func() { e.Ack(peerA, ackOf(m), t0.Add(4*time.Second)) }, false},
		{"newer LU outstanding", func() { mustSend(t, e, msgTo(peerA, 0x20010db8_00030000), t0.Add(5*time.Second)) }, true},
		{"acknowledged", func() {
			e.Ack(peerA, ackOf(msgTo(peerA, 0x20010db8_00030000)), t0.Add(5*time.Second+time.Millisecond))
		}, false},
		{"cancelled", func() { mustSend(t, e, m, t0.Add(6*time.Second)); e.Cancel(peerA) }, true},
	}
	for _, s := range steps {
		s.do()
		if got := e.Unanswered(peerA); got != s.want {
			t.Errorf("%s: Unanswered = %v, want %v", s.what, got, s.want)
		}
	}
	if e.Unanswered(peerB) {
		t.Error("a correspondent never sent an LU is unanswered")
	}
}

func TestCancelAndForget(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	if !e.Cancel(peerA) || e.Cancel(peerA) {
		t.Fatal("Cancel should report the outstanding LU exactly once")
	}
	if _, ok := e.NextDeadline(); ok {
		t.Fatal("deadline armed after Cancel")
	}
	if res, _ := e.Ack(peerA, ackOf(m), t0.Add(time.Millisecond)); res.Outcome != Superseded {
		t.Fatalf("ACK after cancel = %+v", res)
	}
	e.Forget(peerA)
	if res, _ := e.Ack(peerA, ackOf(m), t0.Add(time.Millisecond)); res.Outcome != Unknown {
		t.Fatalf("ACK after forget = %+v", res)
	}
	if len(e.Snapshot()) != 0 {
		t.Fatal("forgotten peer still in snapshot")
	}
}

func TestSendRejectsInvalidMessages(t *testing.T) {
	e := newEngine(t, Config{})
	ack := msgTo(peerA, 1)
	ack.Update.Op = wire.OpAcknowledgement
	empty := msgTo(peerA, 1)
	empty.Update.Locators = nil
	many := msgTo(peerA, 1)
	many.Update.Locators = make([]wire.LocatorEntry, 256)
	for _, c := range []struct {
		m    Message
		want error
	}{{ack, ErrNotAdvertisement}, {empty, ErrNoLocators}, {many, ErrTooManyLocators}} {
		if _, err := e.Send(c.m, t0); !errors.Is(err, c.want) {
			t.Errorf("Send = %v, want %v", err, c.want)
		}
	}
	if _, ok := e.NextDeadline(); ok {
		t.Fatal("rejected message armed a timer")
	}
}

func TestSendCopiesLocators(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	m.Update.Locators[0].Locator = 0xdead
	acts := e.Tick(t0.Add(time.Second))
	if acts[0].Message.Update.Locators[0].Locator != 0x20010db8_00020000 {
		t.Fatal("engine aliases the caller's locator slice")
	}
}

func TestManyPeersHaveIndependentTimers(t *testing.T) {
	e := newEngine(t, Config{})
	const n = 200
	now := t0
	// Give every peer its own RTT: 1..200 ms.
	for i := range n {
		nid := wire.NID(i + 1)
		m := msgTo(nid, 0x20010db8_00010000)
		mustSend(t, e, m, now)
		e.Ack(nid, ackOf(m), now.Add(time.Duration(i+1)*time.Millisecond))
	}
	now = now.Add(time.Second)
	for i := range n {
		acts := mustSend(t, e, msgTo(wire.NID(i+1), 0x20010db8_00020000), now)
		if want := max(3*time.Duration(i+1)*time.Millisecond, DefaultMinTimeout); acts[0].Timeout != want {
			t.Fatalf("peer %d timeout %v, want %v", i+1, acts[0].Timeout, want)
		}
	}
	if s := e.Stats(); s.OutstandingPeak != n {
		t.Fatalf("outstanding peak %d, want %d", s.OutstandingPeak, n)
	}
	// Peers ACK on even NIDs only; odd ones retransmit on their own schedule.
	for i := 0; i < n; i += 2 {
		nid := wire.NID(i + 2)
		if res, _ := e.Ack(nid, ackOf(msgTo(nid, 0x20010db8_00020000)), now.Add(time.Millisecond)); res.Outcome != Acked {
			t.Fatalf("peer %d ACK = %+v", nid, res)
		}
	}
	acts := e.Tick(now.Add(600 * time.Millisecond))
	seen := map[wire.NID]bool{}
	var last time.Duration
	for _, a := range acts {
		if a.Message.Peer%2 == 0 {
			t.Fatalf("acknowledged peer %d retransmitted", a.Message.Peer)
		}
		if a.Elapsed < last {
			t.Fatal("actions not ordered by deadline")
		}
		seen[a.Message.Peer] = true
	}
	// Odd peer k has RTO max(3k ms, 50 ms): those with 3k <= 600 are due.
	for k := 1; k <= n; k += 2 {
		due := max(3*k, 50) <= 600
		if seen[wire.NID(k)] != due {
			t.Errorf("peer %d retransmitted=%v, want %v", k, seen[wire.NID(k)], due)
		}
	}
}

func TestSnapshotIsOrderedAndJSONFriendly(t *testing.T) {
	e := newEngine(t, Config{})
	mustSend(t, e, msgTo(peerB, 1), t0)
	mustSend(t, e, msgTo(peerA, 1), t0)
	v := e.Snapshot()
	if len(v) != 2 || v[0].Peer != "021b:21ff:fe67:97a8" || !v[0].Outstanding || v[0].RTOMillis != 1000 {
		t.Fatalf("snapshot = %+v", v)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if (Config{}).WithDefaults() != ok {
		t.Fatal("WithDefaults of zero differs from DefaultConfig")
	}
	mod := func(f func(*Config)) Config { c := ok; f(&c); return c }
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"min above max", mod(func(c *Config) { c.MinTimeout = 9 * time.Second }), "min_timeout"},
		{"initial below min", mod(func(c *Config) { c.InitialTimeout = 10 * time.Millisecond }), "initial_timeout"},
		{"initial above max", mod(func(c *Config) { c.InitialTimeout = 9 * time.Second }), "initial_timeout"},
		{"tiny min", mod(func(c *Config) { c.MinTimeout = time.Microsecond }), "min_timeout"},
		{"huge max", mod(func(c *Config) { c.MaxTimeout = time.Hour }), "max_timeout"},
		{"negative attempts", mod(func(c *Config) { c.MaxAttempts = -1 }), "max_attempts"},
		{"too many attempts", mod(func(c *Config) { c.MaxAttempts = 1000 }), "max_attempts"},
		{"backoff below 1", mod(func(c *Config) { c.Backoff = 0.5 }), "backoff"},
		{"backoff NaN", mod(func(c *Config) { c.Backoff = math.NaN() }), "backoff"},
		{"backoff huge", mod(func(c *Config) { c.Backoff = 100 }), "backoff"},
		{"negative granularity", mod(func(c *Config) { c.ClockGranularity = -1 }), "clock_granularity"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if !errors.Is(err, ErrConfig) || !containsField(err.Error(), c.field) {
			t.Errorf("%s: err = %v, want ErrConfig naming %s", c.name, err, c.field)
		}
		if _, err := New(c.cfg); err == nil {
			t.Errorf("%s: New accepted it", c.name)
		}
	}
	// Fixed 1 s x 7, as ilnp-public-1, is expressible.
	fixed := Config{InitialTimeout: time.Second, Backoff: 1, MaxAttempts: 7}
	e := newEngine(t, fixed)
	mustSend(t, e, msgTo(peerA, 1), t0)
	if acts := e.Tick(t0.Add(time.Second)); acts[0].Timeout != time.Second {
		t.Fatalf("fixed timeout backed off to %v", acts[0].Timeout)
	}
}

func containsField(s, field string) bool {
	for i := 0; i+len(field) <= len(s); i++ {
		if s[i:i+len(field)] == field {
			return true
		}
	}
	return false
}

// The double jump: our LU went to the correspondent's old locator; its own LU (or the
// rendezvous) says where it went. The LU goes there at once, as the next attempt, armed with
// the base timeout instead of waiting out the back-off; later retransmissions follow it.
func TestRedirectRetransmitsNowToTheNewDestination(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	moved := wire.ILV{Locator: 0x20010db8_00990000, NID: peerA}
	at := t0.Add(300 * time.Millisecond)
	acts := e.Redirect(peerA, moved, at)
	if len(acts) != 1 || acts[0].Kind != Transmit || acts[0].Message.Dest != moved || acts[0].Attempt != 2 ||
		acts[0].Timeout != DefaultInitialTimeout || acts[0].Elapsed != 300*time.Millisecond || !acts[0].Redirected {
		t.Fatalf("redirect = %+v, want attempt 2 to %v now, timeout %v", acts, moved, DefaultInitialTimeout)
	}
	if d, _ := e.NextDeadline(); !d.Equal(at.Add(DefaultInitialTimeout)) {
		t.Fatalf("deadline %v, want %v", d, at.Add(DefaultInitialTimeout))
	}
	for _, c := range []struct {
		name string
		peer wire.NID
		dest wire.ILV
	}{{"same destination", peerA, moved}, {"no LU outstanding", peerB, moved}} {
		if acts := e.Redirect(c.peer, c.dest, at); len(acts) != 0 {
			t.Fatalf("%s: redirect = %+v, want nothing", c.name, acts)
		}
	}
	if acts := e.Tick(at.Add(DefaultInitialTimeout)); len(acts) != 1 || acts[0].Message.Dest != moved || acts[0].Attempt != 3 || acts[0].Redirected {
		t.Fatalf("retransmission = %+v", acts)
	}
	res, _ := e.Ack(peerA, ackOf(m), at.Add(DefaultInitialTimeout+10*time.Millisecond))
	if res.Outcome != Acked || res.RTTSampled || res.Attempts != 3 {
		t.Fatalf("ACK = %+v, want acked after 3 attempts without an RTT sample", res)
	}
	if s := e.Stats(); s.Redirected != 1 || s.Retransmitted != 2 {
		t.Fatalf("stats %+v, want 1 redirect among 2 retransmissions", s)
	}
	// An exchange that has used all its attempts is re-pointed, not sent again: it gives up
	// at its deadline.
	e = newEngine(t, Config{MaxAttempts: 1})
	mustSend(t, e, m, t0)
	if acts := e.Redirect(peerA, moved, t0.Add(time.Millisecond)); len(acts) != 0 {
		t.Fatalf("redirect past the attempt limit = %+v, want nothing", acts)
	}
	if p, _ := e.Outstanding(peerA); p.Message.Dest != moved {
		t.Fatalf("outstanding LU to %v, want re-pointed to %v", p.Message.Dest, moved)
	}
	if acts := e.Tick(t0.Add(DefaultInitialTimeout)); len(acts) != 1 || acts[0].Kind != GiveUp {
		t.Fatalf("at the deadline: %+v, want give-up", acts)
	}
}

// A reload lowers the attempt limit of an exchange in flight: it gives up at the next
// timeout; an invalid configuration changes nothing.
func TestSetConfigAppliesToExchangesInFlight(t *testing.T) {
	e := newEngine(t, Config{})
	mustSend(t, e, msgTo(peerA, 0x20010db8_00020000), t0)
	if err := e.SetConfig(Config{InitialTimeout: time.Second, MaxTimeout: 100 * time.Millisecond}); err == nil {
		t.Fatal("initial timeout above the maximum accepted")
	}
	if e.Config().MaxAttempts != DefaultMaxAttempts {
		t.Fatalf("a rejected config changed the engine: %+v", e.Config())
	}
	if err := e.SetConfig(Config{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	d, ok := e.NextDeadline()
	if !ok {
		t.Fatal("no deadline")
	}
	acts := e.Tick(d)
	if len(acts) != 1 || acts[0].Kind != GiveUp || acts[0].Attempt != 1 {
		t.Fatalf("after lowering max attempts to 1: %+v, want one give-up after attempt 1", acts)
	}
}

// Resend: the LU's pair went over to UDP/IPv6, the same LU goes out again now, from the base
// timeout, without an RTT sample; nothing without an LU out or past the attempt limit.
func TestResendRetransmitsNow(t *testing.T) {
	e := newEngine(t, Config{})
	m := msgTo(peerA, 0x20010db8_00020000)
	mustSend(t, e, m, t0)
	at := t0.Add(700 * time.Millisecond)
	acts := e.Resend(peerA, at)
	if len(acts) != 1 || acts[0].Kind != Transmit || acts[0].Message.Dest != m.Dest || acts[0].Attempt != 2 ||
		acts[0].Timeout != DefaultInitialTimeout || acts[0].Redirected {
		t.Fatalf("resend = %+v, want attempt 2 now, timeout %v", acts, DefaultInitialTimeout)
	}
	if d, _ := e.NextDeadline(); !d.Equal(at.Add(DefaultInitialTimeout)) {
		t.Fatalf("deadline %v, want %v", d, at.Add(DefaultInitialTimeout))
	}
	if acts := e.Resend(peerB, at); len(acts) != 0 {
		t.Fatalf("no LU outstanding: resend = %+v", acts)
	}
	res, _ := e.Ack(peerA, ackOf(m), at.Add(10*time.Millisecond))
	if res.Outcome != Acked || res.RTTSampled || res.Attempts != 2 {
		t.Fatalf("ACK = %+v, want acked after 2 attempts without an RTT sample", res)
	}
	e = newEngine(t, Config{MaxAttempts: 1})
	mustSend(t, e, m, t0)
	if acts := e.Resend(peerA, t0.Add(time.Millisecond)); len(acts) != 0 {
		t.Fatalf("resend past the attempt limit = %+v", acts)
	}
}
