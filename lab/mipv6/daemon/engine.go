// Package daemon is the lab's Mobile IPv6 baseline daemon (RFC 6275) for one role: home agent
// (HA), mobile node (MN) or route-optimisation-capable correspondent (CN). It feeds the
// signalling machines of lab/mipv6/binding with what the eBPF datapath's signalling tap
// catches, with movement detection (lab/mipv6/movement) and with their timers; it carries out
// their actions: Mobility Header packets out of a raw IPv6 socket, bindings, proxy ND and
// route optimisation into the datapath (lab/mipv6/datapath), events into the timeline
// (internal/timeline, the format ilnpd writes).
//
// The Engine is the glue without I/O (tests drive it with a fake clock, a fake datapath and
// an in-memory network); Run wires it to the real datapath, socket and netlink.
package daemon

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/binding"
	"ilnp/lab/mipv6/datapath"
	"ilnp/lab/mipv6/mh"
	"ilnp/lab/mipv6/movement"
)

// Timeline kinds this daemon writes besides the binding machines' bu_sent, back_received and
// rr_message (readers ignore kinds they do not know).
const (
	// KindMovement: the MN's movement detection changed its mind (Detail: the reason,
	// Locator: the care-of or home address, Iface: the link).
	KindMovement timeline.Kind = "mip6_movement"
	// KindBUReceived: a HA or CN got a Binding Update (stamped with the datapath's arrival time).
	KindBUReceived timeline.Kind = "bu_received"
	// KindBAckSent: a HA or CN sent a Binding Acknowledgement.
	KindBAckSent timeline.Kind = "back_sent"
	// KindDADSolicit: the HA sent DAD's Neighbor Solicitation for a home address (Peer).
	KindDADSolicit timeline.Kind = "dad_ns_sent"
	// KindNeighborAdvert: the HA got a Neighbor Advertisement on the home link (Peer: its
	// target; stamped with the socket's kernel arrival time).
	KindNeighborAdvert timeline.Kind = "na_received"
	// KindBinding: a binding went into (Detail "bind") or out of (Detail "unbind") the
	// datapath: the HA's tunnel, the CN's type 2 RH path, the MN's route optimisation.
	KindBinding timeline.Kind = "mip6_binding"
)

// Config is one daemon's role and addresses.
type Config struct {
	Role datapath.Role
	// Node names the node in the timeline.
	Node string
	// Interfaces get the role's programs (HA: all of its interfaces; MN: home and foreign;
	// CN: its own).
	Interfaces []string
	// Addr is the HA's own address on the home link, or the CN's address.
	Addr netip.Addr
	// HomePrefix is the home link's /64 (HA, MN).
	HomePrefix netip.Prefix
	// HomeLink is the HA's interface on the home link (proxy ND for away home addresses).
	HomeLink string
	// ProcessingDelay: HA: T_HA added to BU processing, on top of DAD (0: none). CN: T_CN
	// added to every answer.
	ProcessingDelay time.Duration
	// DADTimeout (HA): how long DAD of a new binding's home address waits for a defence (0:
	// UMIP's 1 s, binding.DefaultDADTimeout).
	DADTimeout time.Duration
	// HomeAddress and HomeAgent (MN).
	HomeAddress netip.Addr
	HomeAgent   netip.Addr
	// Correspondents the MN route-optimises with once its home registration is done (empty:
	// no route optimisation).
	Correspondents []netip.Addr
	// Correspondent (MN): the mobile node also answers return routability and Binding Updates
	// at its home address as a correspondent (RFC 6275 s.9), for a peer that is mobile too
	// (the double jump). Its bindings go into the same datapath.
	Correspondent bool
	// FreshHomeTest (MN): a home test at every move away (binding.ROConfig.FreshHomeTest).
	FreshHomeTest bool
	// Lifetime the MN asks for (0: the machines' defaults).
	Lifetime time.Duration
	// Events is the timeline file.
	Events string
}

