package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"ilnp/internal/bpfmaps"
	"ilnp/internal/encap"
	"ilnp/internal/wire"
)

// EncapConfig configures ILNPv6 in UDP/IPv4 (bpf/lib/encap.h): sessions whose active remote
// locator is an IPv4 endpoint (encap.L32) are sent inside UDP/IPv4, and UDP/IPv4 to Port is
// unwrapped and checked like native ILNPv6.
type EncapConfig struct {
	// Port is the UDP port; 0 turns encapsulation off (encap.DefaultPort is the usual one).
	Port uint16
	// LocalL32 is the IPv4 locator used towards an IPv4 peer by a session whose own local
	// locator is an L64 (a dual-stack correspondent); 0: none, such packets are dropped and
	// counted (encap_egress_no_local_l32).
	LocalL32 wire.L64
	// Roam accepts a nonce-verified encapsulated packet from an IPv4 endpoint the session does
	// not list (a NAT rebinding, WireGuard-style) instead of dropping it until the daemon has
	// learned the endpoint from the unknown-locator event it still gets.
	Roam bool
	// Port6 is the UDP port of ILNPv6 in UDP/IPv6 (bpf/lib/encap6.h) on locator pairs whose
	// path drops the nonce's Destination Options header; 0 turns it off.
	Port6 uint16
}

const encapFlagRoam = 1 << 0

// encapConfigBPF is struct ilnp_encap_config (bpf/lib/maps.h).
type encapConfigBPF struct {
	Port     uint16 // network byte order
	Port6    uint16 // network byte order
	Flags    uint32
	LocalL32 uint64 // network byte order
}

// encapCounterNames are the counters in the order of enum ilnp_encap_counter (bpf/lib/maps.h).
var encapCounterNames = []string{
	"encap_egress_packets",
	"encap_egress_disabled",
	"encap_egress_no_local_l32",
	"encap_egress_too_big",
	"encap_egress_errors",
	"encap_ingress_packets",
	"encap_ingress_decapsulated",
	"encap_ingress_fragments",
	"encap_ingress_bad_outer",
	"encap_ingress_bad_checksum",
	"encap_ingress_truncated",
	"encap_ingress_not_ipv6",
	"encap_ingress_no_nonce",
	"encap_ingress_bad_inner",
	"encap_ingress_not_accepted",
	"encap_ingress_locators_as_seen",
	"encap_ingress_errors",
	"encap_ingress_roamed",
}

// EncapCounterNames lists the encapsulation counters EncapCounters returns.
func EncapCounterNames() []string { return append([]string(nil), encapCounterNames...) }

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// SetEncap writes the encapsulation configuration.
func (d *Datapath) SetEncap(c EncapConfig) error {
	if c.LocalL32 != 0 && !encap.IsL32(c.LocalL32) {
		return fmt.Errorf("datapath: encap local locator %v is not an IPv4 locator", c.LocalL32)
	}
	v := encapConfigBPF{Port: htons(c.Port), Port6: htons(c.Port6), LocalL32: be64(uint64(c.LocalL32))}
	if c.Roam {
		v.Flags |= encapFlagRoam
	}
	if err := d.objs.EncapConfig.Put(uint32(0), v); err != nil {
		return fmt.Errorf("datapath: write encap config: %w", err)
	}
	return nil
}

// Encap reads the encapsulation configuration back.
func (d *Datapath) Encap() (EncapConfig, error) {
	var v encapConfigBPF
	if err := d.objs.EncapConfig.Lookup(uint32(0), &v); err != nil {
		return EncapConfig{}, fmt.Errorf("datapath: read encap config: %w", err)
	}
	return EncapConfig{Port: htons(v.Port), Port6: htons(v.Port6), LocalL32: wire.L64(be64(v.LocalL32)), Roam: v.Flags&encapFlagRoam != 0}, nil
}

// PutLocalIPv4Locator adds or replaces one of this host's IPv4 locators: ep is the address and
// the encapsulation port it receives on, nextHop the IPv4 router towards the peers (the zero
// Addr: the kernel's FIB decides).
func (d *Datapath) PutLocalIPv4Locator(ep netip.AddrPort, state LocatorState, ifindex int, nextHop netip.Addr) (wire.L64, error) {
	l, err := encap.L32(ep)
	if err != nil {
		return 0, fmt.Errorf("datapath: %w", err)
	}
	if !state.valid() {
		return 0, fmt.Errorf("datapath: local locator %v state %v: invalid", ep, state)
	}
	if nextHop.IsValid() && !nextHop.Is4() {
		return 0, fmt.Errorf("datapath: local locator %v: next hop %v is not IPv4", ep, nextHop)
	}
	v := ilnpBPFIlnpLocalLocator{State: uint32(state), Ifindex: uint32(ifindex)}
	if nextHop.IsValid() {
		a := nextHop.As4()
		copy(v.Nexthop[:4], a[:])
	}
	if err := d.objs.LocalLocators.Put(be64(uint64(l)), v); err != nil {
		return 0, fmt.Errorf("datapath: put local locator %v: %w", ep, err)
	}
	return l, nil
}

// EncapCounters returns the encapsulation counters summed over the CPUs, by name.
func (d *Datapath) EncapCounters() (map[string]uint64, error) {
	out, err := bpfmaps.SumPerCPU(d.objs.EncapCounters, encapCounterNames)
	if err != nil {
		return nil, fmt.Errorf("datapath: %w", err)
	}
	return out, nil
}
