package encap

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"ilnp/internal/nstest"
)

// IPv4 addresses on an ILNP interface come and go as locators with their lifetimes; other
// interfaces, link-local and loopback addresses are ignored.
func TestWatchIPv4(t *testing.T) {
	ns := nstest.New(t, "enW")
	ns.Run("ip", "link", "add", "w0", "type", "veth", "peer", "name", "w1")
	ns.Run("ip", "link", "set", "w0", "up")
	ns.Run("ip", "link", "set", "w1", "up")
	ns.Run("ip", "addr", "add", "192.0.2.10/24", "dev", "w0") // before the watch: listed
	h, err := netns.GetFromName(ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan IPv4Event, 16)
	errc := make(chan error, 1)
	go func() { errc <- WatchIPv4(ctx, WatchOptions{Interfaces: []string{"w0"}, NetNS: &h}, out) }()
	next := func(what string) IPv4Event {
		t.Helper()
		select {
		case ev := <-out:
			return ev
		case err := <-errc:
			t.Fatalf("%s: watch ended: %v", what, err)
		case <-time.After(3 * time.Second):
			t.Fatalf("no event for %s", what)
		}
		return IPv4Event{}
	}
	ev := next("the existing address")
	want, _ := L32(netip.MustParseAddrPort("192.0.2.10:49191"))
	if ev.Gone || ev.Iface != "w0" || ev.Addr != netip.MustParsePrefix("192.0.2.10/24") || ev.Locator != want || ev.Valid != 0 {
		t.Fatalf("existing static address: %+v", ev)
	}
	ns.Run("ip", "addr", "add", "192.0.2.11/24", "dev", "w1")
	ns.Run("ip", "addr", "add", "169.254.1.1/16", "dev", "w0")
	ns.Run("ip", "addr", "add", "198.51.100.10/24", "dev", "w0", "valid_lft", "30", "preferred_lft", "20")
	ev = next("a leased address")
	if ev.Gone || ev.Addr.Addr() != netip.MustParseAddr("198.51.100.10") || ev.Valid != 30*time.Second || ev.Preferred != 20*time.Second {
		t.Fatalf("leased address (another interface's or a link-local one reported first?): %+v", ev)
	}
	ns.Run("ip", "addr", "del", "192.0.2.10/24", "dev", "w0")
	ev = next("the removal")
	if !ev.Gone || ev.Addr.Addr() != netip.MustParseAddr("192.0.2.10") {
		t.Fatalf("removal: %+v", ev)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
