package reresolve

import (
	"errors"
	"slices"
	"testing"
	"time"

	"ilnp/internal/lu"
	"ilnp/internal/wire"
)

const (
	peerA wire.NID = 0xa
	peerB wire.NID = 0xb
	oldL  wire.L64 = 0x20010db800010000
	newL  wire.L64 = 0x20010db800020000
	newL2 wire.L64 = 0x20010db800030000
)

var t0 = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

func act(kind lu.ActionKind, peer wire.NID, exchange uint64, attempt int) lu.Action {
	return lu.Action{Kind: kind, Exchange: exchange, Attempt: attempt, Message: lu.Message{
		Peer: peer, Dest: wire.ILV{Locator: oldL, NID: peer},
		Update: wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: 0x99}}},
	}}
}

func redirected(a lu.Action) lu.Action {
	a.Redirected = true
	return a
}

func ranked(nid wire.NID, loc wire.L64, pref uint16) wire.RankedILV {
	return wire.RankedILV{ILV: wire.ILV{Locator: loc, NID: nid}, Preference: pref}
}

func TestOnActionWhenToLookUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		acts    []lu.Action
		peerNm  string
		wantN   []int // lookup number started per action, 0: none
		elapsed time.Duration
	}{
		{name: "first transmission never", acts: []lu.Action{act(lu.Transmit, peerA, 1, 1)}, peerNm: "a.", wantN: []int{0}},
		{name: "first retransmission looks up", acts: []lu.Action{act(lu.Transmit, peerA, 1, 1), act(lu.Transmit, peerA, 1, 2)},
			peerNm: "a.", wantN: []int{0, 1}},
		{name: "no name, no lookup", acts: []lu.Action{act(lu.Transmit, peerA, 1, 2), act(lu.GiveUp, peerA, 1, 5)},
			wantN: []int{0, 0}},
		{name: "after 3 waits for the third timeout", cfg: Config{After: 3},
			acts:   []lu.Action{act(lu.Transmit, peerA, 1, 2), act(lu.Transmit, peerA, 1, 3), act(lu.Transmit, peerA, 1, 4)},
			peerNm: "a.", wantN: []int{0, 0, 1}},
		{name: "give-up counts its attempts", cfg: Config{After: 3},
			acts: []lu.Action{act(lu.GiveUp, peerA, 1, 3)}, peerNm: "a.", wantN: []int{1}},
		{name: "one lookup in flight per peer", acts: []lu.Action{act(lu.Transmit, peerA, 1, 2), act(lu.Transmit, peerA, 1, 3)},
			peerNm: "a.", wantN: []int{1, 0}, elapsed: time.Second},
		{name: "a redirect knows where the peer went", acts: []lu.Action{redirected(act(lu.Transmit, peerA, 1, 2)), act(lu.Transmit, peerA, 1, 3)},
			peerNm: "a.", wantN: []int{0, 1}},
		{name: "in-flight bound across peers", cfg: Config{MaxInFlight: 1},
			acts:   []lu.Action{act(lu.Transmit, peerA, 1, 2), act(lu.Transmit, peerB, 2, 2)},
			peerNm: "x.", wantN: []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			for i, a := range tc.acts {
				l, ok := p.OnAction(a, tc.peerNm, now)
				got := 0
				if ok {
					got = l.N
					if l.Peer != a.Message.Peer || l.Name != tc.peerNm {
						t.Fatalf("action %d: lookup %+v", i, l)
					}
				}
				if got != tc.wantN[i] {
					t.Fatalf("action %d (%v attempt %d): lookup %d, want %d", i, a.Kind, a.Attempt, got, tc.wantN[i])
				}
				now = now.Add(tc.elapsed)
			}
		})
	}
}

func TestDoneOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		found     []wire.RankedILV
		err       error
		current   []wire.L64
		pending   bool
		gaveUp    bool
		wantLocs  []wire.L64
		wantAgain bool
	}{
		{name: "moved: new set, LU to its best", found: []wire.RankedILV{ranked(peerA, newL2, 5), ranked(peerA, newL, 0)},
			current: []wire.L64{oldL}, pending: true, wantLocs: []wire.L64{newL, newL2}},
		{name: "not yet updated: ask again", found: []wire.RankedILV{ranked(peerA, oldL, 0)},
			current: []wire.L64{oldL}, pending: true, wantAgain: true},
		{name: "same set other order: unchanged", found: []wire.RankedILV{ranked(peerA, newL, 0), ranked(peerA, oldL, 1)},
			current: []wire.L64{oldL, newL}, pending: true, wantAgain: true},
		{name: "lookup failed: ask again", err: errors.New("timeout"), current: []wire.L64{oldL}, pending: true, wantAgain: true},
		{name: "another NID's records are ignored", found: []wire.RankedILV{ranked(peerB, newL, 0)},
			current: []wire.L64{oldL}, pending: true, wantAgain: true},
		{name: "acked meanwhile: nothing", found: []wire.RankedILV{ranked(peerA, newL, 0)},
			current: []wire.L64{oldL}, pending: false},
		{name: "given up: still repaired", found: []wire.RankedILV{ranked(peerA, newL, 0)},
			current: []wire.L64{oldL}, pending: false, gaveUp: true, wantLocs: []wire.L64{newL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := New(Config{})
			a := act(lu.Transmit, peerA, 7, 2)
			if tc.gaveUp {
				a = act(lu.GiveUp, peerA, 7, 5)
			}
			if _, ok := p.OnAction(a, "a.", t0); !ok {
				t.Fatal("no lookup")
			}
			out := p.Done(peerA, tc.found, tc.err, tc.current, tc.pending)
			var got []wire.L64
			for _, e := range out.Locators {
				got = append(got, e.Locator)
			}
			if !slices.Equal(got, tc.wantLocs) || out.Again != tc.wantAgain {
				t.Fatalf("outcome %+v, want locators %v again %v", out, tc.wantLocs, tc.wantAgain)
			}
			if out.HasSend != (tc.wantLocs != nil) {
				t.Fatalf("send %v", out.HasSend)
			}
			if out.HasSend {
				if out.Send.Dest != (wire.ILV{Locator: tc.wantLocs[0], NID: peerA}) || out.Send.Peer != peerA ||
					!slices.Equal(out.Send.Update.Locators, a.Message.Update.Locators) {
					t.Fatalf("send %+v", out.Send)
				}
			}
			if p.inFlight != 0 {
				t.Fatalf("in flight %d after Done", p.inFlight)
			}
		})
	}
}

