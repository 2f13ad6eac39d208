// Package node is a running ILNPv6 node: it ties locator discovery, the ILNP Communication
// Cache, the Locator Update engine, the BPF datapath, the stub resolver and the control socket
// together. One goroutine (the loop) owns the ILCC's effects and the LU engine, so every
// event - an RA, a datapath event, an LU, a timer, a command - is applied in one order and no
// two of them interleave.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/datapath"
	"ilnp/internal/dialect"
	"ilnp/internal/encap"
	"ilnp/internal/ephemeral"
	"ilnp/internal/ilcc"
	"ilnp/internal/locators"
	"ilnp/internal/locverify"
	"ilnp/internal/lu"
	"ilnp/internal/luguard"
	"ilnp/internal/pmtu"
	"ilnp/internal/ratelog"
	"ilnp/internal/resolver"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// touchInterval is how often the loop copies the datapath's per-session traffic times into the
// ILCC, so that busy sessions never idle out.
const touchInterval = 5 * time.Second

// receivableTimeout bounds the wait for a new address's local route (host.waitReceivable):
// milliseconds normally, more on a loaded machine: the kernel inserts it from a workqueue once
// DAD is done, and a CI run beside busy kernel work waited over 100 ms, so the first LU-ACK
// went to an address not yet local and the LU was answered only on its retransmission, 1 s
// later. The wait ends as soon as the route is there.
const receivableTimeout = 500 * time.Millisecond

// Node is an ILNP node. Create it with New, then Run it.
type Node struct {
	cfg    config.Config
	log    *slog.Logger
	nid    wire.NID          // the stable NID: published, used by incoming sessions
	eph    *ephemeral.Pool   // nid-mode ephemeral: one NID per correspondent (ephemeral.go); loop-owned
	lv     *locverify.Engine // locator verification (locverify.go); nil when off; loop-owned
	chsock *challengeSocket  // its challenges; nil when off
	ifaces map[int]string    // ILNP interfaces by index

	timeline *timeline.Writer
	history  *history

	cache  *ilcc.Cache
	engine *lu.Engine // loop-owned
	dp     *datapath.Datapath
	pinDir string // where dp's pins are, as this process reaches them (mountPins)
	host   *host
	lusock *luSocket
	rdv    *rendezvousState      // DNS publisher and stub counters (rendezvous.go)
	hosts  *resolver.HostsSource // the hosts file's names, re-read on reload; nil: none
	tcpa   *tcpAware             // mobility-aware TCP (tcpaware.go); loop-owned

	// Loop-owned state.
	locals    map[wire.L64]ilcc.Local
	formed    map[netip.Addr]int // addresses the discovery formed, by interface
	lastTouch uint64
	// The periodic walk over the datapath's sessions (sweep.go).
	sessionSweep
	// eventsLost is the datapath's events_lost counter when the loop last reconciled
	// (reconcile.go).
	eventsLost uint64
	// reconcilePending: the walk under way adopts the sessions the ILCC lacks (reconcile.go).
	reconcilePending bool
	// encapLocal is the IPv4 locator the datapath encapsulates from for IPv6-active sessions
	// (xfamily.go).
	encapLocal wire.L64
	v4         *ipv4Watch // nil unless ipv4-locators on (xfamily.go)
	// dialects: what each correspondent speaks (dialect.go).
	dialects *dialect.Table
	// pmtu: session views clamped below 1280 bytes by a host route (pmtu.go); loop-owned.
	pmtu *pmtu.Table

	cmds   chan func()
	seclog *ratelog.Limiter // loop-owned (security.go)
	guard  *luguard.Guard   // loop-owned (luin.go): LU replays and the LU-ACK budget
	// heldLUs: LUs of embryos, until this host answers (luin.go); loop-owned.
	heldLUs map[wire.NID]heldLU
	drops   *ratelog.Limiter // loop-owned (security.go): datapath_drop timeline events

	pathmon atomic.Pointer[pathMonitor] // path liveness (paths.go); nil until it runs
	// luQueue is the loop's queue of received LUs (Run sets it): path polls give way to a
	// backlog there (paths.go).
	luQueue atomic.Pointer[chan receivedLU]

	mu       sync.Mutex // guards peers and counters (read by the control socket)
	peers    map[string][]wire.RankedILV
	counters map[string]uint64

	continuity // restart, crash and flush (adopt.go)
}

