package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
)

// Kernel state for nid-mode ephemeral: deprecated addresses and route source hints.

// deprecate gives an address a preferred lifetime of 0 and an infinite valid one: the kernel's
// source address selection avoids it (RFC 6724 rule 3), so it leaks to no one else, while a
// route's source hint (prefsrc) still picks it and packets to it are delivered.
func deprecate(a *netlink.Addr) {
	a.ValidLft = 0xffffffff // INFINITY_LIFE_TIME
	a.PreferedLft = 0
}

// isEphemeral says whether addr carries one of the ephemeral NIDs the host routes with.
func (h *host) isEphemeral(addr netip.Addr) bool {
	ilv, err := wire.ILVFromAddr(addr)
	if err != nil {
		return false
	}
	for _, nid := range h.peerSrc {
		if nid == ilv.NID {
			return true
		}
	}
	return false
}

// setPeerSource makes nid the source NID of the route to peer (0: none) and rewrites the route
// when it exists.
func (h *host) setPeerSource(peer netip.Addr, nid wire.NID) {
	if nid == 0 {
		delete(h.peerSrc, peer)
		return
	}
	h.peerSrc[peer] = nid
}

// addOnLink puts addr on interface ifindex as a deprecated /128 without DAD or prefix route,
// so the kernel answers the router's neighbour solicitations for it there.
func (h *host) addOnLink(ifindex int, addr netip.Addr) error {
	if h.onLink[addr] == ifindex {
		return nil
	}
	if old, ok := h.onLink[addr]; ok {
		if err := h.removeOnLink(addr); err != nil {
			return fmt.Errorf("move %s from interface %d: %w", addr, old, err)
		}
	}
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("interface %d: %w", ifindex, err)
	}
	a := &netlink.Addr{
		IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)},
		Flags: unix.IFA_F_NODAD | unix.IFA_F_NOPREFIXROUTE,
	}
	deprecate(a)
	if err := h.nl.AddrReplace(link, a); err != nil {
		return fmt.Errorf("ephemeral address %s on %s: %w", addr, link.Attrs().Name, err)
	}
	h.onLink[addr] = ifindex
	return nil
}

// removeOnLink deletes an address addOnLink added (gone already is fine: a link going down
// takes its addresses with it).
func (h *host) removeOnLink(addr netip.Addr) error {
	ifindex, ok := h.onLink[addr]
	if !ok {
		return nil
	}
	delete(h.onLink, addr)
	link, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return nil // the interface is gone, and its addresses with it
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(128, 128)}}
	if err := h.nl.AddrDel(link, a); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("remove ephemeral address %s: %w", addr, err)
	}
	return nil
}

// removeAddress128 deletes a /128 from an interface (ilnpd -flush of the state file's list).
func (h *host) removeAddress128(ifindex int, addr netip.Addr) error {
	h.onLink[addr] = ifindex
	return h.removeOnLink(addr)
}
