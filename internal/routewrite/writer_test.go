package routewrite

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
)

// testNS is a namespace with an interface rw0 (a veth pair's end; the kernel here has no
// dummy links) carrying 2001:db8:ff::1/64.
func testNS(t testing.TB) (*nstest.NS, int) {
	ns := nstest.New(t, "rw")
	ns.Run("ip", "link", "add", "rw0", "type", "veth", "peer", "name", "rw1")
	ns.Run("ip", "link", "set", "rw1", "up")
	ns.Run("ip", "link", "set", "rw0", "up")
	ns.Run("ip", "-6", "addr", "add", "2001:db8:ff::1/64", "dev", "rw0", "nodad")
	return ns, ns.Ifindex("rw0")
}

func openIn(t testing.TB, ns *nstest.NS, batch int) *Writer {
	var w *Writer
	if err := ns.Do(func() (err error) { w, err = Open(batch); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// routes lists the namespace's static IPv6 /128 routes by destination.
func routes(t testing.TB, ns *nstest.NS) map[netip.Addr]netlink.Route {
	out := map[netip.Addr]netlink.Route{}
	if err := ns.Do(func() error {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V6,
			&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		for _, r := range rs {
			if a, ok := netip.AddrFromSlice(r.Dst.IP); ok {
				out[a] = r
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func peer(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)})
}

// A batch with bad routes in it: the others land as written, each bad one is reported with
// its destination and the kernel's reason, and a delete of a route that is not there is no
// error.
func TestBatchOneBadRoute(t *testing.T) {
	ns, link := testNS(t)
	w := openIn(t, ns, 0)
	gw := netip.MustParseAddr("2001:db8:ff::99")
	src := netip.MustParseAddr("2001:db8:ff::1")
	results := map[netip.Addr]error{}
	record := func(a netip.Addr) Done { return func(err error) { results[a] = err } }
	want := map[netip.Addr]Route{}
	for i := 1; i <= 6; i++ {
		r := Route{Dst: peer(i), LinkIndex: link, Gw: gw, MTU: 1400 + i, AdvMSS: 1340 + i, MTULock: i == 3}
		if i == 2 {
			r.Src = src
		}
		want[r.Dst] = r
		if err := w.Replace(r, record(r.Dst)); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			// No such interface, and a source address this host does not have.
			if err := w.Replace(Route{Dst: peer(100), LinkIndex: 9999, MTU: 1400}, record(peer(100))); err != nil {
				t.Fatal(err)
			}
			if err := w.Replace(Route{Dst: peer(101), LinkIndex: link, Src: netip.MustParseAddr("2001:db8:77::1")}, record(peer(101))); err != nil {
				t.Fatal(err)
			}
			if err := w.Delete(Route{Dst: peer(102), LinkIndex: link}, record(peer(102))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if w.Pending() != 9 {
		t.Fatalf("pending %d, want 9", w.Pending())
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if w.Pending() != 0 || len(results) != 9 {
		t.Fatalf("pending %d, %d results after flush", w.Pending(), len(results))
	}
	if err := results[peer(100)]; !errors.Is(err, unix.ENODEV) {
		t.Errorf("route on no interface: %v, want ENODEV", err)
	}
	if err := results[peer(101)]; !errors.Is(err, unix.EINVAL) {
		t.Errorf("route from a foreign source: %v, want EINVAL", err)
	}
	for _, a := range []netip.Addr{peer(100), peer(101)} {
		if err := results[a]; err == nil || !contains(err.Error(), a.String()) {
			t.Errorf("error %v does not name %s", err, a)
		}
	}
	if err := results[peer(102)]; err != nil {
		t.Errorf("delete of a missing route: %v", err)
	}
	got := routes(t, ns)
	if len(got) != len(want) {
		t.Errorf("%d routes in the kernel, want %d: %v", len(got), len(want), got)
	}
	for a, r := range want {
		if err := results[a]; err != nil {
			t.Errorf("%s: %v", a, err)
		}
		k, ok := got[a]
		if !ok {
			t.Errorf("%s: no route", a)
			continue
		}
		kgw, _ := netip.AddrFromSlice(k.Gw)
		ksrc, _ := netip.AddrFromSlice(k.Src)
		if k.LinkIndex != link || kgw != r.Gw || k.MTU != r.MTU || k.AdvMSS != r.AdvMSS || k.MTULock != r.MTULock ||
			(r.Src.IsValid() && ksrc != r.Src) {
			t.Errorf("%s: kernel has %+v, wrote %+v", a, k, r)
		}
	}

	// Replace changes a route in place; delete removes it; both in one batch, in order.
	r1 := want[peer(1)]
	r1.MTU, r1.AdvMSS = 1300, 1240
	w.Replace(r1, nil)
	w.Delete(want[peer(2)], record(peer(2)))
	w.Replace(want[peer(2)], nil) // and back
	w.Delete(want[peer(4)], record(peer(4)))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got = routes(t, ns)
	if got[peer(1)].MTU != 1300 {
		t.Errorf("replaced route MTU %d, want 1300", got[peer(1)].MTU)
	}
	if _, ok := got[peer(2)]; !ok || results[peer(2)] != nil {
		t.Errorf("route deleted and written again in one batch: present %v, %v", ok, results[peer(2)])
	}
	if _, ok := got[peer(4)]; ok || results[peer(4)] != nil {
		t.Errorf("deleted route still there (%v)", results[peer(4)])
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A full batch goes out before the next route is queued; a batch where every route fails
// reports every one (the error replies fit the socket).
func TestBatchBound(t *testing.T) {
	ns, link := testNS(t)
	w := openIn(t, ns, 100)
	var ok, failed int
	done := func(err error) {
		if err != nil {
			failed++
		} else {
			ok++
		}
	}
	for i := 0; i < 250; i++ {
		if err := w.Replace(Route{Dst: peer(i), LinkIndex: link, MTU: 1400}, done); err != nil {
			t.Fatal(err)
		}
		if w.Pending() > 100 {
			t.Fatalf("%d routes pending, batch is 100", w.Pending())
		}
	}
	if w.Pending() != 50 || ok != 200 {
		t.Fatalf("before flush: %d pending, %d done, want 50 and 200", w.Pending(), ok)
	}
	w.Flush()
	if n := len(routes(t, ns)); n != 250 || ok != 250 {
		t.Fatalf("%d routes in the kernel, %d accepted, want 250", n, ok)
	}
	w2 := openIn(t, ns, 2000)
	for i := 0; i < 2000; i++ {
		w2.Replace(Route{Dst: peer(i), LinkIndex: 4242, MTU: 1400}, done)
	}
	w2.Flush()
	if failed != 2000 {
		t.Fatalf("%d of 2,000 routes on a missing interface reported failed", failed)
	}
}

// BenchmarkRouteWrite: routes written per second into a namespace with 10,000 peer routes,
// one RouteReplace (a request and its ACK) each against the batched writer; and the batched
// writer's pass over 100,000 (a move's reroute in one loop turn: ns/op is the turn).
func BenchmarkRouteWrite(b *testing.B) {
	b.Run("routes=10000", func(b *testing.B) { benchRouteWrite(b, 10000, []string{"one-at-a-time", "batched"}) })
	b.Run("routes=100000", func(b *testing.B) { benchRouteWrite(b, 100000, []string{"batched"}) })
}

func benchRouteWrite(b *testing.B, n int, modes []string) {
	ns, link := testNS(b)
	gw := netip.MustParseAddr("2001:db8:ff::99")
	var h *netlink.Handle
	if err := ns.Do(func() (err error) { h, err = netlink.NewHandle(unix.NETLINK_ROUTE); return err }); err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	w := openIn(b, ns, 0)
	mtu := 1400
	route := func(i int) Route { return Route{Dst: peer(i), LinkIndex: link, Gw: gw, MTU: mtu, AdvMSS: mtu - 60} }
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			for it := 0; it < b.N; it++ {
				mtu = 1300 + it%100 // every pass changes every route
				for i := 0; i < n; i++ {
					r := route(i)
					if mode == "batched" {
						if err := w.Replace(r, nil); err != nil {
							b.Fatal(err)
						}
						continue
					}
					k := &netlink.Route{LinkIndex: r.LinkIndex, Dst: netipNet(r.Dst), Gw: r.Gw.AsSlice(), MTU: r.MTU, AdvMSS: r.AdvMSS,
						Protocol: unix.RTPROT_STATIC}
					if err := h.RouteReplace(k); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "routes/s")
		})
	}
	if got := len(routes(b, ns)); got != n {
		b.Fatalf("%d routes, want %d", got, n)
	}
}

func netipNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(128, 128)}
}

// A Done may queue another route: it goes out with the next flush.
func TestDoneQueuesAgain(t *testing.T) {
	ns, link := testNS(t)
	w := openIn(t, ns, 0)
	w.Replace(Route{Dst: peer(1), LinkIndex: link}, func(err error) {
		if err != nil {
			t.Error(err)
		}
		w.Replace(Route{Dst: peer(2), LinkIndex: link}, nil)
	})
	w.Replace(Route{Dst: peer(3), LinkIndex: link}, nil)
	w.Flush()
	if w.Pending() != 1 {
		t.Fatalf("%d pending after a Done queued one, want 1", w.Pending())
	}
	w.Flush()
	if got := routes(t, ns); len(got) != 3 {
		t.Fatalf("%d routes, want 3", len(got))
	}
}