// New prepares a node from its configuration: identity, the ILCC and the LU engine. Nothing
// touches the system until Run.
// Events go to events as JSON lines (nil: only to ilnpctl).
func New(cfg config.Config, log *slog.Logger, events io.Writer) (*Node, error) {
	nid, err := chooseNID(cfg)
	if err != nil {
		return nil, err
	}
	mode, err := ilcc.ParseMode(string(cfg.Handoff))
	if err != nil {
		return nil, err
	}
	policy, err := ilcc.PolicyByName(cfg.Policy)
	if err != nil {
		return nil, err
	}
	cache, err := ilcc.New(ilcc.Config{
		NID:         nid,
		Mode:        mode,
		Policy:      policy,
		IdleTimeout: cfg.SessionIdleTimeout,
		NonceSize:   cfg.NonceSize,
	})
	if err != nil {
		return nil, fmt.Errorf("ILCC: %w", err)
	}
	engine, err := lu.New(lu.Config{
		InitialTimeout: cfg.LUInitialTimeout,
		MaxTimeout:     cfg.LUMaxTimeout,
		MaxAttempts:    cfg.LUMaxAttempts,
	})
	if err != nil {
		return nil, fmt.Errorf("LU engine: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		log:      log.With("node", cfg.Node, "nid", nid.String()),
		nid:      nid,
		ifaces:   map[int]string{},
		history:  newHistory(4096),
		cache:    cache,
		engine:   engine,
		locals:   map[wire.L64]ilcc.Local{},
		formed:   map[netip.Addr]int{},
		cmds:     make(chan func()),
		seclog:   newSecurityLog(),
		pmtu:     pmtu.NewTable(),
		guard:    luguard.New(0, 0),
		drops:    newDropLog(),
		peers:    map[string][]wire.RankedILV{},
		counters: map[string]uint64{},
		timeline: timeline.NewWriter(events),
	}
	if n.dialects, err = newDialects(cfg); err != nil {
		return nil, err
	}
	if cfg.NIDMode == config.NIDEphemeral {
		if n.eph, err = newEphemeralPool(nid); err != nil {
			return nil, err
		}
	}
	if lvMode, err := locverify.ParseMode(cfg.LocatorVerification); err != nil {
		return nil, fmt.Errorf("locator-verification: %w", err)
	} else if lvMode != locverify.Off {
		if n.lv, err = locverify.New(locverify.Config{Mode: lvMode}); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// NID is the node's stable identifier.
func (n *Node) NID() wire.NID { return n.nid }

// chooseNID picks the stable NID; nid-mode ephemeral draws per-correspondent NIDs beside it
// (ephemeral.go).
func chooseNID(cfg config.Config) (wire.NID, error) {
	if cfg.HasNID {
		return cfg.NID, nil
	}
	ifc, err := net.InterfaceByName(cfg.Interfaces[0])
	if err != nil {
		return 0, fmt.Errorf("NID from %s: %w", cfg.Interfaces[0], err)
	}
	nid, err := wire.NIDFromMAC(ifc.HardwareAddr)
	if err != nil {
		return 0, fmt.Errorf("NID from %s's MAC: %w", cfg.Interfaces[0], err)
	}
	return nid, nil
}

// emit records one event on the timeline and in the history ilnpctl reads.
func (n *Node) emit(e timeline.Event) {
	if e.MonoNS == 0 {
		e.MonoNS = timeline.Now()
	}
	e.Node = n.cfg.Node
	n.timeline.Emit(e)
	n.history.add(e)
}

func (n *Node) count(name string) {
	n.mu.Lock()
	n.counters[name]++
	n.mu.Unlock()
}

// Run brings the node up, serves until ctx ends, and removes what it added. The datapath is
// attached before discovery starts, so no locator is ever in use without it.
func (n *Node) Run(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n.setStop(cancel)
	defer func() { err = errors.Join(err, n.shutdown()) }()

	if err := n.setup(); err != nil {
		return err
	}

	locEvents := make(chan locators.Event, 64)
	dpEvents, err := n.dp.Events(ctx)
	if err != nil {
		return fmt.Errorf("datapath events: %w", err)
	}
	luIn := make(chan receivedLU, 64)
	n.luQueue.Store(&luIn)
	go n.lusock.read(ctx, luIn)
	n.lusock.startAcks(ctx, func(wire.NID) { n.count("lu_ack_sent") }, func(peer wire.NID, err error) {
		n.count("lu_send_errors")
		n.log.Warn("LU-ACK send", "peer", peer, "err", err)
	})
	var echoIn chan receivedEcho // nil (never ready) without locator verification
	if n.chsock != nil {
		echoIn = make(chan receivedEcho, 64)
		go n.chsock.read(ctx, echoIn)
	}

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := locators.Run(ctx, locators.Options{
			Interfaces: n.cfg.Interfaces,
			NID:        n.nid,
			DAD:        locators.DADOptimistic,
			// The node forms [prefix:NID] itself; a kernel EUI-64 address beside it could
			// become an application's source address and escape ILNP.
			DisableKernelAutoconf: true,
			// The addresses outlive the daemon (adopt.go); a flush removes them.
			RemoveOnExit: false,
			Logger:       n.log,
		}, locEvents); err != nil {
			errc <- fmt.Errorf("locator discovery: %w", err)
		}
	}()
	if err := n.startServices(ctx, &wg, errc); err != nil {
		return err
	}
	// Cancel before waiting: on an error from errc the goroutines' ctx is still live.
	defer func() {
		cancel()
		wg.Wait()
	}()
	v4Events := n.watchIPv4(ctx, &wg, errc) // nil unless ipv4-locators on (xfamily.go)
	n.startKeepalive(ctx, &wg)

	n.adoptStaticLocators()
	n.log.Info("ilnpd running", "interfaces", n.cfg.Interfaces, "handoff", n.cfg.Handoff)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	touch := time.NewTicker(touchInterval)
	defer touch.Stop()
	for {
		n.host.endTurn(len(dpEvents) > 0) // the peer routes queued, in one batch (issue 28)
		n.persist()
		n.armTimer(timer)
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		// The events of one input go out in one write (timeline.Writer.Hold).
		case ev := <-locEvents:
			n.timeline.Hold()
			n.onLocatorEvent(ev)
			n.timeline.Release()
		case ev := <-v4Events:
			n.onIPv4Event(ev)
		case ev, ok := <-dpEvents:
			if !ok {
				// The stream closes when ctx ends too, and select may pick this case first.
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("datapath event stream ended")
			}
			n.timeline.Hold()
			n.onDatapathEvent(ev)
			n.timeline.Release()
		case r := <-luIn:
			n.timeline.Hold()
			n.onLU(r)
			n.timeline.Release()
		case e := <-echoIn:
			n.onEcho(e)
		case cmd := <-n.cmds:
			n.timeline.Hold() // a path poll's verdicts: 21,772 events in one at 100,000 sessions
			cmd()
			n.timeline.Release()
		case <-timer.C:
			n.onTimer()
		case <-touch.C:
			n.startSweep(ctx) // read off the loop, walked in steps (sweep.go)
			n.expireClamps(time.Now())
			n.securitySummary()
		case c, ok := <-n.sweepChunks():
			n.takeChunk(ctx, c, ok)
		case <-n.sweepReady():
			n.sweepStep(ctx)
		case <-n.persistReady():
			n.persistStep()
		case <-n.rescanReady():
			// A turn for the ILCC's next share of deadlines (armTimer asks NextDeadline), which
			// changes nothing the state file holds.
			n.continuity.stepTurn = true
		case <-n.rerouteReady():
			n.host.rerouteStep()
		}
	}
}

// setup loads the datapath and the raw socket and prepares the interfaces.
func (n *Node) setup() error {
	h, err := newHost(n.cfg.MTUHeadroom + encapHeadroom(n.cfg.IPv4Locators))
	if err != nil {
		return err
	}
	n.host = h
	h.viewOf = n.sessionViewOf
	h.log = n.log
	if err := n.mountPins(); err != nil {
		return err
	}
	n.dp, err = datapath.Load(datapath.Options{
		PinDir:               n.pinDir,
		NonceSize:            n.cfg.NonceSize,
		NonceFirstN:          uint32(n.cfg.NonceFirstN),
		EchoNonce:            n.cfg.EchoNonce,
		NewSessionsPerSecond: uint32(n.cfg.NewSessionsPerSecond),
		SessionTableSize:     uint32(n.cfg.SessionTableSize),
		EmbryoTableSize:      uint32(n.cfg.EmbryoTableSize),
		PathTableSize:        uint32(n.cfg.PathTableSize),
		EventRingSize:        uint32(n.cfg.EventRingSize),
		// A moving correspondent switches its data to a new locator the moment it sends the
		// LU, so its first packets from there can overtake the LU (which goes through this
		// daemon before the datapath learns the locator): dropping them loses data in a soft
		// handoff. The nonce already proves they belong to the session, and the locator they
		// came from changes nothing we send until an LU with that nonce says so.
		AcceptUnknownLocator: true,
		// Maps and TCX links outlive the daemon; the next one adopts them (adopt.go).
		KeepPinned: true,
	})
	if err != nil {
		return fmt.Errorf("load datapath: %w", err)
	}
	if err := n.dp.SetLocalNID(n.nid, 0); err != nil {
		return fmt.Errorf("datapath NID: %w", err)
	}
	if err := n.setupEncap(); err != nil {
		return err
	}
	for _, name := range n.cfg.Interfaces {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("interface %s: %w", name, err)
		}
		if err := n.dp.Attach(ifc.Index); err != nil {
			return fmt.Errorf("attach datapath to %s: %w", name, err)
		}
		n.ifaces[ifc.Index] = name
	}
	if n.lusock, err = openLUSocket(); err != nil {
		return err
	}
	if n.lv != nil {
		if n.chsock, err = openChallengeSocket(); err != nil {
			return err
		}
	}
	for ifindex := range n.ifaces {
		if err := n.lusock.joinSolicitedNode(ifindex, n.nid); err != nil {
			n.log.Warn("new locators may be unreachable for a second after they appear", "err", err)
		}
	}
	if err := n.adopt(); err != nil {
		return err
	}
	// adopt read the maps: events lost before now are accounted for (reconcile.go).
	if n.eventsLost, err = n.dp.EventsLost(); err != nil {
		n.log.Warn("datapath events lost", "err", err)
	}
	return nil
}