// Validate checks what the role needs.
func (c Config) Validate() error {
	if len(c.Interfaces) == 0 {
		return errors.New("no interfaces")
	}
	switch c.Role {
	case datapath.RoleHomeAgent:
		if !c.Addr.Is6() || !c.HomePrefix.IsValid() || !c.HomePrefix.Contains(c.Addr) {
			return fmt.Errorf("home agent: address %v must lie in the home prefix %v", c.Addr, c.HomePrefix)
		}
		if c.HomeLink == "" {
			return errors.New("home agent: no home link interface")
		}
	case datapath.RoleMobileNode:
		if !c.HomePrefix.IsValid() || c.HomePrefix.Bits() != 64 || !c.HomePrefix.Contains(c.HomeAddress) {
			return fmt.Errorf("mobile node: home address %v must lie in the home /64 %v", c.HomeAddress, c.HomePrefix)
		}
		if !c.HomeAgent.Is6() {
			return errors.New("mobile node: no home agent address")
		}
	case datapath.RoleCorrespondent:
		if !c.Addr.Is6() {
			return errors.New("correspondent: no address")
		}
	default:
		return fmt.Errorf("unknown role %v", c.Role)
	}
	if c.Correspondent && c.Role != datapath.RoleMobileNode {
		return fmt.Errorf("%v: only a mobile node answers as a correspondent beside its role", c.Role)
	}
	if c.ProcessingDelay < 0 || c.DADTimeout < 0 {
		return fmt.Errorf("negative processing delay %v or DAD timeout %v", c.ProcessingDelay, c.DADTimeout)
	}
	return nil
}

// Plane is what the engine changes in the datapath.
type Plane interface {
	SetBinding(hoa, coa netip.Addr) error
	DeleteBinding(hoa netip.Addr) error
	// SetRO turns route optimisation with a correspondent on or off (MN).
	SetRO(cn netip.Addr, on bool) error
	// ProxyND defends hoa on the home link (HA).
	ProxyND(hoa netip.Addr, on bool) error
	// SolicitDAD sends the Neighbor Solicitation of DAD for hoa on the home link (HA):
	// from ::, to hoa's solicited-node group; answers come back through NeighborAdvert.
	SolicitDAD(hoa netip.Addr) error
	// SetEgress makes the MN's tunnelled and route-optimised packets leave by link's router;
	// "" lets routing decide.
	SetEgress(link string) error
}

// machine is what every binding machine offers.
type machine interface {
	Event(ev binding.Event, now time.Time) []binding.Action
}

// slot is one machine and its timer.
type slot struct {
	name string
	m    machine
	due  time.Time
	peer netip.Addr // RO: the correspondent
	ro   bool
}

// Stats counts what the engine did.
type Stats struct {
	Signals, Malformed, Sent, SendErrors, PlaneErrors int
}

// Engine drives one role's machines. It is not safe for concurrent use: one loop owns it.
type Engine struct {
	cfg   Config
	plane Plane
	send  func(pkt []byte, dst netip.Addr) error
	emit  func(timeline.Event)
	log   *slog.Logger
	slots []*slot
	mn    *slot
	// cn: the correspondent machine (role cn, or a mobile node with Config.Correspondent).
	cn    *slot
	det   *movement.Detector
	loc   movement.Decision
	away  bool
	stats Stats
	// lastSend is when the last packet went to the socket (CLOCK_MONOTONIC ns).
	lastSend int64
	// now reads CLOCK_MONOTONIC (tests: the fake clock).
	now func() int64
	// later runs once the current input's packets are sent.
	later []func()
}

func (e *Engine) runLater() {
	for len(e.later) > 0 {
		f := e.later[0]
		e.later = e.later[1:]
		f()
	}
}

