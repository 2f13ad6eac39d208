package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// host owns the kernel state the daemon adds outside the BPF maps: identity addresses on lo,
// per-peer routes with MTU headroom, and interface sysctls. Everything it adds it removes in
// close.
type host struct {
	nl         *netlink.Handle
	lo         netlink.Link
	identities map[netip.Addr]bool
	peerRoutes map[netip.Addr]*netlink.Route
	mtu        int // route MTU for ILNP peers: link MTU minus the nonce option
}

func newHost(headroom int) (*host, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("loopback: %w", err)
	}
	return &host{
		nl:         nl,
		lo:         lo,
		identities: map[netip.Addr]bool{},
		peerRoutes: map[netip.Addr]*netlink.Route{},
		mtu:        1500 - headroom,
	}, nil
}

// prepareInterface stops the kernel's own SLAAC on an ILNP interface (the daemon forms
// [prefix:NID] itself, with the node's one NID on every interface) while it keeps accepting
// RAs for default routes.
func (h *host) prepareInterface(name string) error {
	for key, value := range map[string]string{"autoconf": "0", "accept_ra": "1"} {
		path := filepath.Join("/proc/sys/net/ipv6/conf", name, key)
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", path, err)
		}
	}
	return nil
}

// addIdentity keeps addr as a /128 on lo, so sockets bound to it survive the interface that
// carried its locator going down (the kernel deletes an interface's addresses then, and
// packets of sockets bound to a deleted address are dropped).
func (h *host) addIdentity(addr netip.Addr) error {
	if h.identities[addr] {
		return nil
	}
	a := &netlink.Addr{
		IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)},
		Flags: unix.IFA_F_NODAD,
	}
	if err := h.nl.AddrReplace(h.lo, a); err != nil {
		return fmt.Errorf("identity %s on lo: %w", addr, err)
	}
	h.identities[addr] = true
	return nil
}

func (h *host) removeIdentity(addr netip.Addr) error {
	if !h.identities[addr] {
		return nil
	}
	delete(h.identities, addr)
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)}}
	if err := h.nl.AddrDel(h.lo, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("remove identity %s: %w", addr, err)
	}
	return nil
}

// routePeer gives a peer's session-view address a host route through the active locator's
// interface and router, with the MTU lowered by the nonce option and the advertised MSS to
// match: without the headroom a full-size packet grows past the link MTU when the datapath
// inserts the option and the veth drops it silently. The datapath redirects packets to the
// active interface anyway; this route is what sizes them.
func (h *host) routePeer(peer netip.Addr, ifindex int, router netip.Addr) error {
	if ifindex == 0 {
		return nil
	}
	r := &netlink.Route{
		LinkIndex: ifindex,
		Dst:       &net.IPNet{IP: peer.AsSlice(), Mask: net.CIDRMask(128, 128)},
		MTU:       h.mtu,
		AdvMSS:    h.mtu - 60,
		Protocol:  netlink.RouteProtocol(unix.RTPROT_STATIC),
	}
	if router.IsValid() {
		r.Gw = router.AsSlice()
	}
	if old := h.peerRoutes[peer]; old != nil && old.LinkIndex == r.LinkIndex && old.Gw.Equal(r.Gw) {
		return nil
	}
	if err := h.nl.RouteReplace(r); err != nil {
		return fmt.Errorf("route to peer %s: %w", peer, err)
	}
	h.peerRoutes[peer] = r
	return nil
}

// reroutePeers moves every peer route to a new active interface.
func (h *host) reroutePeers(ifindex int, router netip.Addr) error {
	var errs []error
	for peer := range h.peerRoutes {
		errs = append(errs, h.routePeer(peer, ifindex, router))
	}
	return errors.Join(errs...)
}

func (h *host) close() error {
	var errs []error
	for peer, r := range h.peerRoutes {
		if err := h.nl.RouteDel(r); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route to %s: %w", peer, err))
		}
	}
	for addr := range h.identities {
		errs = append(errs, h.removeIdentity(addr))
	}
	h.nl.Close()
	return errors.Join(errs...)
}
