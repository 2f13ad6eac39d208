package encap

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
)

// IPv4Event reports an IPv4 address appearing on or leaving an ILNP interface: an IPv4 locator
// (RFC 6742 L32) of this node, reachable on the encapsulation port. Whoever assigned it (the
// host's DHCPv4 client, static configuration) is not our business; its lifetimes are, and they
// give the locator the same states and lifetimes as an L64 from a Router Advertisement.
type IPv4Event struct {
	Iface   string
	Ifindex int
	Addr    netip.Prefix
	Locator wire.L64 // Addr's address with the encapsulation port
	// Valid and Preferred are the address's lifetimes (a DHCPv4 lease); 0 means forever (a
	// static address).
	Valid, Preferred time.Duration
	Gone             bool
}

// WatchOptions configure WatchIPv4.
type WatchOptions struct {
	Interfaces []string // ILNP interfaces by name; others are ignored
	Port       uint16   // encapsulation port (0: DefaultPort)
	// NetNS is the network namespace to watch (default: the caller's). Not closed.
	NetNS *netns.NsHandle
}

const infinityLifetime = 0xffffffff // INFINITY_LIFE_TIME of the kernel's address lifetimes

// WatchIPv4 sends an IPv4Event for every IPv4 address already on the interfaces and for every
// later change, until ctx ends. Loopback, link-local (169.254/16, RFC 3927) and non-global
// scope addresses are no locators.
func WatchIPv4(ctx context.Context, opts WatchOptions, out chan<- IPv4Event) error {
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	ns := netns.None()
	if opts.NetNS != nil {
		ns = *opts.NetNS
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("encap: netlink handle: %w", err)
	}
	defer h.Close()
	updates := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	// The library reports every problem here but ends the subscription (closing updates) only
	// when receiving fails; the rest (a message from another netlink socket, seen when several
	// subscriptions in one process list what exists, vishvananda/netlink#786) it skips, and
	// so does this watch. The last one explains a closed subscription.
	var lastErr atomic.Pointer[error]
	subOpts := netlink.AddrSubscribeOptions{ListExisting: true, ErrorCallback: func(err error) {
		lastErr.Store(&err)
	}}
	if opts.NetNS != nil {
		subOpts.Namespace = opts.NetNS
	}
	if err := netlink.AddrSubscribeWithOptions(updates, done, subOpts); err != nil {
		return fmt.Errorf("encap: subscribe to address changes: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-updates:
			if !ok {
				if p := lastErr.Load(); p != nil {
					return fmt.Errorf("encap: address subscription closed: %w", *p)
				}
				return fmt.Errorf("encap: address subscription closed")
			}
			ev, ok := ipv4Event(h, opts, u)
			if !ok {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

func ipv4Event(h *netlink.Handle, opts WatchOptions, u netlink.AddrUpdate) (IPv4Event, bool) {
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok {
		return IPv4Event{}, false
	}
	a = a.Unmap()
	if !a.Is4() || a.IsLoopback() || a.IsLinkLocalUnicast() || u.Scope != unix.RT_SCOPE_UNIVERSE {
		return IPv4Event{}, false
	}
	link, err := h.LinkByIndex(u.LinkIndex)
	if err != nil || !slices.Contains(opts.Interfaces, link.Attrs().Name) {
		return IPv4Event{}, false
	}
	ones, _ := u.LinkAddress.Mask.Size()
	loc, err := L32(netip.AddrPortFrom(a, opts.Port))
	if err != nil {
		return IPv4Event{}, false
	}
	return IPv4Event{
		Iface: link.Attrs().Name, Ifindex: u.LinkIndex, Addr: netip.PrefixFrom(a, ones), Locator: loc,
		Valid: lifetime(u.ValidLft), Preferred: lifetime(u.PreferedLft), Gone: !u.NewAddr,
	}, true
}

func lifetime(s int) time.Duration {
	if s < 0 || uint32(s) == infinityLifetime {
		return 0
	}
	return time.Duration(s) * time.Second
}
