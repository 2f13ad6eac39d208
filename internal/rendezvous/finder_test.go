package rendezvous

import (
	"context"
	"errors"
	"slices"
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
	// A node inside a mobile network: its locators are the network's (RFC 6742 s.2.4).
	"mobile 30 IN NID 10 0014:4fff:ff20:ee67",
	"mobile 40 IN LP 10 net-a",
	"mobile 40 IN LP 5 net-b",
	"mobile 40 IN LP 20 nowhere",
	"net-a 25 IN L64 10 2001:0db8:000d:0000",
	"net-b 50 IN L64 10 2001:0db8:000e:0000",
	"net-b 50 IN LP 1 net-a", // not followed: pointers do not chain
	"both 30 IN NID 10 0014:4fff:ff20:ee68",
	"both 30 IN L64 7 2001:0db8:000f:0000",
	"both 30 IN LP 3 net-a",
	"lost 30 IN NID 10 0014:4fff:ff20:ee69",
	"lost 30 IN LP 1 nowhere",
	// A node reachable over IPv4 only: an L32 record (issue 14).
	"v4 30 IN NID 10 0014:4fff:ff20:ee6a",
	"v4 30 IN L32 10 198.51.100.2",
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
	// An L32 record is an IPv4 locator on the default encapsulation port.
	if ilvs, _, err := f.Lookup(ctx, "v4.ilnp.test"); err != nil || len(ilvs) != 1 ||
		ilvs[0].ILV != (wire.ILV{Locator: 0x0000_c027_c633_6402, NID: 0x00144fffff20ee6a}) {
		t.Fatalf("Lookup v4 = %+v %v, want the IPv4 locator 198.51.100.2:49191", ilvs, err)
	}

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

// LP records (RFC 6742 s.2.4) are followed one level: the targets' L64 records become the
// node's locators, ranked by the LP preference, with the shorter TTL of the two records.
func TestLookupFollowsLocatorPointers(t *testing.T) {
	e := newEnv(t, staticRecords...)
	f, err := NewFinder(FinderConfig{Server: e.server(), Dial: e.dial})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name    string
		nid     wire.NID
		want    []string // locators, most preferred first
		wantTTL time.Duration
	}{
		// net-b (LP 5) before net-a (LP 10); "nowhere" has no L64 and adds nothing; net-b's
		// own LP to net-a is not followed. TTL: net-a's L64 (25 s) is the shortest.
		{"mobile.ilnp.test.", 0x00144fffff20ee67, []string{"2001:0db8:000e:0000", "2001:0db8:000d:0000"}, 25 * time.Second},
		// Direct L64 records and pointed ones together, each with its preference.
		{"both.ilnp.test.", 0x00144fffff20ee68, []string{"2001:0db8:000d:0000", "2001:0db8:000f:0000"}, 25 * time.Second},
	}
	for _, c := range cases {
		ilvs, ttl, err := f.Lookup(ctx, c.name)
		if err != nil {
			t.Fatalf("Lookup %s: %v", c.name, err)
		}
		var got []string
		for _, v := range ilvs {
			if v.ILV.NID != c.nid {
				t.Errorf("Lookup %s: NID %v, want %v", c.name, v.ILV.NID, c.nid)
			}
			got = append(got, v.ILV.Locator.String())
		}
		if !slices.Equal(got, c.want) || ttl != c.wantTTL {
			t.Errorf("Lookup %s = %v (ttl %v), want %v (ttl %v)", c.name, got, ttl, c.want, c.wantTTL)
		}
	}
	// An LP whose target has no L64 leaves the node without locators: not ILNP, cached for
	// the target's negative TTL (SOA minimum 5 s).
	if ilvs, ttl, err := f.Lookup(ctx, "lost.ilnp.test."); !errors.Is(err, ErrNoILNP) || ilvs != nil || ttl != 5*time.Second {
		t.Errorf("Lookup lost = %v %v %v, want ErrNoILNP for 5s", ilvs, ttl, err)
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
		wantDials int64 // 0: served from the cache; 4: NID, L64, LP and L32 queried
	}{
		{0, "cn.ilnp.test.", 30 * time.Second, 4},
		{10 * time.Second, "cn.ilnp.test.", 20 * time.Second, 0},
		{19 * time.Second, "cn.ilnp.test.", time.Second, 0},
		{time.Second, "cn.ilnp.test.", 30 * time.Second, 4}, // exactly at expiry: asked again
		{0, "zero.ilnp.test.", 0, 4},                        // TTL 0: never cached
		{0, "zero.ilnp.test.", 0, 4},
		{0, "absent.ilnp.test.", 5 * time.Second, 4}, // negative answers cached per RFC 2308
		{4 * time.Second, "absent.ilnp.test.", time.Second, 0},
		{time.Second, "absent.ilnp.test.", 5 * time.Second, 4},
		{0, "mobile.ilnp.test.", 25 * time.Second, 7}, // + one L64 query per LP target
		{24 * time.Second, "mobile.ilnp.test.", time.Second, 0},
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
