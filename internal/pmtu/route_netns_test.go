package pmtu

import (
	"net/netip"
	"strings"
	"testing"

	"ilnp/internal/nstest"
)

// TestNetnsRoute: Install puts a host route with the locked MTU through the interface the
// kernel uses for the destination, Present sees it, the kernel takes it away with its
// interface, and Remove deletes it and does not mind one already gone.
func TestNetnsRoute(t *testing.T) {
	a, b := nstest.New(t, "pmrA"), nstest.New(t, "pmrB")
	nstest.Link(t, a, "a0", b, "b0")
	a.Run("ip", "addr", "add", "2001:db8:9::1/64", "dev", "a0", "nodad")
	dst := netip.MustParseAddr("2001:db8:9::2")
	show := func() string { return strings.TrimSpace(a.Run("ip", "-6", "route", "show", dst.String()+"/128")) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var present bool
	must(a.Do(func() error { return Install(dst, 1272) }))
	if r := show(); !strings.Contains(r, "dev a0") || !strings.Contains(r, "mtu lock 1272") {
		t.Errorf("route after Install: %q, want dev a0 and mtu lock 1272", r)
	}
	must(a.Do(func() error { present = Present(dst, 1272); return nil }))
	if !present {
		t.Error("Present(1272) false after Install")
	}
	must(a.Do(func() error { present = Present(dst, 1264); return nil }))
	if present {
		t.Error("Present(1264) true for a 1272 route")
	}
	must(a.Do(func() error { return Install(dst, 1264) })) // a smaller one replaces it
	if r := show(); !strings.Contains(r, "mtu lock 1264") || strings.Count(r, "\n") != 0 {
		t.Errorf("route after the second Install: %q, want one with mtu lock 1264", r)
	}
	must(a.Do(func() error { return Remove(dst) }))
	if r := show(); r != "" {
		t.Errorf("route after Remove: %q", r)
	}
	must(a.Do(func() error { return Remove(dst) }))
	must(a.Do(func() error { return Install(dst, 1272) }))
	a.Run("ip", "link", "set", "a0", "down")
	must(a.Do(func() error { present = Present(dst, 1272); return nil }))
	if present {
		t.Errorf("Present after the interface went down: route %q", show())
	}
	if err := a.Do(func() error { return Install(netip.MustParseAddr("2001:db8:7::1"), 1272) }); err == nil {
		t.Error("Install without a route to the destination succeeded")
	}
}