// TestBoundedPerExchange: a correspondent whose records never change is asked at most
// MaxLookups times per LU exchange, never twice within Interval; a new exchange has a new budget.
func TestBoundedPerExchange(t *testing.T) {
	p, _ := New(Config{MaxLookups: 3, Interval: 100 * time.Millisecond, MaxInterval: 150 * time.Millisecond})
	now := t0
	same := []wire.RankedILV{ranked(peerA, oldL, 0)}
	l, ok := p.OnAction(act(lu.Transmit, peerA, 1, 2), "a.", now)
	lookups := 0
	wantRetry := []time.Duration{100 * time.Millisecond, 150 * time.Millisecond} // doubled, capped
	for ok {
		lookups++
		out := p.Done(peerA, same, nil, []wire.L64{oldL}, true)
		if !out.Again {
			break
		}
		if out.Retry != wantRetry[lookups-1] {
			t.Fatalf("retry %d after %v, want %v", lookups, out.Retry, wantRetry[lookups-1])
		}
		if _, early := p.Retry(peerA, "a.", now.Add(out.Retry/2)); early {
			t.Fatal("retry inside Interval")
		}
		now = now.Add(out.Retry)
		l, ok = p.Retry(peerA, "a.", now)
	}
	if lookups != 3 || l.N != 3 {
		t.Fatalf("%d lookups (last N %d), want 3", lookups, l.N)
	}
	// More retransmissions of the same exchange: no more lookups.
	for attempt := 3; attempt <= 5; attempt++ {
		now = now.Add(time.Second)
		if _, ok := p.OnAction(act(lu.Transmit, peerA, 1, attempt), "a.", now); ok {
			t.Fatalf("lookup past the budget at attempt %d", attempt)
		}
	}
	if _, ok := p.OnAction(act(lu.Transmit, peerA, 2, 2), "a.", now.Add(time.Second)); !ok {
		t.Fatal("a new exchange has no budget")
	}
	if st := p.Stats(); st.Lookups != 4 || st.Unchanged != 3 || st.Throttled == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLocatorsCapAndOrder(t *testing.T) {
	found := []wire.RankedILV{ranked(peerA, newL2, 9), ranked(peerB, 0x5, 0), ranked(peerA, newL, 1),
		ranked(peerA, newL, 3), ranked(peerA, 0, 0), ranked(peerA, oldL, 1)}
	got := Locators(peerA, found, 2)
	want := []wire.LocatorEntry{{Locator: newL, Preference: 1}, {Locator: oldL, Preference: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if len(Locators(peerA, found, 0)) != 3 {
		t.Fatal("uncapped")
	}
	if _, err := New(Config{After: -1}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("negative After: %v", err)
	}
}

// TestStateBounded: the planner never holds more than maxPeers correspondents, and a lookup in
// flight survives the pruning (its Done still balances the in-flight count).
func TestStateBounded(t *testing.T) {
	p, _ := New(Config{MaxInFlight: 1})
	if _, ok := p.OnAction(act(lu.Transmit, 1, 1, 2), "busy.", t0); !ok {
		t.Fatal("no lookup")
	}
	for i := 2; i < 3*maxPeers; i++ {
		p.OnAction(act(lu.Transmit, wire.NID(i), uint64(i), 1), "x.", t0)
		if len(p.peers) > maxPeers {
			t.Fatalf("%d peers held", len(p.peers))
		}
	}
	if st := p.peers[1]; st == nil || !st.busy {
		t.Fatal("the busy peer was pruned")
	}
	p.Done(1, nil, errors.New("x"), nil, true)
	if p.inFlight != 0 {
		t.Fatalf("in flight %d", p.inFlight)
	}
}

func TestRetryScheduleDefaults(t *testing.T) {
	p, _ := New(Config{})
	var got []time.Duration
	var total time.Duration
	now := t0
	_, ok := p.OnAction(act(lu.Transmit, peerA, 1, 2), "a.", now)
	for ok {
		out := p.Done(peerA, nil, errors.New("servfail"), nil, true)
		if !out.Again {
			break
		}
		got = append(got, out.Retry)
		total += out.Retry
		now = now.Add(out.Retry)
		_, ok = p.Retry(peerA, "a.", now)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("retries %v, want %v (%d lookups of %d)", got, want, len(got)+1, DefaultMaxLookups)
	}
	if total < 25*time.Second {
		t.Fatalf("the budget spans only %v", total)
	}
}
