package rendezvous

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

const mnName = "mn.ilnp.test."

var testNID = wire.NID(0x00144fffff20ee64)

// digSet runs dig in the mn namespace and parses "+short" L64 or NID answers into values.
func digSet(t *testing.T, e *env, typ string) map[uint64]uint16 {
	t.Helper()
	out, err := e.srv.Dig(e.mn, "+short", mnName, typ)
	if err != nil {
		t.Fatalf("dig %s %s: %v", mnName, typ, err)
	}
	set := map[uint64]uint16{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("dig %s answer %q: want PREF VALUE", typ, line)
		}
		v, err := wire.ParseL64(f[1]) // NID and L64 share the presentation format
		if err != nil {
			t.Fatalf("dig %s answer %q: %v", typ, line, err)
		}
		var pref uint16
		for _, c := range f[0] {
			pref = pref*10 + uint16(c-'0')
		}
		set[uint64(v)] = pref
	}
	t.Logf("dig %s %s -> %q", mnName, typ, strings.TrimSpace(out))
	return set
}

func TestPublishThenMoveVisibleWithDig(t *testing.T) {
	e := newEnv(t)
	p, rec := e.startPublisher(t, &e.key, mnName, nil)
	l1, l2 := mustL64(t, "2001:db8:1:0"), mustL64(t, "2001:db8:2:0")

	if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l1, 10}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)
	if got := digSet(t, e, "NID"); !maps.Equal(got, map[uint64]uint16{uint64(testNID): DefaultNIDPreference}) {
		t.Fatalf("NID after first publish: %v", got)
	}
	if got := digSet(t, e, "L64"); !maps.Equal(got, map[uint64]uint16{uint64(l1): 10}) {
		t.Fatalf("L64 after first publish: %v", got)
	}

	// Move: the locator set becomes {l2}; measure Publish -> visible to a query.
	var lat []time.Duration
	for i := range 5 {
		from, to := l1, l2
		if i%2 == 1 {
			from, to = l2, l1
		}
		start := time.Now()
		if err := p.Publish(context.Background(), testNID, []LocatorEntry{{to, 10}}); err != nil {
			t.Fatal(err)
		}
		for {
			set, _, err := e.queryL64(context.Background(), mnName)
			if err == nil && len(set) == 1 && set[to] == 10 {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("move %v -> %v not visible within 5 s (last %v %v)", from, to, set, err)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("Publish -> visible on the server (5 moves): min %v median %v max %v", lat[0], lat[len(lat)/2], lat[len(lat)-1])
	if lat[len(lat)/2] > time.Second {
		t.Errorf("median update-to-visible %v, want well under 1 s on one link", lat[len(lat)/2])
	}
	// After an odd number of moves the set is {l2} only, and dig agrees.
	if got := digSet(t, e, "L64"); !maps.Equal(got, map[uint64]uint16{uint64(l2): 10}) {
		t.Fatalf("L64 after moves: %v, want only %v", got, l2)
	}
	if got := digSet(t, e, "NID"); len(got) != 1 {
		t.Fatalf("NID RRset changed by moves: %v", got)
	}

	// An IPv4 locator (issue 14) beside l2: an L32 record (RFC 6742 s.2.2) with its
	// preference, and gone again with the locator; the L64 RRset stays as it was.
	v4, err := encap.L32(netip.MustParseAddrPort("198.51.100.7:49191"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		locs []LocatorEntry
		want string
	}{{[]LocatorEntry{{l2, 10}, {v4, 20}}, "20 198.51.100.7"}, {[]LocatorEntry{{l2, 10}}, ""}} {
		if err := p.Publish(context.Background(), testNID, c.locs); err != nil {
			t.Fatal(err)
		}
		waitPublished(t, p, 5*time.Second)
		out, err := e.srv.Dig(e.mn, "+short", mnName, "L32")
		if err != nil || strings.TrimSpace(out) != c.want {
			t.Fatalf("dig %s L32 after publishing %v: %q (%v), want %q", mnName, c.locs, out, err, c.want)
		}
		if got := digSet(t, e, "L64"); !maps.Equal(got, map[uint64]uint16{uint64(l2): 10}) {
			t.Fatalf("L64 with the IPv4 locator %v: %v, want only %v", c.locs, got, l2)
		}
	}

	k := rec.kinds()
	if k[timeline.DNSUpdateSent] < 8 || k[timeline.DNSUpdateResult] != k[timeline.DNSUpdateSent] {
		t.Errorf("timeline events %v: want >= 8 sent, one result per sent", k)
	}
	st := p.Status()
	if st.Stats.UpdatesOK < 8 || len(st.Stats.Errors) != 0 {
		t.Errorf("stats %+v", st.Stats)
	}
}

// TestSoftHandoffNeverEmpty polls the server as fast as it can while the publisher walks a
// soft-handoff sequence; every answer must be a whole set that was published, never empty.
func TestSoftHandoffNeverEmpty(t *testing.T) {
	e := newEnv(t)
	p, _ := e.startPublisher(t, &e.key, mnName, nil)
	locs := []wire.L64{mustL64(t, "2001:db8:1:0"), mustL64(t, "2001:db8:2:0"), mustL64(t, "2001:db8:3:0")}
	publish := func(set ...LocatorEntry) {
		if err := p.Publish(context.Background(), testNID, set); err != nil {
			t.Fatal(err)
		}
		waitPublished(t, p, 5*time.Second)
	}
	publish(LocatorEntry{locs[0], 10})

	ctx, cancel := context.WithCancel(context.Background())
	var polls, bad atomic.Int64
	var mu sync.Mutex
	var firstBad string
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			set, rcode, err := e.queryL64(ctx, mnName)
			if ctx.Err() != nil {
				return
			}
			polls.Add(1)
			if err != nil || rcode != 0 || len(set) == 0 || len(set) > 2 {
				bad.Add(1)
				mu.Lock()
				if firstBad == "" {
					firstBad = strings.TrimSpace(strings.Join([]string{errString(err), setString(set)}, " "))
				}
				mu.Unlock()
			}
		}
	})
	const moves = 50
	for i := range moves {
		old, next := locs[i%3], locs[(i+1)%3]
		publish(LocatorEntry{old, 20}, LocatorEntry{next, 10}) // new one up, preferred
		publish(LocatorEntry{next, 10})                        // old one gone
	}
	cancel()
	wg.Wait()
	t.Logf("%d L64 queries during %d updates, %d empty or wrong", polls.Load(), 2*moves, bad.Load())
	if bad.Load() != 0 {
		t.Fatalf("%d answers empty or wrong; first: %s", bad.Load(), firstBad)
	}
	if polls.Load() < 2*moves {
		t.Fatalf("only %d polls: the test did not watch the updates", polls.Load())
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func setString(set map[wire.L64]uint16) string {
	var s []string
	for l := range set {
		s = append(s, l.String())
	}
	slices.Sort(s)
	return "{" + strings.Join(s, " ") + "}"
}

func TestWrongKeyRefusedCountedNamed(t *testing.T) {
	e := newEnv(t)
	l1 := mustL64(t, "2001:db8:1:0")
	badSecret := e.key
	badSecret.Secret = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	unknown := e.key
	unknown.Name = "nobody.ilnp.test."
	cases := []struct {
		name  string
		key   *TSIGKey
		owner string
		cause Cause
		text  string
	}{
		{"wrong secret", &badSecret, mnName, CauseBadSig, "BADSIG"},
		{"unknown key", &unknown, mnName, CauseBadKey, "BADKEY"},
		{"name outside policy", &e.key, "other.ilnp.test.", CauseRefused, "REFUSED"},
		{"unsigned", nil, mnName, CauseRefused, "REFUSED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, rec := e.startPublisher(t, c.key, c.owner, nil)
			if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l1, 10}}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := p.Wait(ctx)
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait = %v, want parked error", err)
			}
			st := p.Status()
			if st.Stats.Errors[c.cause] != 1 || st.Stats.UpdatesOK != 0 || st.Stats.UpdatesSent != 1 {
				t.Errorf("stats %+v, want exactly one %s and no retry", st.Stats, c.cause)
			}
			if !strings.Contains(err.Error(), string(c.cause)) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("error %q does not name %s / %s", err, c.cause, c.text)
			}
			if l := rec.log(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "cause="+string(c.cause)) {
				t.Errorf("no error log line naming the cause:\n%s", l)
			}
			time.Sleep(300 * time.Millisecond) // longer than MaxBackoff: no retry may happen
			if n := p.Status().Stats.UpdatesSent; n != 1 {
				t.Errorf("%d updates sent for a non-retryable error, want 1", n)
			}
			out, _ := e.srv.Dig(e.mn, "+short", c.owner, "L64")
			if strings.TrimSpace(out) != "" {
				t.Errorf("records appeared despite the refusal: %q", out)
			}
			ev := rec.events
			if len(ev) != 2 || ev[1].Kind != timeline.DNSUpdateResult || !strings.HasPrefix(ev[1].Detail, string(c.cause)) ||
				ev[0].Attempt != 1 || ev[1].Locator != l1.String() || ev[1].Node != "mn" || ev[1].Duration <= 0 {
				t.Errorf("timeline %+v", ev)
			}
		})
	}
}

