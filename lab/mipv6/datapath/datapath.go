// Package datapath is the packet side of the lab's Mobile IPv6 baseline (RFC 6275): tc (TCX)
// programs for the three roles, loaded and fed by Go. The kernel here has neither ip6 tunnels
// nor CONFIG_IPV6_MIP6, so the home agent's bidirectional tunnel (RFC 2473 IPv6-in-IPv6) and
// route optimisation (type 2 Routing header, Home Address option) are done in eBPF; signalling
// (lab/mipv6/binding) decides and writes the maps through this package. The product never
// imports it.
//
// Roles and what they do on the wire:
//   - Home agent (AttachHA on every HA interface, SetHomeAgent(own address), SetBinding per
//     registered MN): a packet for a registered home address is encapsulated (outer src = HA,
//     dst = CoA, next header 41, hop limit 64, traffic class copied), the inner hop limit
//     decremented, and forwarded by FIB lookup + bpf_redirect_neigh. A packet tunnelled to the
//     HA from the CoA registered for its inner source is decapsulated and forwarded the same way.
//   - Mobile node (AttachMN on its interfaces, SetHomeAgent(HA), SetBinding(HoA, CoA) while
//     away, DeleteBinding when home, SetRO per correspondent): packets from the HoA go to the HA
//     through the reverse tunnel, or with RO straight from the CoA with a Home Address option;
//     tunnelled packets from the HA and packets with a type 2 Routing header for the HoA are
//     turned back into HoA packets.
//   - Correspondent (AttachCN, SetBinding(HoA, CoA) once RO completed): packets to the HoA go to
//     the CoA with a type 2 Routing header; packets with a Home Address option from the bound
//     CoA get the HoA as source, the option removed. Without a binding they are dropped
//     (RFC 6275 s.9.3.1).
//   - A mobile node whose peer is mobile too (the double jump) is also its correspondent: the
//     MN programs do the correspondent's part with the peer's binding in the same map
//     (SetBinding(peer HoA, peer CoA)). Between two route-optimised mobile nodes a packet
//     carries the type 2 RH for the peer's home address and then the Home Address option for
//     its own (s.6.3: the option follows the routing header), CoA to CoA; on arrival the RH
//     and then the HAO come off, and a HAO also comes off a packet that came through the
//     tunnel. What the reverse tunnel carries keeps the peer's home address (the peer's home
//     agent tunnels it on), and Mobility Header packets leave as the signalling built them.
//
// Transport checksums are never touched: sockets compute them over the home address and both
// RFC 6275 headers keep the home address as the pseudo-header's address (s.6.3, s.6.4).
//
// Signalling: this kernel has no CONFIG_IPV6_MIP6, so it discards packets with option 201 or a
// type 2 Routing header itself (ICMP Parameter Problem) and a raw IPv6 socket never sees a
// Binding Update's Home Address option. SetSignallingTap hands every Mobility Header packet
// for the node to Signalling instead (after the tunnel, HAO and RH2 in place) and keeps it
// from the stack; with the tap off, MH packets with a HAO are left to the stack untouched (a
// packet socket still sees them: taps run before tc ingress), and Home Tests are never route
// optimised. Send MH with Sender (a raw socket, header included, the packet as
// mh.AppendMessage builds it): the MN's egress program tunnels a HoTI from the home address by
// itself.
//
// What the lab must set up around it:
//   - MTU: the tunnel adds 40 bytes, the type 2 RH or the HAO 24 each (both, 48, only between
//     two mobile nodes); the programs keep gso_size (FIXED_GSO), and veth would drop a grown frame
//     silently. So whatever would not fit the egress device (a GSO packet judged by its
//     segments) is answered with an ICMPv6 Packet Too Big announcing the room left, as a
//     tunnel device would (RFC 2473 s.7.1): the HA sends it to the CN, the MN's and CN's
//     programs hand it back up their own stack; path MTU discovery then adapts (counters
//     ha_too_big, mn_too_big, cn_too_big). That costs the first oversized packet and one round
//     trip, like UMIP's ip6tnl device would. To avoid even that, give the CN's and the MN's
//     routes towards each other "mtu 1460 advmss 1400" (the ILNP hosts use mtu 1492). The HA's
//     Packet Too Big may carry an unfinished (CHECKSUM_PARTIAL) quote from a CN with TX
//     checksum offload; a link that finishes checksums in software would then spoil it.
//   - GSO: TSO off (ethtool -K IF tso off) on the CN's and MN's veths keeps routers from
//     forwarding super-packets that carry extension headers (the kernel bug in
//     /work/shared/notes/platform.md); the tunnel itself copes with GSO either way.
//   - The MN keeps its HoA as a /128 on lo (plus the /64 on the home interface while at home),
//     so sockets bound to it survive the home link going down. Away, its default route via the
//     foreign router carries "src HoA": this kernel lacks the MIPv6 source address rule (RFC
//     6724 rule 4) and new sockets would otherwise take the CoA. SetEgress names the CoA's
//     interface and router when the route to the CN could pick another interface.
//   - The HA's home-link interface answers Neighbor Solicitations for away HoAs: ProxyND
//     (proxy_ndp sysctl + a proxy neighbour entry). Packets arriving from elsewhere are
//     caught on ingress before any neighbour lookup. The HA needs IPv6 forwarding on (the FIB
//     lookup helper refuses otherwise).
package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"ilnp/internal/bpfmaps"
	"ilnp/internal/bpfring"
	"ilnp/internal/tcx"
)

