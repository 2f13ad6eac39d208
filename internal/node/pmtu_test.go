package node_test

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
)

// TestPathMTUClamp: R's link to the MN's network carries only 1280 bytes, so R answers the
// CN's full-size packets with Packet Too Big 1280, which leaves the session view 1272 once the
// nonce header is in: less than the kernel will take. The CN's datapath reports it and ilnpd
// installs a host route to the MN's view with the MTU locked at 1272 (internal/pmtu): a TCP
// stream CN -> MN carries on, the event is on the timeline, and the route goes with the daemon.
func TestPathMTUClamp(t *testing.T) {
	n := newTestNet(t, "soft")
	n.R.Run("ip", "link", "set", "r-mn1", "mtu", "1280")
	mnAddr := ilv(l2, mnNID)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln := n.MN.Listen("tcp6", "[::]:5001")
	defer ln.Close()
	var got atomic.Int64
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = nstest.ReadPattern(ctx, c, &got)
	}()
	c := n.CN.Dial("tcp6", netip.AddrPortFrom(mnAddr, 5001).String())
	defer c.Close()
	go func() { _ = nstest.WritePattern(ctx, c, 32<<10, 4*time.Millisecond) }()
	n.waitFor(10*time.Second, "2 MB CN -> MN over the 1280-byte link", func() (bool, string) {
		return got.Load() >= 2<<20, ""
	})

	stats, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["pmtu_clamps"] != 1 || stats["dp_ingress_ptb_below_min"] == 0 {
		t.Errorf("CN: pmtu_clamps %d (want 1), dp_ingress_ptb_below_min %d (want > 0)",
			stats["pmtu_clamps"], stats["dp_ingress_ptb_below_min"])
	}
	// One route to the view: the daemon's own peer route carries the clamp (a second route
	// for the same destination would replace it, and removing that would remove both).
	if route := n.CN.Run("ip", "-6", "route", "show", mnAddr.String()); !strings.Contains(route, "proto static") ||
		!strings.Contains(route, "mtu lock 1272") || !strings.Contains(route, "advmss 1212") || strings.Count(route, "\n") != 1 {
		t.Errorf("CN's route to the MN's view: %q, want the peer route (proto static) with mtu lock 1272 advmss 1212", route)
	}
	evs, err := n.cn.events()
	if err != nil {
		t.Fatal(err)
	}
	if !hasEvent(evs, timeline.PathMTUClamp, "mtu 1272") {
		t.Errorf("no pmtu_clamp event:\n%s", formatEvents(evs, 0))
	}
	cancel()
	c.Close()
	if err := n.cn.stop(5 * time.Second); err != nil {
		t.Errorf("stop the CN's daemon: %v", err)
	}
	// The datapath outlives the daemon, and so does the peer route that sizes its packets,
	// clamp included (the next daemon adopts or rewrites it); no route of internal/pmtu's own.
	if route := n.CN.Run("ip", "-6", "route", "show", mnAddr.String()); strings.Contains(route, "proto 73") {
		t.Errorf("the CN's own clamp route outlived its daemon: %q", route)
	}
}