// shutdown leaves the datapath running for the next ilnpd, unless a flush was asked for.
func (n *Node) shutdown() error {
	tcpErr := errors.Join(n.tcpClose(), n.unclampAll()) // this daemon's own: nothing to hand over
	if n.flushing.Load() {
		return errors.Join(n.flushAll(), tcpErr)
	}
	return errors.Join(n.keep(), tcpErr)
}

// do runs fn on the loop and waits for it (commands from the control socket and the
// resolver), or gives up when ctx ends.
func (n *Node) do(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	select {
	case n.cmds <- func() {
		err := fn()
		n.host.flushRoutes() // the caller sees the peer routes it asked for in place
		done <- err
	}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) armTimer(t *time.Timer) {
	next := time.Now().Add(time.Hour)
	if d, ok := n.cache.NextDeadline(); ok && d.Before(next) {
		next = d
	}
	if d, ok := n.engine.NextDeadline(); ok && d.Before(next) {
		next = d
	}
	if d, ok := n.tcpNextDeadline(); ok && d.Before(next) {
		next = d
	}
	if d, ok := n.persistDeadline(); ok && d.Before(next) {
		next = d
	}
	if n.lv != nil {
		if d, ok := n.lv.NextDeadline(); ok && d.Before(next) {
			next = d
		}
	}
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(max(time.Until(next), 0))
}

// rerouteReady is ready while a move's pass over the peer routes has a share left
// (host.rerouteStep; issue 28), nil otherwise.
func (n *Node) rerouteReady() <-chan struct{} {
	if n.host.rerouting() {
		return sweepReadyCh
	}
	return nil
}

// rescanReady is ready while the ILCC queues its peers' deadlines a share per NextDeadline
// (ilcc.Rescanning; issue 28), nil otherwise.
func (n *Node) rescanReady() <-chan struct{} {
	if n.cache.Rescanning() {
		return sweepReadyCh
	}
	return nil
}

func (n *Node) onTimer() {
	now := time.Now()
	n.apply(n.cache.Tick(now), now)
	n.perform(n.engine.Tick(now))
	n.tcpOnTimer(now)
	if n.lv != nil {
		n.performLV(n.lv.Tick(now))
	}
}

// onLocatorEvent feeds discovery into the ILCC. A prefix becomes a locator once its
// [prefix:NID] address exists (optimistic DAD makes that immediate); later RAs refresh its
// lifetimes.
func (n *Node) onLocatorEvent(ev locators.Event) {
	now := time.Now()
	switch e := ev.(type) {
	case locators.RASeen:
		n.emit(timeline.Event{MonoNS: e.MonoNS, Kind: timeline.RASeen, Iface: e.Iface,
			Detail: "router " + e.Router.String()})
		n.apply(n.cache.RouterSeen(e.IfIndex, e.Router, e.RouterLifetime, now), now)
		if e.RouterLifetime == 0 {
			return
		}
		for _, p := range e.Prefixes {
			if !p.Autonomous || p.Prefix.Bits() != 64 {
				continue
			}
			loc, err := wire.ParseL64(p.Prefix.String())
			if err != nil {
				continue
			}
			addr := wire.ILV{Locator: loc, NID: n.nid}.Addr()
			if n.formed[addr] != e.IfIndex {
				continue // AddressFormed follows
			}
			n.updateLocal(loc, e.IfIndex, e.Router, p.Valid, p.Preferred, now)
		}
	case locators.AddressFormed:
		ilv, err := wire.ILVFromAddr(e.Addr)
		if err != nil || ilv.NID != n.nid {
			return
		}
		// Discovery holds RAs on links it knows are down, but one handled in the instant
		// between the link going down and that event can still re-form the address; that
		// locator is already gone, and making it active for a moment would send an LU naming
		// a dead locator.
		if ifc, err := net.InterfaceByIndex(e.IfIndex); err != nil || ifc.Flags&net.FlagRunning == 0 {
			n.log.Debug("address formed on a link that is down: ignored", "iface", e.Iface, "addr", e.Addr)
			return
		}
		n.formed[e.Addr] = e.IfIndex
		n.addLocatorAddress(e.Addr)
		n.log.Info("locator formed", "iface", e.Iface, "addr", e.Addr, "elapsed", e.Elapsed)
		n.updateLocal(ilv.Locator, e.IfIndex, e.Router, e.Valid, e.Valid, now)
	case locators.AddressGone:
		delete(n.formed, e.Addr)
		if ilv, err := wire.ILVFromAddr(e.Addr); err == nil && ilv.NID == n.nid {
			n.apply(n.cache.RemoveLocal(ilv.Locator, "address gone from "+e.Iface, now), now)
		}
	case locators.LinkChange:
		if !e.Up {
			for addr, idx := range n.formed {
				if idx == e.IfIndex {
					delete(n.formed, addr)
				}
			}
			n.apply(n.cache.InterfaceDown(e.IfIndex, now), now)
		}
		n.log.Info("link", "iface", e.Iface, "up", e.Up)
	case locators.AddressError:
		n.log.Warn("address", "iface", e.Iface, "addr", e.Addr, "err", e.Err)
	}
}

// adoptStaticLocators makes the [L64:NID] addresses already configured on the ILNP interfaces
// locators that never expire: a correspondent on a wired network without Router
// Advertisements is an ILNP node too.
func (n *Node) adoptStaticLocators() {
	now := time.Now()
	for ifindex, name := range n.ifaces {
		statics, err := n.host.staticLocators(ifindex)
		if err != nil {
			n.log.Warn("static locators", "iface", name, "err", err)
			continue
		}
		for _, s := range statics {
			ilv, err := wire.ILVFromAddr(s.addr)
			if err != nil {
				continue
			}
			if ilv.NID != n.nid {
				// A SLAAC address the kernel formed before ilnpd turned autoconf off: left
				// in place, a UDP server could answer from it as plain IPv6 and escape ILNP.
				if s.autoconfigured {
					n.log.Info("removing kernel SLAAC address", "iface", name, "addr", s.addr)
					if err := n.host.removeAddress(ifindex, s.addr); err != nil {
						n.log.Warn("kernel SLAAC address", "err", err)
					}
				}
				continue
			}
			// An interface that just came up (a move while the daemon was down) delivers
			// to it a few milliseconds later.
			n.addLocatorAddress(s.addr)
			n.log.Info("static locator", "iface", name, "addr", s.addr, "router", s.router)
			n.updateLocal(ilv.Locator, ifindex, s.router, ilcc.Infinite, ilcc.Infinite, now)
		}
	}
	n.adoptStaticIPv4(now)
}

// addLocatorAddress keeps a locator's [L:NID] address on lo and returns once the kernel
// delivers to it (receivableTimeout at most): the locator is announced after this, and the
// LU it causes is answered to that address (formed L64s, static ones found at start, L32s).
func (n *Node) addLocatorAddress(addr netip.Addr) {
	if err := n.host.addIdentity(addr); err != nil {
		n.log.Warn("identity address", "addr", addr, "err", err)
	}
	if !n.host.waitReceivable(addr, receivableTimeout) {
		n.log.Warn("locator address not yet receivable; using it anyway", "addr", addr, "waited", receivableTimeout)
	}
}

func (n *Node) updateLocal(loc wire.L64, ifindex int, router netip.Addr, valid, preferred time.Duration, now time.Time) {
	eff, err := n.cache.UpdateLocal(ilcc.LocalUpdate{
		Locator:           loc,
		IfIndex:           ifindex,
		Router:            router,
		ValidLifetime:     valid,
		PreferredLifetime: preferred,
	}, now)
	if err != nil {
		n.log.Warn("locator update rejected", "locator", loc, "err", err)
		return
	}
	n.apply(eff, now)
}

// apply carries out what an ILCC operation decided: datapath first (so packets follow the new
// state), then ACKs (which must leave towards the new locator), then LUs.
func (n *Node) apply(eff ilcc.Effects, now time.Time) {
	for _, e := range eff.Events {
		ev := timeline.Event{Kind: e.Kind, Detail: e.Detail}
		if e.Locator != 0 {
			ev.Locator = e.Locator.String()
		}
		if e.Peer != 0 {
			ev.Peer = e.Peer.String()
		}
		switch {
		case e.From == 0 && e.To != 0:
			ev.Detail = joinDetail(ev.Detail, "new -> "+e.To.String())
		case e.From != 0:
			ev.Detail = joinDetail(ev.Detail, fmt.Sprintf("%s -> %s", e.From, e.To))
		}
		n.emit(ev)
	}
	// The datapath can send from an IPv6 active locator to an IPv4 peer (it encapsulates from
	// its IPv4 locator) but not from an IPv4 one to an IPv6 peer: when the active locator
	// becomes IPv4, the correspondents' new (IPv4) locators go in first (xfamily.go).
	// A soft switch holds the TCP sockets' new data back before the datapath moves them.
	n.tcpBeforeSwitch(eff)
	bindingsFirst := eff.LocalChanged && n.activeIsIPv4()
	// The peer routes (a netlink request per correspondent: 75 ms for 1,000 of them, issue
	// 28) move after the LUs are out when the interface they point at is still up: until
	// then the datapath sends the session's packets, LUs included, out of the active
	// locator's interface itself (ilnp_egress_redirect).
	routesAfter := false
	if eff.LocalChanged && !bindingsFirst {
		routesAfter = len(eff.Updates) > 0 && n.host.routesUp()
		n.syncLocalsFirst()
		if !routesAfter {
			n.syncLocalsRoutes()
		}
		n.tcpActiveChanged()
	}
	if bindingsFirst {
		n.syncLocalMaps()
	}
	for _, b := range eff.Bindings {
		n.syncBinding(b)
	}
	n.tcpRemotePinProbes()
	if bindingsFirst {
		n.syncLocals()
		n.tcpActiveChanged()
	}
	for _, peer := range eff.Removed {
		n.deleteSessions(peer)
		if err := n.host.unroutePeer(peer); err != nil {
			n.log.Warn("peer route", "peer", peer, "err", err)
		}
		n.engine.Forget(peer)
		n.dialects.Forget(peer)
		n.guard.Forget(peer)
		n.retireEphemeral(peer)
		n.lvClosed(peer)
	}
	for _, ack := range eff.Acks {
		n.sendAck(ack)
	}
	for _, msg := range eff.Updates {
		// The engine's clock starts now, as the LU leaves: the event's own time can be up to
		// receivableTimeout older, which would fire the retransmission early and inflate the
		// RTT sample by the daemon's own delay.
		actions, err := n.engine.Send(msg, time.Now())
		if err != nil {
			n.log.Warn("LU not sent", "peer", msg.Peer, "err", err)
			continue
		}
		n.perform(actions)
	}
	if routesAfter {
		n.syncLocalsRoutes()
	}
	for _, b := range eff.Bindings {
		// Our LU to the correspondent is unanswered and the locator it went to is no longer
		// in the correspondent's set (its LU arrived, or the rendezvous found it: the double
		// jump in hard handoff): send ours to its active locator now instead of at the next
		// timeout. An LU just started above already goes there; one to a locator still
		// listed (soft handoff) can still arrive and is left alone.
		if p, ok := n.engine.Outstanding(b.Peer); ok && !b.RemoteUsable(p.Message.Dest.Locator) {
			n.perform(n.engine.Redirect(b.Peer, wire.ILV{Locator: b.RemoteLocator, NID: b.Peer}, time.Now()))
		}
	}
	// The sockets' reactions that need not precede the switch, now that the LUs are out.
	n.tcpFlush()
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// deleteSessions removes the datapath's sessions with peer: the one with the stable NID and
// the one with the peer's ephemeral NID, if any (no scan of the table: a flood's worth of
// expiries comes through here).
func (n *Node) deleteSessions(peer wire.NID) {
	for _, local := range n.localNIDsFor(peer) {
		if err := n.dp.DeleteSession(local, peer); err != nil && !errors.Is(err, datapath.ErrNotFound) {
			n.log.Warn("delete session", "peer", peer, "err", err)
		}
	}
}

// localNIDsFor lists the local NIDs a session with peer can have.
func (n *Node) localNIDsFor(peer wire.NID) []wire.NID {
	out := []wire.NID{n.nid}
	if n.eph != nil {
		if e, ok := n.eph.Lookup(peer); ok {
			out = append(out, e)
		}
	}
	return out
}

// syncLocals writes the ILCC's local locators and the active one into the datapath, and moves
// the peer routes to the active interface.
func (n *Node) syncLocals() {
	n.syncLocalsFirst()
	n.syncLocalsRoutes()
}

// syncLocalsFirst is syncLocals' datapath part: the local locators and the active one.
func (n *Node) syncLocalsFirst() {
	n.syncLocalMaps()
	active, ok := n.cache.Active()
	var loc wire.L64
	if ok {
		loc = active.Locator
		n.host.active = loc
		n.syncEphemeralAddrs() // route source hints need their addresses first
	}
	if err := n.dp.SetActiveLocator(loc); err != nil {
		n.log.Warn("datapath active locator", "err", err)
	}
}

// syncLocalsRoutes is syncLocals' host part: the peer routes, the identity addresses and the
// published locators.
func (n *Node) syncLocalsRoutes() {
	if active, ok := n.cache.Active(); ok {
		if err := n.host.reroutePeers(active.IfIndex, active.Router); err != nil {
			n.log.Warn("peer routes", "err", err)
		}
	}
	n.pruneIdentities()
	n.publishLocators() // DNS records follow the valid set; never blocks (rendezvous.go)
}

// syncLocalMaps writes the ILCC's local locators into the datapath (not which one is active).
func (n *Node) syncLocalMaps() {
	current := map[wire.L64]ilcc.Local{}
	locals := n.cache.Locals()
	for _, l := range locals {
		current[l.Locator] = l
		var err error
		if encap.IsL32(l.Locator) {
			err = n.putEncapLocal(l) // xfamily.go
		} else {
			err = n.dp.PutLocalLocator(datapath.LocalLocator{
				Locator: l.Locator,
				State:   datapathState(l.State),
				Ifindex: l.IfIndex,
				NextHop: l.Router,
			})
		}
		if err != nil {
			n.log.Warn("datapath locator", "locator", l.Locator, "err", err)
		}
	}
	for loc := range n.locals {
		if _, ok := current[loc]; !ok {
			if err := n.dp.DeleteLocalLocator(loc); err != nil && !errors.Is(err, datapath.ErrNotFound) {
				n.log.Warn("datapath locator delete", "locator", loc, "err", err)
			}
		}
	}
	n.locals = current
	n.syncEncapLocal(locals)
}

// pruneIdentities drops identity addresses on lo whose locator or NID is gone (a retired
// ephemeral one) and that no session uses as its view.
func (n *Node) pruneIdentities() {
	inUse := map[netip.Addr]bool{}
	for _, b := range n.cache.Bindings() {
		inUse[b.SessionLocal.Addr()] = true
	}
	for addr := range n.host.identities {
		ilv, err := wire.ILVFromAddr(addr)
		if err != nil {
			continue
		}
		if _, ok := n.locals[ilv.Locator]; (ok && n.localNID(ilv.NID)) || inUse[addr] {
			continue
		}
		if err := n.host.removeIdentity(addr); err != nil {
			n.log.Warn("identity address", "err", err)
		}
	}
}

func datapathState(s ilcc.State) datapath.LocatorState {
	switch s {
	case ilcc.Active:
		return datapath.LocatorActive
	case ilcc.Valid:
		return datapath.LocatorValid
	case ilcc.Aged:
		return datapath.LocatorAged
	}
	return datapath.LocatorExpired
}

// syncBinding writes one correspondent's remote locators into the datapath.
func (n *Node) syncBinding(b ilcc.Binding) {
	locs := make([]datapath.RemoteLocator, 0, len(b.RemoteLocators))
	for _, r := range b.RemoteLocators {
		if len(locs) == datapath.MaxRemoteLocators {
			break
		}
		locs = append(locs, datapath.RemoteLocator{
			Locator:    r.Locator,
			State:      datapathState(r.State),
			Preference: r.Preference,
			Lifetime:   r.Lifetime,
		})
	}
	if _, err := n.dp.SetRemoteLocatorsOf(n.localNIDsFor(b.Peer), b.Peer, locs, b.RemoteLocator); err != nil &&
		!errors.Is(err, datapath.ErrNotFound) {
		n.log.Warn("datapath remote locators", "peer", b.Peer, "err", err)
	}
}

// perform carries out the LU engine's actions.
func (n *Node) perform(actions []lu.Action) {
	for _, a := range actions {
		switch a.Kind {
		case lu.Transmit:
			b, ok := n.cache.Binding(a.Message.Peer)
			if !ok {
				continue
			}
			// Stamped as it is handed to the socket: its ACK, stamped at kernel arrival, can
			// come back over a LAN before the write call has returned.
			sentAt := timeline.Now()
			err := n.sendLU(b, a.Message.Update) // in the peer's dialect (dialect.go)
			detail := fmt.Sprintf("locators=%d timeout=%s", len(a.Message.Update.Locators), a.Timeout)
			if a.Redirected {
				n.count("lu_redirected")
				detail = joinDetail(detail, "redirected to "+a.Message.Dest.Locator.String())
			}
			if err != nil {
				n.count("lu_send_errors")
				detail = joinDetail(detail, err.Error())
				n.log.Warn("LU send", "peer", a.Message.Peer, "err", err)
			}
			n.count("lu_sent")
			n.emit(timeline.Event{MonoNS: sentAt, Kind: timeline.LUSent, Peer: a.Message.Peer.String(),
				Locator: a.Message.Source.Locator.String(), Attempt: a.Attempt, Detail: detail})
		case lu.GiveUp:
			n.count("lu_gave_up")
			n.emit(timeline.Event{Kind: timeline.LUGaveUp, Peer: a.Message.Peer.String(), Attempt: a.Attempt})
			n.cache.LUGaveUp(a.Message.Peer, time.Now())
		}
		n.reresolveOn(a)
	}
}

func (n *Node) sendAck(ack ilcc.Ack) {
	b, ok := n.cache.Binding(ack.Peer)
	if !ok {
		return
	}
	queued, err := n.queueLUAck(b, ack.Update)
	if err != nil {
		n.count("lu_send_errors")
		n.log.Warn("LU-ACK send", "peer", ack.Peer, "err", err)
		return
	}
	if !queued {
		n.count("lu_ack_sent")
	}
	n.emit(timeline.Event{Kind: timeline.LUAckSent, Peer: ack.Peer.String(),
		Detail: fmt.Sprintf("locators=%d", len(ack.Update.Locators))})
}

// onDatapathEvent handles what the BPF programs reported.
func (n *Node) onDatapathEvent(ev datapath.Event) {
	now := time.Now()
	switch ev.Type {
	case datapath.EventSessionInitiator, datapath.EventSessionResponder:
		n.openSession(ev.LocalNID, ev.RemoteNID, int64(ev.Ns), ev.Type.String(), ev.Type == datapath.EventSessionInitiator)
	case datapath.EventNonceLearned:
		s, err := n.dp.GetSession(ev.LocalNID, ev.RemoteNID)
		if err != nil {
			return
		}
		n.dialects.LearnNonce(ev.RemoteNID, s.RemoteNonce, s.LocalNonce) // FreeBSD answers with ours
		eff, err := n.cache.LearnRemoteNonce(ev.RemoteNID, s.RemoteNonce, now)
		if err != nil {
			n.log.Warn("nonce not learned", "peer", ev.RemoteNID, "err", err)
			return
		}
		n.apply(eff, now)
	case datapath.EventBadNonce, datapath.EventMissingNonce, datapath.EventMultipleNonces:
		if n.securityEvent("security_"+ev.Type.String(), "packet dropped", "src", ev.Src, "dst", ev.Dst) {
			n.emit(timeline.Event{MonoNS: int64(ev.Ns), Kind: timeline.BadNonce, Peer: ev.RemoteNID.String(),
				Detail: fmt.Sprintf("%s from %s", ev.Type, ev.Src)})
		}
	case datapath.EventParamProblem:
		// The datapath checked that the error quotes our nonce and already flagged the
		// session for plain IPv6 (bpf/lib/icmperr.h): nothing waits for the daemon.
		n.count("peers_not_ilnp")
		n.emit(timeline.Event{MonoNS: int64(ev.Ns), Kind: timeline.ParameterProblem, Peer: ev.RemoteNID.String(),
			Detail: "peer does not understand the nonce option (RFC 6744 s.6): plain IPv6 from now on"})
		n.log.Warn("peer rejected the nonce option; it is not an ILNP node, the session falls back to plain IPv6", "src", ev.Src)
	case datapath.EventPathMTUBelowMin:
		n.clampPathMTU(ev, now) // pmtu.go
	case datapath.EventInvalidLocalLocator:
		n.datapathDrop(ev)
	case datapath.EventUnknownLocator:
		n.roam(ev) // a NAT endpoint (xfamily.go)
	default:
		n.log.Debug("datapath event", "type", ev.Type.String(), "src", ev.Src, "dst", ev.Dst)
	}
}

// sessionViewOf is this node's view of the ILCC session whose correspondent's view is peer
// (host.viewOf).
func (n *Node) sessionViewOf(peer netip.Addr) (netip.Addr, bool) {
	ilv, err := wire.ILVFromAddr(peer)
	if err != nil {
		return netip.Addr{}, false
	}
	local, remote, ok := n.cache.SessionView(ilv.NID)
	if !ok || remote != ilv {
		return netip.Addr{}, false
	}
	return local.Addr(), true
}

// openSession records the datapath's session between local and remote in the ILCC and gives
// the peer its route (a datapath session event, or an LU that overtook that event).
func (n *Node) openSession(local, remote wire.NID, ns int64, how string, initiator bool) {
	now := time.Now()
	s, err := n.dp.GetSession(local, remote)
	if err != nil {
		n.log.Warn("new session vanished", "peer", remote, "err", err)
		return
	}
	rl := make([]wire.LocatorEntry, 0, len(s.RemoteLocators))
	for _, r := range s.RemoteLocators {
		rl = append(rl, wire.LocatorEntry{Locator: r.Locator, Preference: r.Preference, Lifetime: r.Lifetime})
	}
	eff, err := n.cache.OpenSession(ilcc.Session{
		Local:          wire.ILV{Locator: s.LocalView, NID: s.LocalNID},
		Remote:         wire.ILV{Locator: s.RemoteView, NID: s.RemoteNID},
		RemoteLocators: rl,
		LocalNonce:     s.LocalNonce,
		RemoteNonce:    s.RemoteNonce,
		Initiator:      initiator,
	}, now)
	if err != nil {
		n.log.Warn("session not recorded", "peer", remote, "err", err)
		return
	}
	if active, ok := n.cache.Active(); ok {
		if err := n.host.routePeer(s.RemoteAddr(), active.IfIndex, active.Router); err != nil {
			n.log.Warn("peer route", "err", err)
		}
	}
	n.emit(timeline.Event{MonoNS: ns, Kind: timeline.SessionNew, Peer: remote.String(),
		Detail: fmt.Sprintf("%s %s -> %s", how, s.LocalAddr(), s.RemoteAddr())})
	n.apply(eff, now)
	n.lvOpened(remote, remoteL64s(s.RemoteLocators), sessionRemoteActive(s), initiator)
	n.dialects.LearnLocators(remote, remoteL64s(s.RemoteLocators)) // published IPv4 locators
	n.releaseHeldLU(remote)
}

// RegisterPeer makes name an ILNP correspondent with these I-LVs (most preferred first): the
// first packet an application sends to the most preferred one opens an ILNP session. It runs
// on the loop and returns once the datapath knows the peer.
func (n *Node) RegisterPeer(ctx context.Context, name string, ilvs []wire.RankedILV) error {
	if len(ilvs) == 0 {
		return fmt.Errorf("peer %s: no I-LV", name)
	}
	return n.do(ctx, func() error {
		first := ilvs[0].ILV
		active := n.reachableLocator(ilvs) // the first, unless its family is out of reach (xfamily.go)
		locs := make([]datapath.RemoteLocator, 0, len(ilvs))
		for _, v := range ilvs {
			if v.ILV.NID != first.NID || len(locs) == datapath.MaxRemoteLocators {
				continue
			}
			state := datapath.LocatorValid
			if v.ILV.Locator == active {
				state = datapath.LocatorActive
			}
			locs = append(locs, datapath.RemoteLocator{Locator: v.ILV.Locator, State: state, Preference: v.Preference})
		}
		if err := n.dp.PutPeer(datapath.Peer{Addr: first.Addr(), Active: active, Locators: locs}); err != nil {
			return fmt.Errorf("register peer %s: %w", name, err)
		}
		if n.eph != nil {
			// Without its own NID the peer would see the stable one: refuse instead.
			if err := n.ephemeralFor(first.NID, first.Addr()); err != nil {
				return fmt.Errorf("register peer %s: %w", name, err)
			}
		}
		if active, ok := n.cache.Active(); ok {
			if err := n.host.routePeer(first.Addr(), active.IfIndex, active.Router); err != nil {
				n.log.Warn("peer route", "err", err)
			}
		}
		n.mu.Lock()
		n.peers[name] = ilvs
		n.mu.Unlock()
		n.emit(timeline.Event{Kind: timeline.PeerAdded, Peer: first.NID.String(), Detail: name + " " + first.Addr().String()})
		return nil
	})
}

func remoteL64s(rs []datapath.RemoteLocator) []wire.L64 {
	out := make([]wire.L64, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Locator)
	}
	return out
}

// sessionRemoteActive is the locator the session sends to (datapath: 0 means the view's).
func sessionRemoteActive(s datapath.Session) wire.L64 {
	if s.RemoteActive != 0 {
		return s.RemoteActive
	}
	return s.RemoteView
}
