package locators

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
	"ilnp/internal/timeline"
)

// The handlers of one discovery driven by hand in the orders the two channels (RAs, link
// changes) can deliver: TestSoakShort once lost a locator for 20 s because an RA read just
// before its link went down was handled after the link-down event, formed the address on
// the dead link and, remembered as formed, kept every later RA from reporting it.
func TestRAOvertakenByLinkChange(t *testing.T) {
	nstest.RequireRoot(t)
	host, peer := nstest.New(t, "loc-h"), nstest.New(t, "loc-p")
	host.Run("sysctl", "-qw", "net.ipv6.conf.default.autoconf=0")
	nstest.Link(t, peer, "p0", host, "h0")
	idx := host.Ifindex("h0")
	h, err := netns.GetFromName(host.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	out := make(chan Event, 64)
	d, err := newDiscovery(Options{Interfaces: []string{"h0"}, NID: testNID, NetNS: &h, NoSolicit: true, DAD: DADNone}, out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.nl.Close()
	ctx := context.Background()

	link := func(up bool) {
		flags := uint32(0)
		if up {
			flags = unix.IFF_UP | unix.IFF_RUNNING
		}
		d.handleLink(ctx, netlink.LinkUpdate{
			IfInfomsg: nl.IfInfomsg{IfInfomsg: unix.IfInfomsg{Index: int32(idx), Flags: flags}},
			Header:    unix.NlMsghdr{Type: unix.RTM_NEWLINK},
			Link:      &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "h0", Index: idx}},
		})
	}
	ra := func() RASeen {
		return RASeen{MonoNS: timeline.Now(), Iface: "h0", IfIndex: idx,
			Router: netip.MustParseAddr("fe80::1").WithZone("h0"), RouterLifetime: 30 * time.Second,
			Prefixes: []Prefix{{Prefix: netip.MustParsePrefix("2001:db8:5::/64"), OnLink: true, Autonomous: true,
				Valid: 600 * time.Second, Preferred: 300 * time.Second}}}
	}
	formed := func() int {
		n := 0
		for {
			select {
			case e := <-out:
				if _, ok := e.(AddressFormed); ok {
					n++
				}
			default:
				return n
			}
		}
	}
	onLink := func() bool { return strings.Contains(host.Run("ip", "-6", "addr", "show", "dev", "h0"), "2001:db8:5:") }

	link(true)
	d.handleRA(ctx, ra())
	if n := formed(); n != 1 || !onLink() {
		t.Fatalf("first RA: %d addresses formed, on the link: %v", n, onLink())
	}

	// An RA read while up, handled after the link went down.
	stale := ra()
	host.Run("ip", "link", "set", "h0", "down")
	link(false)
	d.handleRA(ctx, stale)
	if n := formed(); n != 0 || onLink() {
		t.Fatalf("RA read before the link went down formed %d addresses (on the down link: %v)", n, onLink())
	}
	host.Run("ip", "link", "set", "h0", "up")
	link(true)
	if n := formed(); n != 0 {
		t.Fatalf("the stale RA was used when the link came back: %d addresses formed", n)
	}
	d.handleRA(ctx, ra())
	if n := formed(); n != 1 || !onLink() {
		t.Fatalf("first RA after the link came back: %d addresses formed (want 1), on the link: %v", n, onLink())
	}

	// An RA read after the link came up, handled before the link-up event: used at that event.
	host.Run("ip", "link", "set", "h0", "down")
	link(false)
	host.Run("ip", "link", "set", "h0", "up")
	d.handleRA(ctx, ra())
	if n := formed(); n != 0 {
		t.Fatalf("RA handled before the link-up event formed %d addresses at once", n)
	}
	link(true)
	if n := formed(); n != 1 || !onLink() {
		t.Fatalf("held RA at the link-up event: %d addresses formed (want 1), on the link: %v", n, onLink())
	}
}