// TestUnreachableRetriesLatestWins cuts the server's link, publishes two states while it is
// gone, and checks the publisher retried with backoff and the newest state is what lands.
func TestUnreachableRetriesLatestWins(t *testing.T) {
	e := newEnv(t)
	p, rec := e.startPublisher(t, &e.key, mnName, nil)
	l1, l2, l3 := mustL64(t, "2001:db8:1:0"), mustL64(t, "2001:db8:2:0"), mustL64(t, "2001:db8:3:0")
	if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l1, 10}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)

	e.srv.NS.Run("ip", "link", "set", "srv0", "down")
	for _, l := range []wire.L64{l2, l3} {
		time.Sleep(700 * time.Millisecond) // the worker is inside a 500 ms exchange timeout or backoff
		start := time.Now()
		if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l, 10}}); err != nil {
			t.Fatal(err)
		}
		// Publish hands the state over and returns; it must not wait for the stuck exchange.
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("Publish blocked for %v while the server was unreachable", d)
		}
		time.Sleep(800 * time.Millisecond)
	}
	st := p.Status()
	failures := st.Stats.Errors[CauseTimeout] + st.Stats.Errors[CauseUnreachable]
	if failures < 2 || st.Published != 1 || st.Parked {
		t.Fatalf("while the server is gone: %+v, want retried failures and generation 1 still published", st)
	}
	if !strings.Contains(rec.log(), "will retry") {
		t.Errorf("no retry log line:\n%s", rec.log())
	}
	t.Logf("while unreachable: %d failed attempts (%v), superseded states %d", failures, st.Stats.Errors, st.Stats.Superseded)

	back := time.Now()
	e.srv.NS.Run("ip", "link", "set", "srv0", "up")
	waitPublished(t, p, 10*time.Second)
	t.Logf("server link up -> latest state published in %v", time.Since(back))
	if got := digSet(t, e, "L64"); !maps.Equal(got, map[uint64]uint16{uint64(l3): 10}) {
		t.Fatalf("after the server came back: %v, want only %v", got, l3)
	}
	// No UPDATE for the superseded l2 state may have succeeded, and every failed try is on
	// the timeline with its cause and attempt number.
	maxAttempt := 0
	for _, ev := range rec.events {
		if ev.Kind != timeline.DNSUpdateResult {
			continue
		}
		if strings.HasPrefix(ev.Detail, "ok") && strings.Contains(ev.Detail, l2.String()) {
			t.Errorf("stale state was applied: %+v", ev)
		}
		if strings.HasPrefix(ev.Detail, string(CauseTimeout)) || strings.HasPrefix(ev.Detail, string(CauseUnreachable)) {
			maxAttempt = max(maxAttempt, ev.Attempt)
		}
	}
	if maxAttempt < 2 {
		t.Errorf("timeline shows no retried attempt (max attempt %d): %+v", maxAttempt, rec.events)
	}
}

