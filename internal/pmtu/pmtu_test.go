package pmtu

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:1::a")
	b := netip.MustParseAddr("2001:db8:2::b")
	t0 := time.Unix(1000, 0)
	tab := NewTable()
	for _, c := range []struct {
		dst     netip.Addr
		mtu     int
		at      time.Duration
		install bool
		ok      bool
		want    int // a's clamp afterwards
	}{
		{a, 1272, 0, true, true, 1272},
		{a, 1272, time.Minute, false, true, 1272},      // repeated: only extends the life
		{a, 1276, 2 * time.Minute, false, true, 1272},  // larger: the smaller one stays
		{a, 1264, 3 * time.Minute, true, true, 1264},   // smaller (16-byte nonce header): new route
		{a, 1280, 4 * time.Minute, false, false, 1264}, // the kernel's own minimum: not ours
		{a, MinMTU - 1, 4 * time.Minute, false, false, 1264},
		{b, 1244, 5 * time.Minute, true, true, 1264}, // an encapsulated path: 1280 - 28 - 8
		{netip.MustParseAddr("192.0.2.1"), 1272, 0, false, false, 1264},
		{netip.MustParseAddr("::ffff:192.0.2.1"), 1272, 0, false, false, 1264},
	} {
		install, err := tab.Want(c.dst, c.mtu, t0.Add(c.at))
		if install != c.install || (err == nil) != c.ok || tab.MTU(a) != c.want {
			t.Errorf("Want(%s, %d): %v, %v, a's clamp %d; want %v, ok %v, %d", c.dst, c.mtu, install, err, tab.MTU(a), c.install, c.ok, c.want)
		}
	}
	// a's last error at 3 min, b's at 5 min.
	if got := tab.Expire(t0.Add(3*time.Minute + Lifetime - time.Second)); len(got) != 0 {
		t.Errorf("expired early: %v", got)
	}
	if got := tab.Expire(t0.Add(3*time.Minute + Lifetime)); !slices.Equal(got, []netip.Addr{a}) {
		t.Errorf("expired at a's end: %v, want [%s]", got, a)
	}
	if tab.MTU(a) != 0 || tab.MTU(b) != 1244 {
		t.Errorf("after a expired: a %d, b %d", tab.MTU(a), tab.MTU(b))
	}
	if install, _ := tab.Want(a, 1272, t0.Add(20*time.Minute)); !install {
		t.Error("a new error after expiry does not reinstall the route")
	}
	if got := tab.All(); len(got) != 2 || tab.MTU(a) != 0 || tab.MTU(b) != 0 {
		t.Errorf("All: %v, then a %d b %d", got, tab.MTU(a), tab.MTU(b))
	}
}
