package pmtu

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes this package installs (rtnetlink's protocol field), so that
// Remove deletes only its own.
const RouteProtocol = 0x49 // 'I'

// Install puts in (or replaces) a host route to dst in the calling thread's network namespace
// with a locked MTU of mtu, through the interface and gateway the kernel would use for dst now.
func Install(dst netip.Addr, mtu int) error {
	if mtu < MinMTU || mtu > MaxMTU {
		return fmt.Errorf("pmtu: route to %s: MTU %d outside %d-%d", dst, mtu, MinMTU, MaxMTU)
	}
	ip := net.IP(dst.AsSlice())
	rs, err := netlink.RouteGet(ip)
	if err != nil {
		return fmt.Errorf("pmtu: route to %s: %w", dst, err)
	}
	if len(rs) == 0 || rs[0].LinkIndex == 0 {
		return fmt.Errorf("pmtu: no route to %s", dst)
	}
	r := &netlink.Route{
		Dst:       &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)},
		LinkIndex: rs[0].LinkIndex,
		Gw:        rs[0].Gw,
		MTU:       mtu,
		MTULock:   true,
		Protocol:  RouteProtocol,
		Table:     unix.RT_TABLE_MAIN,
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("pmtu: route to %s mtu %d: %w", dst, mtu, err)
	}
	return nil
}

// Remove deletes the host route Install put in for dst; one already gone (its interface
// went down) is not an error.
func Remove(dst netip.Addr) error {
	ip := net.IP(dst.AsSlice())
	r := &netlink.Route{
		Dst:      &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)},
		Protocol: RouteProtocol,
		Table:    unix.RT_TABLE_MAIN,
	}
	if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pmtu: remove route to %s: %w", dst, err)
	}
	return nil
}

// Present reports whether a host route to dst with mtu is in the main table - Install's, or
// the daemon's own peer route carrying the clamp (the kernel deletes a route with its
// interface's addresses when the interface goes down).
func Present(dst netip.Addr, mtu int) bool {
	ip := net.IP(dst.AsSlice())
	filter := &netlink.Route{
		Dst:   &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)},
		Table: unix.RT_TABLE_MAIN,
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V6, filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false
	}
	for _, r := range rs {
		if r.MTU == mtu {
			return true
		}
	}
	return false
}