// TestStaleUpdateCannotOverwrite replays an old UPDATE after a newer one: the
// compare-and-swap prerequisite makes the server reject it.
func TestStaleUpdateCannotOverwrite(t *testing.T) {
	e := newEnv(t)
	p, _ := e.startPublisher(t, &e.key, mnName, nil)
	l1, l2, l3 := mustL64(t, "2001:db8:1:0"), mustL64(t, "2001:db8:2:0"), mustL64(t, "2001:db8:3:0")
	if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l1, 10}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)
	if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l2, 10}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)
	// An update built against the old belief {l1}, as a delayed retransmission of the
	// first move would be, arrives after the newer one.
	stale, err := NewPublisher(PublisherConfig{Name: mnName, Zone: "ilnp.test.", Server: e.server(),
		Key: &e.key, TTL: time.Second, Dial: e.dial})
	if err != nil {
		t.Fatal(err)
	}
	belief := stale.wantRRs(&desired{nid: testNID, locs: []LocatorEntry{{l1, 10}}})
	cause, err := stale.sync(context.Background(), &desired{gen: 1, nid: testNID, locs: []LocatorEntry{{l1, 10}, {l3, 20}}}, &belief, 1)
	if cause != CausePrereq || err == nil {
		t.Fatalf("stale update: cause %s err %v, want %s", cause, err, CausePrereq)
	}
	t.Logf("stale update rejected: %v", err)
	if got := digSet(t, e, "L64"); !maps.Equal(got, map[uint64]uint16{uint64(l2): 10}) {
		t.Fatalf("after a stale update: %v, want only %v", got, l2)
	}
}

