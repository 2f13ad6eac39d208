package rendezvous

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"ilnp/internal/wire"
)

var staticRecords = []string{
	"cn 30 IN NID 10 0014:4fff:ff20:ee64",
	"cn 30 IN L64 20 2001:0db8:000a:0000",
	"cn 60 IN L64 10 2001:0db8:000b:0000",
	"plain 60 IN AAAA 2001:db8::99",
	"half 60 IN NID 10 0014:4fff:ff20:ee65",
	"alias 20 IN CNAME cn",
	"zero 0 IN NID 10 0014:4fff:ff20:ee66",
	"zero 0 IN L64 10 2001:0db8:000c:0000",
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestLookupAgainstNamed(t *testing.T) {
	e := newEnv(t, staticRecords...)
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	f, err := NewFinder(FinderConfig{Server: e.server(), Dial: e.dial, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nid := wire.NID(0x00144fffff20ee64)
	want := []wire.ILV{
		{Locator: mustL64(t, "2001:db8:b:0"), NID: nid}, // preference 10 first
		{Locator: mustL64(t, "2001:db8:a:0"), NID: nid},
	}
	check := func(name string, wantTTL time.Duration) {
		t.Helper()
		ilvs, ttl, err := f.Lookup(ctx, name)
		if err != nil {
			t.Fatalf("Lookup %s: %v", name, err)
		}
		if len(ilvs) != len(want) || ilvs[0].ILV != want[0] || ilvs[1].ILV != want[1] {
			t.Fatalf("Lookup %s = %+v, want %v", name, ilvs, want)
		}
		if ttl != wantTTL {
			t.Fatalf("Lookup %s ttl %v, want %v (the smallest record TTL)", name, ttl, wantTTL)
		}
	}
	check("cn.ilnp.test", 30*time.Second)
	check("alias.ilnp.test.", 20*time.Second) // the CNAME's TTL bounds the answer

	for _, name := range []string{"plain.ilnp.test.", "half.ilnp.test.", "absent.ilnp.test."} {
		ilvs, ttl, err := f.Lookup(ctx, name)
		if !errors.Is(err, ErrNoILNP) || ilvs != nil {
			t.Errorf("Lookup %s = %v, %v; want ErrNoILNP", name, ilvs, err)
		}
		if ttl != 5*time.Second {
			t.Errorf("Lookup %s negative ttl %v, want 5s (SOA minimum)", name, ttl)
		}
	}

	// The resolver.Source view: ILNP names give I-LVs, others nil without error.
	if got, err := f.LookupILNP(ctx, "cn.ilnp.test"); err != nil || len(got) != 2 {
		t.Errorf("LookupILNP(cn) = %v %v", got, err)
	}
	if got, err := f.LookupILNP(ctx, "plain.ilnp.test"); err != nil || got != nil {
		t.Errorf("LookupILNP(plain) = %v %v, want nil, nil", got, err)
	}
	if got, err := f.LookupILNP(ctx, "out.of.zone.example"); err != nil || got != nil {
		t.Errorf("LookupILNP(out of zone, REFUSED) = %v %v, want nil, nil", got, err)
	}

	// A published name is found with the publisher's TTL.
	p, _ := e.startPublisher(t, &e.key, mnName, nil)
	if err := p.Publish(ctx, testNID, []LocatorEntry{{mustL64(t, "2001:db8:1:0"), 10}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, p, 5*time.Second)
	ilvs, ttl, err := f.Lookup(ctx, mnName)
	if err != nil || len(ilvs) != 1 || ilvs[0].ILV != (wire.ILV{Locator: mustL64(t, "2001:db8:1:0"), NID: testNID}) || ttl != time.Second {
		t.Fatalf("Lookup of the published name = %+v %v %v", ilvs, ttl, err)
	}
}

func TestLookupCacheRespectsTTL(t *testing.T) {
	e := newEnv(t, staticRecords...)
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	f, err := NewFinder(FinderConfig{Server: e.server(), Dial: e.dial, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lookup := func(name string) (time.Duration, int64, error) {
		t.Helper()
		before := e.dials.Load()
		_, ttl, err := f.Lookup(ctx, name)
		return ttl, e.dials.Load() - before, err
	}
	steps := []struct {
		advance   time.Duration
		name      string
		wantTTL   time.Duration
		wantDials int64 // 0: served from the cache; 2: NID and L64 queried
	}{
		{0, "cn.ilnp.test.", 30 * time.Second, 2},
		{10 * time.Second, "cn.ilnp.test.", 20 * time.Second, 0},
		{19 * time.Second, "cn.ilnp.test.", time.Second, 0},
		{time.Second, "cn.ilnp.test.", 30 * time.Second, 2}, // exactly at expiry: asked again
		{0, "zero.ilnp.test.", 0, 2},                        // TTL 0: never cached
		{0, "zero.ilnp.test.", 0, 2},
		{0, "absent.ilnp.test.", 5 * time.Second, 2}, // negative answers cached per RFC 2308
		{4 * time.Second, "absent.ilnp.test.", time.Second, 0},
		{time.Second, "absent.ilnp.test.", 5 * time.Second, 2},
	}
	for i, s := range steps {
		clock.advance(s.advance)
		ttl, dials, err := lookup(s.name)
		if err != nil && !errors.Is(err, ErrNoILNP) {
			t.Fatalf("step %d %s: %v", i, s.name, err)
		}
		if ttl != s.wantTTL || dials != s.wantDials {
			t.Errorf("step %d %s: ttl %v dials %d, want %v and %d", i, s.name, ttl, dials, s.wantTTL, s.wantDials)
		}
	}
}

func TestLookupServerDownIsNotNoILNP(t *testing.T) {
	e := newEnv(t, staticRecords...)
	e.srv.Stop()
	f, err := NewFinder(FinderConfig{Server: e.server(), Dial: e.dial, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.Lookup(context.Background(), "cn.ilnp.test.")
	var xe *ExchangeError
	if err == nil || errors.Is(err, ErrNoILNP) || !errors.As(err, &xe) {
		t.Fatalf("Lookup with the server down = %v, want an ExchangeError that is not ErrNoILNP", err)
	}
	if xe.Cause != CauseUnreachable && xe.Cause != CauseTimeout {
		t.Errorf("cause %s, want unreachable or timeout", xe.Cause)
	}
	t.Logf("server down: %v", err)
}