// NewEngine builds the machines of cfg.Role. send transmits a whole IPv6 packet towards dst;
// emit writes a timeline event (stamping it when MonoNS is 0); rand feeds cookies, Kcn and
// nonces.
func NewEngine(cfg Config, plane Plane, send func([]byte, netip.Addr) error, emit func(timeline.Event), rand io.Reader, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mip6d: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{cfg: cfg, plane: plane, send: send, emit: emit, log: log, now: timeline.Now}
	switch cfg.Role {
	case datapath.RoleHomeAgent:
		ha, err := binding.NewHomeAgent(binding.HAConfig{Addr: cfg.Addr, HomePrefix: cfg.HomePrefix,
			ProcessingDelay: cfg.ProcessingDelay, DADTimeout: cfg.DADTimeout, Node: cfg.Node})
		if err != nil {
			return nil, err
		}
		e.slots = append(e.slots, &slot{name: "home-agent", m: ha})
	case datapath.RoleCorrespondent:
		cn, err := binding.NewCorrespondent(binding.CNConfig{Addr: cfg.Addr, Rand: rand, ProcessingDelay: cfg.ProcessingDelay, Node: cfg.Node})
		if err != nil {
			return nil, err
		}
		e.cn = &slot{name: "correspondent", m: cn}
		e.slots = append(e.slots, e.cn)
	case datapath.RoleMobileNode:
		mn, err := binding.NewMobileNode(binding.MNConfig{HomeAddress: cfg.HomeAddress, HomeAgent: cfg.HomeAgent,
			Lifetime: cfg.Lifetime, Node: cfg.Node})
		if err != nil {
			return nil, err
		}
		e.mn = &slot{name: "home-registration", m: mn}
		e.slots = append(e.slots, e.mn)
		for _, cn := range cfg.Correspondents {
			ro, err := binding.NewRouteOptimizer(binding.ROConfig{HomeAddress: cfg.HomeAddress, Correspondent: cn,
				Rand: rand, Node: cfg.Node, FreshHomeTest: cfg.FreshHomeTest})
			if err != nil {
				return nil, err
			}
			e.slots = append(e.slots, &slot{name: "route-optimisation " + cn.String(), m: ro, peer: cn, ro: true})
		}
		if cfg.Correspondent {
			// Answers at the home address: HoTs go back through the reverse tunnel, CoTs and
			// BAcks too while away (the datapath tunnels what leaves from the home address).
			cn, err := binding.NewCorrespondent(binding.CNConfig{Addr: cfg.HomeAddress, Rand: rand, Node: cfg.Node})
			if err != nil {
				return nil, err
			}
			e.cn = &slot{name: "correspondent", m: cn}
			e.slots = append(e.slots, e.cn)
		}
		var iid uint64
		a := cfg.HomeAddress.As16()
		for _, b := range a[8:] {
			iid = iid<<8 | uint64(b)
		}
		det, err := movement.NewDetector(movement.Config{HomePrefix: cfg.HomePrefix, InterfaceID: iid})
		if err != nil {
			return nil, err
		}
		e.det = det
	}
	return e, nil
}

// Stats returns the counters.
func (e *Engine) Stats() Stats { return e.stats }

// Location is the MN's current movement decision.
func (e *Engine) Location() movement.Decision { return e.loc }

// Next is when Tick must be called next (zero: no timer).
func (e *Engine) Next() time.Time {
	var next time.Time
	for _, s := range e.slots {
		if !s.due.IsZero() && (next.IsZero() || s.due.Before(next)) {
			next = s.due
		}
	}
	return next
}

// Tick runs the machines whose timers are due.
func (e *Engine) Tick(now time.Time) {
	for _, s := range e.slots {
		if s.due.IsZero() || now.Before(s.due) {
			continue
		}
		due := s.due
		e.apply(s, s.m.Event(binding.Tick{}, now), 0, now)
		if s.due.Equal(due) {
			s.due = time.Time{} // fired and not re-armed
		}
	}
	e.runLater()
}

// Signal hands the engine one Mobility Header packet the datapath's tap caught (arrivalNs: its
// CLOCK_MONOTONIC arrival, 0 when unknown).
func (e *Engine) Signal(pkt []byte, arrivalNs int64, now time.Time) {
	e.stats.Signals++
	r, err := binding.Parse(pkt)
	if err != nil {
		e.stats.Malformed++
		e.log.Warn("mobility header dropped", "err", err)
		if a, ok := binding.BindingErrorFor(pkt, e.self()); ok {
			e.transmit(a)
		}
		return
	}
	if bu, ok := r.Msg.(*mh.BindingUpdate); ok && (e.cfg.Role == datapath.RoleHomeAgent || e.cn != nil) {
		e.emit(timeline.Event{MonoNS: arrivalNs, Kind: KindBUReceived, Node: e.cfg.Node, Peer: r.Packet.PseudoSrc().String(),
			Locator: r.Packet.Src.String(), Seq: uint32(bu.Seq), Detail: fmt.Sprintf("home=%v lifetime=%ds", bu.Home,
				int(mh.LifetimeDuration(bu.Lifetime).Seconds()))})
	}
	begin := timeline.Now()
	for _, s := range e.slots {
		e.apply(s, s.m.Event(r, now), arrivalNs, now)
	}
	attrs := []any{"type", r.Msg.Type(), "src", r.Packet.Src, "dst", r.Packet.Dst,
		"handling", time.Duration(timeline.Now() - begin)}
	if arrivalNs != 0 {
		attrs = append(attrs, "queued", time.Duration(begin-arrivalNs))
	}
	e.log.Info("signal", attrs...)
	e.runLater()
}