// ErrNotFound is returned (wrapped) when a binding, correspondent or interface is not there.
var ErrNotFound = errors.New("not found")

// Role is what a node is in RFC 6275 terms.
type Role int

// Roles.
const (
	RoleHomeAgent Role = iota + 1
	RoleMobileNode
	RoleCorrespondent
)

func (r Role) String() string {
	switch r {
	case RoleHomeAgent:
		return "home-agent"
	case RoleMobileNode:
		return "mobile-node"
	case RoleCorrespondent:
		return "correspondent"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// Options configure Load.
type Options struct {
	// PinDir is a directory on a bpffs where the maps are pinned by name (created if
	// missing); maps already pinned there are reused. Empty: no pinning.
	PinDir string
	// KeepPinned leaves the pinned maps in PinDir on Close.
	KeepPinned bool
}

// Datapath is one node's loaded MIPv6 datapath. Its methods are safe for concurrent use.
type Datapath struct {
	opts  Options
	objs  mip6BPFObjects
	mu    sync.Mutex
	links tcx.Links
	// signalling is the running Signalling stream, if any.
	signalling bpfring.Reader
}

const (
	flagMNRedirect    = 1 << 0
	flagSignallingTap = 1 << 1
)

// Load loads the programs and maps. Nothing is attached yet.
func Load(opts Options) (*Datapath, error) {
	spec, err := loadMip6BPF()
	if err != nil {
		return nil, fmt.Errorf("mipv6 datapath: %w", err)
	}
	copts, err := bpfmaps.PinOptions(spec, opts.PinDir)
	if err != nil {
		return nil, fmt.Errorf("mipv6 datapath: %w", err)
	}
	d := &Datapath{opts: opts}
	if err := spec.LoadAndAssign(&d.objs, &copts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("mipv6 datapath: load: %+v", verr)
		}
		return nil, fmt.Errorf("mipv6 datapath: load (pinned maps in %q from an older layout?): %w", opts.PinDir, err)
	}
	return d, nil
}

// AttachHA attaches the home agent program to the interface's ingress (TCX, in the network
// namespace of the calling thread). Attach it to every interface of the HA.
func (d *Datapath) AttachHA(ifindex int) error {
	return d.attach(ifindex, RoleHomeAgent, d.objs.Mip6HaIngress, nil)
}

// AttachMN attaches the mobile node programs to the interface's ingress and egress. Attach
// them to every interface the MN may use (home and foreign).
func (d *Datapath) AttachMN(ifindex int) error {
	return d.attach(ifindex, RoleMobileNode, d.objs.Mip6MnIngress, d.objs.Mip6MnEgress)
}

// AttachCN attaches the correspondent programs to the interface's ingress and egress.
func (d *Datapath) AttachCN(ifindex int) error {
	return d.attach(ifindex, RoleCorrespondent, d.objs.Mip6CnIngress, d.objs.Mip6CnEgress)
}

// Attach attaches the programs of role r to the interface.
func (d *Datapath) Attach(r Role, ifindex int) error {
	switch r {
	case RoleHomeAgent:
		return d.AttachHA(ifindex)
	case RoleMobileNode:
		return d.AttachMN(ifindex)
	case RoleCorrespondent:
		return d.AttachCN(ifindex)
	}
	return fmt.Errorf("mipv6 datapath: attach %v", r)
}

func (d *Datapath) attach(ifindex int, r Role, ingress, egress *ebpf.Program) error {
	if err := d.links.Attach(ifindex, ingress, egress); err != nil {
		return fmt.Errorf("mipv6 datapath: %v: %w", r, err)
	}
	return nil
}

// Detach removes the programs from the interface.
func (d *Datapath) Detach(ifindex int) error {
	attached, err := d.links.Detach(ifindex)
	if !attached {
		return fmt.Errorf("mipv6 datapath: interface %d: %w", ifindex, ErrNotFound)
	}
	return err
}

// Close detaches every interface, unpins the maps (unless Options.KeepPinned) and frees
// everything.
func (d *Datapath) Close() error {
	errs := []error{d.links.Close(), d.signalling.Close()}
	if d.opts.PinDir != "" && !d.opts.KeepPinned {
		m := &d.objs.mip6BPFMaps // ptb_quote is not pinned
		errs = append(errs, bpfmaps.Unpin(d.opts.PinDir, m.Bindings, m.ConfigMap, m.Counters, m.RoPeers, m.Signalling))
	}
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}

// checkUnicast refuses what cannot be a home, care-of or home agent address (RFC 6275 s.6.3,
// s.6.4): not IPv6, IPv4-mapped, unspecified, loopback, multicast, link-local.
func checkUnicast(what string, a netip.Addr) error {
	if !a.Is6() || a.Is4In6() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.Zone() != "" {
		return fmt.Errorf("mipv6 datapath: %s %v is not a global IPv6 unicast address", what, a)
	}
	return nil
}

func key(a netip.Addr) mip6BPFMip6Addr { return mip6BPFMip6Addr{B: a.As16()} }

func (d *Datapath) config() (mip6BPFMip6Config, error) {
	var cfg mip6BPFMip6Config
	if err := d.objs.ConfigMap.Lookup(uint32(0), &cfg); err != nil {
		return cfg, fmt.Errorf("mipv6 datapath: read config: %w", err)
	}
	return cfg, nil
}

func (d *Datapath) updateConfig(what string, change func(*mip6BPFMip6Config)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg, err := d.config()
	if err != nil {
		return err
	}
	change(&cfg)
	if err := d.objs.ConfigMap.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("mipv6 datapath: set %s: %w", what, err)
	}
	return nil
}

