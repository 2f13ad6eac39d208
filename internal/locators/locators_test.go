package locators

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

const testNID = wire.NID(0x0214_4fff_fe20_ee64)

// lab is a router namespace running radvd and a host namespace running Run.
type lab struct {
	router, host *nstest.NS
	hostNS       netns.NsHandle
	events       chan Event
	cancel       context.CancelFunc
	done         chan error
}

func radvdConf(iface, prefix string) string { return radvdConfInterval(iface, prefix, 0.05, 0.1) }

func radvdConfInterval(iface, prefix string, minInterval, maxInterval float64) string {
	// AdvIntervalOpt lets radvd go below MinRtrAdvInterval 3 s (see shared/notes/platform.md).
	return fmt.Sprintf(`interface %s {
	AdvSendAdvert on;
	AdvIntervalOpt on;
	MinRtrAdvInterval %g;
	MaxRtrAdvInterval %g;
	MinDelayBetweenRAs 0.05;
	AdvDefaultLifetime 30;
	prefix %s {
		AdvOnLink on;
		AdvAutonomous on;
		AdvValidLifetime 600;
		AdvPreferredLifetime 300;
	};
};
`, iface, minInterval, maxInterval, prefix)
}

func newLab(t *testing.T, dad DADMode) *lab { return newLabOpts(t, Options{DAD: dad}) }

func newLabOpts(t *testing.T, opts Options) *lab {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd")
	l := &lab{router: nstest.New(t, "loc-r"), host: nstest.New(t, "loc-h")}
	l.router.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	l.router.Run("sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
	// The kernel's own SLAAC stays off on the host: the addresses under test are ours.
	// DAD stays on (accept_dad=1, the default), so the optimistic path is what is measured.
	l.host.Run("sysctl", "-qw", "net.ipv6.conf.default.autoconf=0")
	// The kernel's own Router Solicitations are off: the ones under test are Run's.
	l.host.Run("sysctl", "-qw", "net.ipv6.conf.default.router_solicitations=0")
	nstest.Link(t, l.router, "r0", l.host, "h0")

	h, err := netns.GetFromName(l.host.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	l.hostNS = h

	l.events = make(chan Event, 256)
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan error, 1)
	go func() {
		opts.Interfaces, opts.NID, opts.NetNS = []string{"h0"}, testNID, &l.hostNS
		if os.Getenv("LOCATORS_DEBUG") != "" {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		l.done <- Run(ctx, opts, l.events)
	}()
	t.Cleanup(func() { l.stop(t) })
	return l
}

// stop cancels Run and checks that it returns promptly and without error.
func (l *lab) stop(t *testing.T) {
	if l.cancel == nil {
		return
	}
	l.cancel()
	l.cancel = nil
	select {
	case err := <-l.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Run did not return after cancel")
	}
}

func (l *lab) startRadvd(t *testing.T, prefix string) { l.startRadvdConf(t, radvdConf("r0", prefix)) }

func (l *lab) startRadvdConf(t *testing.T, text string) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "radvd.conf")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	l.router.Start(func(c *exec.Cmd) { c.Stderr = failureLog(t, "radvd") },
		"radvd", "-n", "-C", conf, "-p", filepath.Join(dir, "radvd.pid"), "-m", "stderr")
}

// wait returns the first event that match accepts, failing the test after timeout.
func (l *lab) wait(t *testing.T, what string, timeout time.Duration, match func(Event) bool) Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case e := <-l.events:
			t.Logf("event %T %+v", e, e)
			if match(e) {
				return e
			}
		case err := <-l.done:
			t.Fatalf("Run ended while waiting for %s: %v", what, err)
		case <-deadline:
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

func TestRunNeedsInterfaces(t *testing.T) {
	err := Run(context.Background(), Options{}, make(chan Event))
	if !errors.Is(err, ErrNoInterfaces) {
		t.Fatalf("err = %v", err)
	}
}

func TestDiscoveryOptimistic(t *testing.T) { testDiscovery(t, DADOptimistic, unix.IFA_F_OPTIMISTIC) }
func TestDiscoveryNoDAD(t *testing.T)      { testDiscovery(t, DADNone, unix.IFA_F_NODAD) }