// NeighborAdvert hands the HA a Neighbor Advertisement for target that arrived on the home
// link (arrivalNs: its kernel arrival, 0 when unknown): during DAD for that home address it
// is a defence, and the BU is refused (status 134).
func (e *Engine) NeighborAdvert(target netip.Addr, arrivalNs int64, now time.Time) {
	if e.cfg.Role != datapath.RoleHomeAgent {
		return
	}
	e.emit(timeline.Event{MonoNS: arrivalNs, Kind: KindNeighborAdvert, Node: e.cfg.Node, Peer: target.String()})
	for _, s := range e.slots {
		e.apply(s, s.m.Event(binding.Defended{Addr: target}, now), arrivalNs, now)
	}
	e.runLater()
}

// Movement feeds the MN's movement detection; a new decision moves the registration.
func (e *Engine) Movement(ev movement.Event, now time.Time) {
	if e.det == nil {
		return
	}
	dec, changed := e.det.Event(ev, now)
	if !changed {
		return
	}
	e.loc = dec
	e.log.Info("movement", "location", dec.Location, "link", dec.Link, "address", dec.Address, "reason", dec.Reason)
	e.emit(timeline.Event{Kind: KindMovement, Node: e.cfg.Node, Iface: dec.Link, Locator: dec.Address.String(),
		Detail: dec.Location.String() + ": " + dec.Reason})
	hoa := e.cfg.HomeAddress
	switch dec.Location {
	case movement.Away:
		e.away = true
		// The binding goes in before the BU leaves: the HA tunnels as soon as it accepts, and
		// the MN must take those packets (and HoTs) off the tunnel. Packets from the home
		// address go into the reverse tunnel from now on, dropped by the HA until it binds.
		e.planeDo("set own binding", e.plane.SetBinding(hoa, dec.Address))
		e.planeDo("egress", e.plane.SetEgress(dec.Link))
		for _, s := range e.slots {
			if s.ro {
				// Route optimisation restarts after the new home registration (Done).
				e.planeDo("route optimisation off", e.plane.SetRO(s.peer, false))
			}
		}
		e.apply(e.mn, e.mn.m.Event(binding.Moved{CareOf: dec.Address}, now), 0, now)
	case movement.AtHome:
		if !e.away {
			return
		}
		e.away = false
		e.planeDo("delete own binding", ignoreNotFound(e.plane.DeleteBinding(hoa)))
		e.planeDo("egress", e.plane.SetEgress(""))
		for _, s := range e.slots {
			if s.ro {
				e.planeDo("route optimisation off", e.plane.SetRO(s.peer, false))
			}
			e.apply(s, s.m.Event(binding.ReturnedHome{}, now), 0, now)
		}
	}
}

func (e *Engine) self() netip.Addr {
	switch {
	case e.cfg.Role != datapath.RoleMobileNode:
		return e.cfg.Addr
	case e.away && e.loc.Address.IsValid():
		return e.loc.Address
	}
	return e.cfg.HomeAddress
}

// apply carries out one machine's actions in order.
func (e *Engine) apply(s *slot, acts []binding.Action, arrivalNs int64, now time.Time) {
	for _, a := range acts {
		switch a.Kind {
		case binding.Send:
			e.transmit(a)
		case binding.Timer:
			s.due = a.At
		case binding.Record:
			ev := a.Event
			switch {
			case ev.MonoNS != 0:
			case arrivalNs != 0 && receivedRecord(ev):
				ev.MonoNS = arrivalNs
			case e.lastSend != 0 && sentRecord(ev):
				ev.MonoNS = e.lastSend
			}
			e.emit(ev)
		case binding.Probe:
			e.lastSend = e.now()
			if err := e.plane.SolicitDAD(a.Binding.HomeAddress); err != nil {
				// Unsent, DAD simply finds no defender: the binding still waits its timeout.
				e.planeDo("DAD solicitation", err)
			} else {
				e.emit(timeline.Event{MonoNS: e.lastSend, Kind: KindDADSolicit, Node: e.cfg.Node, Peer: a.Binding.HomeAddress.String(),
					Locator: a.Binding.CareOf.String(), Seq: uint32(a.Binding.Seq)})
			}
		case binding.Bind:
			e.bind(a.Binding)
		case binding.Unbind:
			e.unbind(a.Binding)
		case binding.Done:
			e.done(s, a.Result, now)
		}
	}
}

// sentRecord says whether a machine's record is about the packet just sent (the Send action
// comes first): it takes the time the packet went to the socket.
func sentRecord(ev timeline.Event) bool {
	switch ev.Kind {
	case timeline.BUSent:
		return true
	case timeline.RRMessage:
		return strings.HasSuffix(ev.Detail, " sent")
	}
	return false
}

