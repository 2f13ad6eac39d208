package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/datapath"
	"ilnp/lab/mipv6/mh"
	"ilnp/lab/mipv6/movement"
)

// ReadyLine is what Run logs once the datapath is attached and signalling is read.
const ReadyLine = "mip6d ready"

// Run is the daemon: it loads and attaches the role's datapath in the calling process's
// network namespace, reads the signalling tap, sends through a raw socket, follows links and
// addresses (MN) and runs until ctx ends; then it detaches everything.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("mip6d: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events *timeline.Writer
	if cfg.Events != "" {
		f, err := os.OpenFile(cfg.Events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("mip6d: events: %w", err)
		}
		defer f.Close()
		events = timeline.NewWriter(f)
	} else {
		events = timeline.NewWriter(nil)
	}

	ifindex := map[string]int{}
	for _, name := range cfg.Interfaces {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("mip6d: interface %s: %w", name, err)
		}
		ifindex[name] = ifi.Index
	}
	dp, err := datapath.Load(datapath.Options{})
	if err != nil {
		return fmt.Errorf("mip6d: %w", err)
	}
	defer func() { err = errors.Join(err, dp.Close()) }()
	for _, name := range cfg.Interfaces {
		if err := dp.Attach(cfg.Role, ifindex[name]); err != nil {
			return fmt.Errorf("mip6d: %w", err)
		}
	}
	switch cfg.Role {
	case datapath.RoleHomeAgent:
		err = dp.SetHomeAgent(cfg.Addr)
	case datapath.RoleMobileNode:
		err = dp.SetHomeAgent(cfg.HomeAgent)
	}
	if err != nil {
		return fmt.Errorf("mip6d: %w", err)
	}
	if err := dp.SetSignallingTap(true); err != nil {
		return fmt.Errorf("mip6d: %w", err)
	}
	signals, err := dp.Signalling(ctx)
	if err != nil {
		return fmt.Errorf("mip6d: %w", err)
	}
	// Whole packets (HAO, RH2 built by lab/mipv6/mh) out of a raw socket, header included.
	sock, err := datapath.NewSender()
	if err != nil {
		return fmt.Errorf("mip6d: %w", err)
	}
	defer sock.Close()
	send := func(pkt []byte, _ netip.Addr) error { return sock.Send(pkt) }

	plane := &dpPlane{dp: dp, sock: sock, ifindex: ifindex, homeLink: ifindex[cfg.HomeLink], proxied: map[netip.Addr]bool{}, log: log}
	defer plane.unproxyAll()
	eng, err := NewEngine(cfg, plane, send, events.Emit, rand.Reader, log)
	if err != nil {
		return err
	}

	// The HA's DAD listens for Neighbor Advertisements on the home link.
	var adverts chan advert
	if cfg.Role == datapath.RoleHomeAgent {
		nd, err := openNDSocket(cfg.HomeLink)
		if err != nil {
			return fmt.Errorf("mip6d: %w", err)
		}
		defer nd.Close()
		adverts = make(chan advert, 16)
		go nd.read(ctx, adverts, log)
	}

	var links chan netlink.LinkUpdate
	var addrs chan netlink.AddrUpdate
	if cfg.Role == datapath.RoleMobileNode {
		links, addrs = make(chan netlink.LinkUpdate, 64), make(chan netlink.AddrUpdate, 64)
		onErr := func(err error) {
			if ctx.Err() == nil {
				log.Error("netlink subscription", "err", err)
			}
		}
		if err := netlink.LinkSubscribeWithOptions(links, ctx.Done(), netlink.LinkSubscribeOptions{ListExisting: true, ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("mip6d: link updates: %w", err)
		}
		if err := netlink.AddrSubscribeWithOptions(addrs, ctx.Done(), netlink.AddrSubscribeOptions{ListExisting: true, ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("mip6d: address updates: %w", err)
		}
	}
	names := map[int]string{}
	for n, i := range ifindex {
		names[i] = n
	}
	log.Info(ReadyLine, "role", cfg.Role, "interfaces", cfg.Interfaces, "processing_delay", cfg.ProcessingDelay, "dad_timeout", cfg.DADTimeout)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	armed := time.Time{}
	for {
		if next := eng.Next(); !next.Equal(armed) {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			armed = next
			if !next.IsZero() {
				timer.Reset(max(time.Until(next), 0))
			}
		}
		select {
		case <-ctx.Done():
			log.Info("mip6d stopping", "stats", fmt.Sprintf("%+v", eng.Stats()))
			logCounters(dp, log)
			return nil
		case s, ok := <-signals:
			if !ok {
				if ctx.Err() != nil {
					continue
				}
				return errors.New("mip6d: signalling reader ended")
			}
			eng.Signal(s.Packet, int64(s.Ns), time.Now())
		case a := <-adverts:
			eng.NeighborAdvert(a.target, a.arrivalNs, time.Now())
		case u, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			if ev, ok := linkEvent(u, names); ok {
				eng.Movement(ev, time.Now())
			}
		case u, ok := <-addrs:
			if !ok {
				addrs = nil
				continue
			}
			if ev, ok := addrEvent(u, names); ok {
				eng.Movement(ev, time.Now())
			}
		case <-timer.C:
			armed = time.Time{}
			eng.Tick(time.Now())
		}
	}
}

func logCounters(dp *datapath.Datapath, log *slog.Logger) {
	c, err := dp.Counters()
	if err != nil {
		return
	}
	var attrs []any
	for _, name := range datapath.CounterNames() {
		if c[name] != 0 {
			attrs = append(attrs, name, c[name])
		}
	}
	log.Info("datapath counters", attrs...)
}

// linkEvent: an interface of ours went up or down (administratively, or lost its carrier).
func linkEvent(u netlink.LinkUpdate, names map[int]string) (movement.Event, bool) {
	attrs := u.Attrs()
	if attrs == nil {
		return nil, false
	}
	name, ok := names[attrs.Index]
	if !ok {
		return nil, false
	}
	up := attrs.Flags&net.FlagUp != 0 && attrs.RawFlags&unix.IFF_LOWER_UP != 0
	return movement.LinkState{Link: name, Up: up}, true
}

// addressLifetime stands for "until the kernel deletes the address": the kernel forms and
// expires SLAAC addresses from the router advertisements it receives, and says so.
const addressLifetime = 24 * time.Hour

// addrEvent turns the kernel's SLAAC addresses into what movement detection needs from router
// advertisements (RFC 6275 s.11.5): a global /64 on one of our interfaces is an advertised
// on-link prefix; its deletion (expiry, or the link going down) withdraws it.
func addrEvent(u netlink.AddrUpdate, names map[int]string) (movement.Event, bool) {
	name, ok := names[u.LinkIndex]
	if !ok {
		return nil, false
	}
	a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
	if !ok {
		return nil, false
	}
	a = a.Unmap()
	ones, bits := u.LinkAddress.Mask.Size()
	if !a.Is6() || bits != 128 || ones != 64 || !a.IsGlobalUnicast() || a.IsLinkLocalUnicast() {
		return nil, false
	}
	if u.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 && u.NewAddr {
		return nil, false
	}
	life := time.Duration(0)
	if u.NewAddr {
		life = addressLifetime
	}
	p := netip.PrefixFrom(a, 64).Masked()
	return movement.Advertisement{Link: name, Prefixes: []movement.PrefixInfo{{Prefix: p, ValidLifetime: life}}}, true
}

// dpPlane is the Plane on the real datapath.
type dpPlane struct {
	dp       *datapath.Datapath
	sock     *datapath.Sender
	ifindex  map[string]int
	homeLink int
	proxied  map[netip.Addr]bool
	log      *slog.Logger
}

func (p *dpPlane) SetBinding(hoa, coa netip.Addr) error { return p.dp.SetBinding(hoa, coa) }
func (p *dpPlane) DeleteBinding(hoa netip.Addr) error   { return p.dp.DeleteBinding(hoa) }
func (p *dpPlane) SetRO(cn netip.Addr, on bool) error   { return p.dp.SetRO(cn, on) }

func (p *dpPlane) SolicitDAD(hoa netip.Addr) error {
	if p.homeLink == 0 {
		return errors.New("no home link")
	}
	pkt, err := mh.AppendDADSolicitation(nil, hoa)
	if err != nil {
		return err
	}
	return p.sock.SendOn(pkt, p.homeLink)
}
func (p *dpPlane) ProxyND(hoa netip.Addr, on bool) error {
	if p.homeLink == 0 {
		return errors.New("no home link")
	}
	if !on && !p.proxied[hoa] {
		return nil
	}
	if err := datapath.ProxyND(p.homeLink, hoa, on); err != nil {
		return err
	}
	p.proxied[hoa] = on
	return nil
}

func (p *dpPlane) unproxyAll() {
	for hoa, on := range p.proxied {
		if on {
			if err := datapath.ProxyND(p.homeLink, hoa, false); err != nil {
				p.log.Warn("proxy ND cleanup", "err", err)
			}
		}
	}
}

// SetEgress points the MN's rewritten packets at the default router of link (learnt from its
// RAs: the kernel's default route on that interface), or lets routing decide.
func (p *dpPlane) SetEgress(link string) error {
	if link == "" {
		return p.dp.SetEgress(0, netip.Addr{})
	}
	idx, ok := p.ifindex[link]
	if !ok {
		return fmt.Errorf("egress: unknown interface %s", link)
	}
	return p.dp.SetEgress(idx, defaultRouter(idx))
}

func defaultRouter(ifindex int) netip.Addr {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{LinkIndex: ifindex}, netlink.RT_FILTER_OIF)
	if err != nil {
		return netip.Addr{}
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw != nil {
			if a, ok := netip.AddrFromSlice(r.Gw); ok {
				return a.Unmap()
			}
		}
	}
	return netip.Addr{}
}