// BenchmarkPublishToVisible measures one move: Publish of a new single-locator set until an
// L64 query to the server (over a veth link, from the mobile node's namespace) returns it.
func BenchmarkPublishToVisible(b *testing.B) {
	e := newEnv(b)
	p, _ := e.startPublisher(b, &e.key, mnName, nil)
	locs := []wire.L64{mustL64(b, "2001:db8:1:0"), mustL64(b, "2001:db8:2:0")}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		to := locs[i%2]
		i++
		if err := p.Publish(ctx, testNID, []LocatorEntry{{to, 10}}); err != nil {
			b.Fatal(err)
		}
		for {
			set, _, err := e.queryL64(ctx, mnName)
			if err == nil && len(set) == 1 && set[to] == 10 {
				break
			}
		}
	}
}

// TestOutOfBandChangeIsRepaired: another writer adds a stray L64 behind the publisher's back.
// The publisher's next compare-and-swap fails (its belief is stale), it re-reads and makes the
// RRset equal to its own locators again; a NID change replaces the NID RR.
func TestOutOfBandChangeIsRepaired(t *testing.T) {
	e := newEnv(t)
	p, _ := e.startPublisher(t, &e.key, mnName, nil)
	l1, l2, stray := mustL64(t, "2001:db8:1:0"), mustL64(t, "2001:db8:2:0"), mustL64(t, "2001:db8:99:0")
	if err := p.Publish(context.Background(), testNID, []LocatorEntry{{l1, 10}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)

	other, _ := e.startPublisher(t, &e.key, mnName, nil)
	if err := other.Publish(context.Background(), testNID, []LocatorEntry{{l1, 10}, {stray, 5}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, other, 5*time.Second)

	newNID := testNID + 1
	if err := p.Publish(context.Background(), newNID, []LocatorEntry{{l2, 10}, {l1, 20}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)
	if got := digSet(t, e, "L64"); !maps.Equal(got, map[uint64]uint16{uint64(l2): 10, uint64(l1): 20}) {
		t.Fatalf("L64 after repair: %v", got)
	}
	if got := digSet(t, e, "NID"); !maps.Equal(got, map[uint64]uint16{uint64(newNID): DefaultNIDPreference}) {
		t.Fatalf("NID after change: %v", got)
	}
	st := p.Status().Stats
	if st.Errors[CausePrereq] != 1 || st.StateReads != 2 {
		t.Errorf("stats %+v: want one prerequisite failure and a second state read", st)
	}
}