// receivedRecord says whether a machine's record is about a packet that arrived: those take
// the datapath's arrival stamp, so that a handoff delay is measured packet to packet and not
// to when this process got round to it.
func receivedRecord(ev timeline.Event) bool {
	switch ev.Kind {
	case timeline.BAckReceived:
		return true
	case timeline.RRMessage:
		return strings.HasSuffix(ev.Detail, " received")
	}
	return false
}

func (e *Engine) transmit(a binding.Action) {
	dst, ok := destination(a.Packet)
	if !ok {
		e.stats.SendErrors++
		e.log.Error("unsendable packet", "len", len(a.Packet))
		return
	}
	e.lastSend = e.now()
	if err := e.send(a.Packet, dst); err != nil {
		e.stats.SendErrors++
		e.log.Warn("send mobility header", "dst", dst, "type", msgType(a.Msg), "err", err)
		return
	}
	e.stats.Sent++
	if back, ok := a.Msg.(*mh.BindingAck); ok {
		e.emit(timeline.Event{Kind: KindBAckSent, Node: e.cfg.Node, Peer: a.Env.PseudoDst().String(), Locator: dst.String(),
			Seq: uint32(back.Seq), Detail: back.Status.String()})
	}
}

func msgType(m mh.Message) string {
	if m == nil {
		return "?"
	}
	return m.Type().String()
}

// destination is the IPv6 destination of a whole packet (the care-of address when a type 2
// RH follows: the RH's home address is the final one).
func destination(pkt []byte) (netip.Addr, bool) {
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16([16]byte(pkt[24:40])), true
}

func (e *Engine) bind(b binding.Entry) {
	begin := e.now()
	e.planeDo("set binding", e.plane.SetBinding(b.HomeAddress, b.CareOf))
	e.log.Info("binding", "home", b.HomeAddress, "care_of", b.CareOf, "took", time.Duration(e.now()-begin))
	if e.cfg.Role == datapath.RoleHomeAgent && b.New {
		// Proxy ND (sysctl + netlink, up to milliseconds) waits until the BAck is out: the
		// tunnel, in place already, is what the MN's traffic needs; proxy ND only serves
		// nodes on the home link.
		hoa := b.HomeAddress
		e.later = append(e.later, func() { e.planeDo("proxy ND", e.plane.ProxyND(hoa, true)) })
	}
	e.emit(timeline.Event{Kind: KindBinding, Node: e.cfg.Node, Peer: b.HomeAddress.String(), Locator: b.CareOf.String(),
		Seq: uint32(b.Seq), Detail: "bind"})
}

func (e *Engine) unbind(b binding.Entry) {
	e.planeDo("delete binding", ignoreNotFound(e.plane.DeleteBinding(b.HomeAddress)))
	if e.cfg.Role == datapath.RoleHomeAgent {
		e.planeDo("proxy ND off", e.plane.ProxyND(b.HomeAddress, false))
	}
	e.emit(timeline.Event{Kind: KindBinding, Node: e.cfg.Node, Peer: b.HomeAddress.String(), Locator: b.CareOf.String(),
		Seq: uint32(b.Seq), Detail: "unbind"})
}

// done: a registration finished. After the home registration, route optimisation starts
// (as UMIP does); once a correspondent acknowledged, packets to it are route-optimised.
func (e *Engine) done(s *slot, r binding.Result, now time.Time) {
	lg := e.log.With("procedure", s.name, "care_of", r.CareOf, "status", r.Status, "attempts", r.Attempts,
		"elapsed", r.Elapsed, "total", r.Total, "deregistered", r.Deregistered)
	if r.Err != nil {
		lg.Warn("registration failed", "err", r.Err)
	} else {
		lg.Info("registration done")
	}
	ok := r.Err == nil && !r.Deregistered
	if s.ro {
		e.planeDo("route optimisation", e.plane.SetRO(s.peer, ok))
		if ok {
			e.emit(timeline.Event{Kind: KindBinding, Node: e.cfg.Node, Peer: s.peer.String(), Locator: r.CareOf.String(),
				Detail: "route optimisation on"})
		}
		return
	}
	if s != e.mn || !ok || !e.away || r.CareOf != e.loc.Address {
		return
	}
	for _, o := range e.slots {
		if o.ro {
			e.apply(o, o.m.Event(binding.Moved{CareOf: r.CareOf}, now), 0, now)
		}
	}
}

func (e *Engine) planeDo(what string, err error) {
	if err != nil {
		e.stats.PlaneErrors++
		e.log.Error("datapath", "what", what, "err", err)
	}
}

func ignoreNotFound(err error) error {
	if errors.Is(err, datapath.ErrNotFound) {
		return nil
	}
	return err
}