// SetHomeAgent sets the home agent address: on the HA its own address (the tunnel's outer
// source and the reverse tunnel's destination), on the MN the HA's (the reverse tunnel's
// destination and the only accepted source of tunnelled packets).
func (d *Datapath) SetHomeAgent(ha netip.Addr) error {
	if err := checkUnicast("home agent", ha); err != nil {
		return err
	}
	return d.updateConfig("home agent", func(c *mip6BPFMip6Config) { c.HomeAgent = ha.As16() })
}

// HomeAgent returns the configured home agent address (invalid when unset).
func (d *Datapath) HomeAgent() (netip.Addr, error) {
	cfg, err := d.config()
	if err != nil {
		return netip.Addr{}, err
	}
	a := netip.AddrFrom16(cfg.HomeAgent)
	if a.IsUnspecified() {
		return netip.Addr{}, nil
	}
	return a, nil
}

// SetEgress makes the MN send what it tunnels or route-optimises out of ifindex via nexthop
// (a router's link-local address; invalid: the helper's own FIB lookup) with
// bpf_redirect_neigh. ifindex 0 goes back to leaving by the interface the route chose.
func (d *Datapath) SetEgress(ifindex int, nexthop netip.Addr) error {
	if ifindex < 0 {
		return fmt.Errorf("mipv6 datapath: egress interface %d", ifindex)
	}
	var nh [16]byte
	if nexthop.IsValid() {
		if !nexthop.Is6() || nexthop.Is4In6() {
			return fmt.Errorf("mipv6 datapath: next hop %v is not IPv6", nexthop)
		}
		nh = nexthop.WithZone("").As16()
	}
	return d.updateConfig("egress", func(c *mip6BPFMip6Config) {
		c.EgressIfindex = uint32(ifindex)
		c.Nexthop = nh
		c.Flags &^= flagMNRedirect
		if ifindex != 0 {
			c.Flags |= flagMNRedirect
		}
	})
}

// Binding is one entry of the bindings map.
type Binding struct {
	HomeAddress netip.Addr
	CareOf      netip.Addr
	// Packets is how many packets the datapath tunnelled or route-optimised with it.
	Packets uint64
}

// SetBinding binds hoa to coa: on the HA an entry of the binding cache (tunnel hoa's packets
// to coa), on the CN a route-optimisation binding, on the MN its own binding while away from
// home. Replacing a binding keeps its packet count.
func (d *Datapath) SetBinding(hoa, coa netip.Addr) error {
	if err := checkUnicast("home address", hoa); err != nil {
		return err
	}
	if err := checkUnicast("care-of address", coa); err != nil {
		return err
	}
	if hoa == coa {
		return fmt.Errorf("mipv6 datapath: care-of address %v equals the home address", coa)
	}
	var v mip6BPFMip6Binding
	if err := d.objs.Bindings.Lookup(key(hoa), &v); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("mipv6 datapath: binding for %v: %w", hoa, err)
	}
	v.Coa = coa.As16()
	if err := d.objs.Bindings.Put(key(hoa), v); err != nil {
		return fmt.Errorf("mipv6 datapath: set binding %v -> %v: %w", hoa, coa, err)
	}
	return nil
}