func testDiscovery(t *testing.T, dad DADMode, wantFlag int) {
	l := newLab(t, dad)
	l.wait(t, "initial link up", 3*time.Second, func(e Event) bool {
		c, ok := e.(LinkChange)
		return ok && c.Iface == "h0" && c.Up
	})
	l.startRadvd(t, "2001:db8:7::/64")

	ra := l.wait(t, "router advertisement", 10*time.Second, func(e Event) bool { _, ok := e.(RASeen); return ok }).(RASeen)
	if ra.Iface != "h0" || !ra.Router.IsLinkLocalUnicast() || ra.RouterLifetime != 30*time.Second {
		t.Fatalf("RA = %+v", ra)
	}
	if len(ra.Prefixes) != 1 || ra.Prefixes[0].Prefix != netip.MustParsePrefix("2001:db8:7::/64") ||
		ra.Prefixes[0].Valid != 600*time.Second || ra.Prefixes[0].Preferred != 300*time.Second ||
		!ra.Prefixes[0].Autonomous || !ra.Prefixes[0].OnLink {
		t.Fatalf("RA prefixes = %+v", ra.Prefixes)
	}
	formed := l.wait(t, "address formed", 2*time.Second, func(e Event) bool { _, ok := e.(AddressFormed); return ok }).(AddressFormed)
	want := netip.MustParseAddr("2001:db8:7::214:4fff:fe20:ee64")
	if formed.Addr != want || formed.Iface != "h0" || formed.Router != ra.Router {
		t.Fatalf("formed %+v, want %v", formed, want)
	}

	// Usable: a socket can bind to it and send to the router from it.
	var usable int64
	err := l.host.Do(func() error {
		c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: want.AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		usable = timeline.Now()
		dst := &net.UDPAddr{IP: ra.Router.AsSlice(), Port: 9, Zone: "h0"}
		_, err = c.WriteToUDP([]byte("x"), dst)
		return err
	})
	if err != nil {
		t.Fatalf("address not usable at once: %v", err)
	}
	t.Logf("RA read -> address added: %v; RA read -> bound and sent from it: %v",
		formed.Elapsed, time.Duration(usable-ra.MonoNS))

	var flags int
	err = l.host.Do(func() error {
		link, err := netlink.LinkByName("h0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if a.IP.Equal(want.AsSlice()) {
				flags = a.Flags
				if a.ValidLft < 590 || a.ValidLft > 600 {
					return fmt.Errorf("valid lifetime %d, want ~600", a.ValidLft)
				}
				return nil
			}
		}
		return fmt.Errorf("%v not on h0: %v", want, addrs)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Checked milliseconds after the RA, well inside DAD's ~1 s, so an optimistic address must
	// still carry the flag (the kernel drops it silently unless optimistic_dad is on).
	if flags&wantFlag == 0 {
		t.Fatalf("address flags %#x lack %#x", flags, wantFlag)
	}

	// Later RAs refresh the address but do not report it again.
	l.wait(t, "second RA", 2*time.Second, func(e Event) bool {
		if f, ok := e.(AddressFormed); ok {
			t.Fatalf("address reported twice: %+v", f)
		}
		_, ok := e.(RASeen)
		return ok
	})

	// Interface down: reported, and its address goes.
	l.host.Run("ip", "link", "set", "h0", "down")
	var sawDown, sawGone bool
	l.wait(t, "link down and address gone", 3*time.Second, func(e Event) bool {
		switch e := e.(type) {
		case LinkChange:
			sawDown = sawDown || (!e.Up && e.Iface == "h0")
		case AddressGone:
			sawGone = sawGone || (e.Addr == want && e.Iface == "h0")
		}
		return sawDown && sawGone
	})

	// Up again: the next RA forms the address again.
	l.host.Run("ip", "link", "set", "h0", "up")
	l.wait(t, "link up", 3*time.Second, func(e Event) bool { c, ok := e.(LinkChange); return ok && c.Up })
	again := l.wait(t, "address formed again", 10*time.Second, func(e Event) bool { _, ok := e.(AddressFormed); return ok }).(AddressFormed)
	if again.Addr != want {
		t.Fatalf("formed again %v", again.Addr)
	}
	l.stop(t)
}

// A router's carrier loss (the peer side going down) is reported as the host interface down.
func TestCarrierLoss(t *testing.T) {
	l := newLab(t, DADOptimistic)
	l.wait(t, "initial link up", 3*time.Second, func(e Event) bool { c, ok := e.(LinkChange); return ok && c.Up })
	l.router.Run("ip", "link", "set", "r0", "down")
	c := l.wait(t, "carrier loss", 3*time.Second, func(e Event) bool { _, ok := e.(LinkChange); return ok }).(LinkChange)
	if c.Up || c.Iface != "h0" {
		t.Fatalf("link change %+v", c)
	}
}

// RAs on interfaces that are not configured are ignored.
func TestOtherInterfaceIgnored(t *testing.T) {
	nstest.RequireRoot(t)
	nstest.RequireTool(t, "radvd")
	l := newLab(t, DADOptimistic)
	other := nstest.New(t, "loc-o")
	other.Run("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	other.Run("sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
	nstest.Link(t, other, "o0", l.host, "x0")
	dir := t.TempDir()
	conf := filepath.Join(dir, "radvd.conf")
	if err := os.WriteFile(conf, []byte(radvdConf("o0", "2001:db8:9::/64")), 0o644); err != nil {
		t.Fatal(err)
	}
	other.Start(nil, "radvd", "-n", "-C", conf, "-p", filepath.Join(dir, "pid"), "-m", "stderr")
	deadline := time.After(3 * time.Second)
	for {
		select {
		case e := <-l.events:
			switch e := e.(type) {
			case RASeen, AddressFormed:
				t.Fatalf("event from an unconfigured interface: %+v", e)
			case LinkChange:
				if e.Iface != "h0" {
					t.Fatalf("link event for %s", e.Iface)
				}
			}
		case <-deadline:
			out := l.host.Run("ip", "-6", "addr", "show", "dev", "x0")
			if strings.Contains(out, "2001:db8:9:") {
				t.Fatalf("address formed on x0:\n%s", out)
			}
			return
		}
	}
}

// With periodic RAs 20-30 s apart (initial ones 16 s apart) and the kernel's own solicitations off, an RA within a few
// seconds of the link coming up can only answer Run's Router Solicitation. radvd answers a solicitation from a
// link-local address with a unicast RA; it answers one from the unspecified address (or any, within its
// MinDelayBetweenRAs of 3 s after its last multicast RA) with a multicast RA, which is still an answer when it
// comes sooner than radvd's next periodic RA could (a CI run saw one 2.0 s after radvd's first RA).
func TestSolicitOnLinkUp(t *testing.T) {
	l := newLabOpts(t, Options{DAD: DADOptimistic, RemoveOnExit: true})
	l.wait(t, "initial link up", 3*time.Second, func(e Event) bool { c, ok := e.(LinkChange); return ok && c.Up })
	l.startRadvdConf(t, radvdConfInterval("r0", "2001:db8:7::/64", 20, 30))
	first := l.wait(t, "first RA", 10*time.Second, func(e Event) bool { _, ok := e.(RASeen); return ok }).(RASeen)
	l.wait(t, "first address", 2*time.Second, func(e Event) bool { _, ok := e.(AddressFormed); return ok })
	// The last multicast RA seen; radvd's next periodic one comes 16 s or more after it.
	lastMulticast := first.MonoNS
	const periodicAfter = 15 * time.Second

	for round := 0; round < 3; round++ {
		l.host.Run("ip", "link", "set", "h0", "down")
		l.wait(t, "link down", 3*time.Second, func(e Event) bool { c, ok := e.(LinkChange); return ok && !c.Up })
		l.host.Run("ip", "link", "set", "h0", "up")
		up := l.wait(t, "link up", 3*time.Second, func(e Event) bool { c, ok := e.(LinkChange); return ok && c.Up }).(LinkChange)
		ra := l.wait(t, "RA answering the solicitation", 6*time.Second, func(e Event) bool { _, ok := e.(RASeen); return ok }).(RASeen)
		if !ra.Unicast {
			since := time.Duration(ra.MonoNS - lastMulticast)
			if since >= periodicAfter {
				t.Fatalf("first RA after link up is multicast and %v after the last one: radvd's periodic RA, not an answer to a solicitation: %+v", since, ra)
			}
			t.Logf("round %d: the solicitation answered by a multicast RA %v after radvd's last", round, since)
			lastMulticast = ra.MonoNS
		}
		formed := l.wait(t, "address after solicitation", 2*time.Second, func(e Event) bool { _, ok := e.(AddressFormed); return ok }).(AddressFormed)
		t.Logf("link up -> locator address formed: %v", time.Duration(formed.MonoNS-up.MonoNS))
	}

	// RemoveOnExit: the address goes with Run.
	l.stop(t)
	if out := l.host.Run("ip", "-6", "addr", "show", "dev", "h0"); strings.Contains(out, "2001:db8:7:") {
		t.Fatalf("address left after Run:\n%s", out)
	}
}

// failureLog collects a helper program's output and shows it only if the test fails.
func failureLog(t *testing.T, name string) io.Writer {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s output:\n%s", name, buf.String())
		}
	})
	return writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestDefaultNID(t *testing.T) {
	ns := nstest.New(t, "loc-n")
	ns.Run("ip", "link", "add", "n0", "address", "00:14:4f:20:ee:64", "type", "veth", "peer", "name", "n1")
	var nid wire.NID
	err := ns.Do(func() error {
		var err error
		nid, err = DefaultNID("n0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// 00:14:4f:20:ee:64 -> 0214:4fff:fe20:ee64 (u/l bit inverted, fffe inserted).
	if nid != 0x02144fff_fe20ee64 {
		t.Fatalf("NID %v", nid)
	}
	if err := ns.Do(func() error { _, err := DefaultNID("lo"); return err }); err == nil {
		t.Fatal("loopback (no MAC) gave a NID")
	}
	if _, err := DefaultNID("no-such-if0"); err == nil {
		t.Fatal("missing interface gave a NID")
	}
}