// DeleteBinding removes hoa's binding (HA: deregistration; MN: back home; CN: RO ended).
func (d *Datapath) DeleteBinding(hoa netip.Addr) error {
	return wrapDelete(d.objs.Bindings.Delete(key(hoa)), "binding for %v", hoa)
}

// Bindings lists the bindings map.
func (d *Datapath) Bindings() ([]Binding, error) {
	var (
		k   mip6BPFMip6Addr
		v   mip6BPFMip6Binding
		out []Binding
	)
	it := d.objs.Bindings.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Binding{HomeAddress: netip.AddrFrom16(k.B), CareOf: netip.AddrFrom16(v.Coa), Packets: v.Packets})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("mipv6 datapath: list bindings: %w", err)
	}
	return out, nil
}

// SetRO turns route optimisation with correspondent cn on or off on the MN: on, packets from
// the home address to cn leave from the care-of address with a Home Address option instead
// of through the reverse tunnel (only while a binding for the home address exists).
func (d *Datapath) SetRO(cn netip.Addr, on bool) error {
	if err := checkUnicast("correspondent", cn); err != nil {
		return err
	}
	if !on {
		err := d.objs.RoPeers.Delete(key(cn))
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return wrapDelete(err, "route optimisation with %v", cn)
	}
	if err := d.objs.RoPeers.Put(key(cn), uint32(1)); err != nil {
		return fmt.Errorf("mipv6 datapath: route optimisation with %v: %w", cn, err)
	}
	return nil
}

// ROPeers lists the correspondents with route optimisation on.
func (d *Datapath) ROPeers() ([]netip.Addr, error) {
	var (
		k   mip6BPFMip6Addr
		v   uint32
		out []netip.Addr
	)
	it := d.objs.RoPeers.Iterate()
	for it.Next(&k, &v) {
		out = append(out, netip.AddrFrom16(k.B))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("mipv6 datapath: list correspondents: %w", err)
	}
	return out, nil
}

// counterNames are the counters in the order of enum mip6_counter (bpf/lib/maps.h).
var counterNames = []string{
	"packets",
	"non_ipv6",
	"malformed",
	"ha_encapsulated",
	"ha_decapsulated",
	"ha_reverse_unknown",
	"ha_hop_limit",
	"ha_too_big",
	"ha_no_route",
	"mn_tunnelled",
	"mn_detunnelled",
	"mn_hao_inserted",
	"mn_rh2_stripped",
	"mn_rh2_unknown",
	"mn_tunnel_unknown",
	"mn_no_home_agent",
	"cn_rh2_inserted",
	"cn_hao_swapped",
	"cn_hao_no_binding",
	"cn_hao_signalling",
	"unsupported",
	"errors",
	"signalling",
	"signalling_lost",
	"mn_too_big",
	"cn_too_big",
	"ptb_failed",
}

// CounterNames lists the counter names Counters returns.
func CounterNames() []string { return append([]string(nil), counterNames...) }

// Counters returns every counter summed over the CPUs, by name.
func (d *Datapath) Counters() (map[string]uint64, error) {
	out, err := bpfmaps.SumPerCPU(d.objs.Counters, counterNames)
	if err != nil {
		return nil, fmt.Errorf("mipv6 datapath: %w", err)
	}
	return out, nil
}

func wrapDelete(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("mipv6 datapath: %s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("mipv6 datapath: delete %s: %w", what, err)
}

// ProxyND makes the interface answer Neighbor Solicitations for hoa (on) or stop (off): the
// home agent defending an away mobile node's home address on the home link (RFC 6275
// s.10.4.1). It sets the interface's proxy_ndp sysctl and adds a proxy neighbour entry, in the
// network namespace of the calling thread (lock the thread, as nstest's Do does).
func ProxyND(ifindex int, hoa netip.Addr, on bool) error {
	if err := checkUnicast("home address", hoa); err != nil {
		return err
	}
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("mipv6 datapath: proxy ND on interface %d: %w", ifindex, err)
	}
	n := &netlink.Neigh{LinkIndex: ifindex, Family: netlink.FAMILY_V6, Flags: netlink.NTF_PROXY, IP: net.IP(hoa.AsSlice())}
	if !on {
		if err := netlink.NeighDel(n); err != nil {
			return fmt.Errorf("mipv6 datapath: remove proxy ND for %v on %s: %w", hoa, l.Attrs().Name, err)
		}
		return nil
	}
	sysctl := filepath.Join("/proc/sys/net/ipv6/conf", l.Attrs().Name, "proxy_ndp")
	if err := os.WriteFile(sysctl, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("mipv6 datapath: proxy ND on %s: %w", l.Attrs().Name, err)
	}
	if err := netlink.NeighSet(n); err != nil {
		return fmt.Errorf("mipv6 datapath: proxy ND for %v on %s: %w", hoa, l.Attrs().Name, err)
	}
	return nil
}
